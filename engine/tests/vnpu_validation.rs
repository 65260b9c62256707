//! The validation set of published phone measurements: every row cited, the split follows its
//! rule, every row is predicted, and the fitted profile values are exactly what the fit on the fit
//! rows gives (so no profile value can have been tuned on held-out rows).

use std::collections::BTreeMap;

use unmask_engine::backend::vnpu::validation::{
    evaluate, fit_profile, fit_runtime_factor, FitParam, Split, Unit, ValidationSet,
};
use unmask_engine::backend::vnpu::DeviceProfile;

#[test]
fn rows_are_cited_and_the_split_follows_the_rule() {
    let set = ValidationSet::builtin().unwrap();
    assert!(set.rows.len() >= 40, "{} rows", set.rows.len());
    let rule = set.rule_split();
    for r in &set.rows {
        assert!(!r.source.is_empty() && !r.table.is_empty() && !r.derivation.is_empty(), "{}", r.id);
        assert_eq!(r.split, rule[&r.id], "row {} is not on the side the split rule puts it", r.id);
    }
    assert!(set.rows.iter().any(|r| r.split == Split::Heldout));
}

/// The split rule was applied once (2026-12-02) to the rows then in the set. A row added later is
/// outside the rule: it must be held out, dated after the split, named by no fit and no runtime
/// factor, and it must leave the original rows' clusters (hence their sides) as they were.
#[test]
fn rows_added_after_the_split_are_held_out_and_leave_the_split_alone() {
    const SPLIT_DAY: &str = "2026-12-02";
    let set = ValidationSet::builtin().unwrap();
    assert!(set.split_rule.contains(&format!("Applied once ({SPLIT_DAY})")), "{}", set.split_rule);
    let fresh: Vec<_> = set.rows.iter().filter(|r| r.added_after_split.is_some()).collect();
    for r in &fresh {
        let day = r.added_after_split.as_deref().unwrap();
        let well_formed = day.len() == 10
            && day.chars().enumerate().all(|(i, c)| if i == 4 || i == 7 { c == '-' } else { c.is_ascii_digit() });
        assert!(well_formed && day > SPLIT_DAY, "{}: added_after_split `{day}` is not a day after {SPLIT_DAY}", r.id);
        assert_eq!(r.split, Split::Heldout, "{}: a row added after the split is held out", r.id);
        assert!(!set.fit_log.iter().any(|e| e.rows.contains(&r.id)), "{}: a fresh row set a profile value", r.id);
        assert!(!set.runtimes.iter().any(|f| f.rows.contains(&r.id)), "{}: a fresh row set a runtime factor", r.id);
        assert!(!set.heldout_seen_before_change.contains(&r.id), "{}", r.id);
    }
    // The original rows alone give the same split as with the fresh rows present.
    let original = ValidationSet {
        rows: set.rows.iter().filter(|r| r.added_after_split.is_none()).cloned().collect(),
        ..set.clone()
    };
    let (with, without) = (set.rule_split(), original.rule_split());
    for r in &original.rows {
        assert_eq!(with[&r.id], without[&r.id], "{}: the fresh rows moved an original row's side", r.id);
    }
    // Fresh rows are predicted and reported apart.
    if !fresh.is_empty() {
        let report = evaluate(&set).unwrap();
        for r in report.rows.iter().filter(|r| r.added_after_split) {
            assert!(fresh.iter().any(|f| f.id == r.id) && r.split == Split::Heldout, "{}", r.id);
        }
        let counted: usize = report.profiles.iter().map(|p| p.heldout_fresh.rows).sum();
        assert_eq!(counted, fresh.len());
    }
}

#[test]
fn every_row_is_predicted() {
    let set = ValidationSet::builtin().unwrap();
    let report = evaluate(&set).unwrap();
    assert_eq!(report.rows.len(), set.rows.len());
    for r in &report.rows {
        assert!(r.predicted.is_finite() && r.predicted > 0.0, "{r:?}");
    }
    for name in ["sm8650", "sm8750", "sm8850"] {
        assert!(report.profile(name).unwrap().heldout.rows > 0, "{name} has held-out rows");
    }
}

#[test]
fn fitted_profile_values_are_the_fit_of_the_fit_rows() {
    let set = ValidationSet::builtin().unwrap();
    let profiles: std::collections::BTreeSet<&str> = set.fit_log.iter().map(|e| e.profile.as_str()).collect();
    for name in profiles {
        let current = DeviceProfile::builtin(name).unwrap();
        // Start from the values before the fit (as logged) and run the fit on the fit rows.
        let mut start = current.clone();
        let mut fitted_fields = Vec::new();
        for e in set.fit_log.iter().filter(|e| e.profile == name && e.note.starts_with("fit")) {
            let param = FitParam::ALL.into_iter().find(|p| p.field() == e.field).expect("a fitted field");
            param.set(&mut start, e.before);
            fitted_fields.push((param, e.after));
        }
        let (after, _) = fit_profile(&set, &start).unwrap();
        for (param, logged) in fitted_fields {
            let (got, held) = (param.get(&after).unwrap(), param.get(&current).unwrap());
            assert!((got - held).abs() <= 0.005 * held, "{name}.{}: profile {held}, fit {got}", param.field());
            assert!((logged - held).abs() <= 1e-12, "{name}.{}: fit log {logged}, profile {held}", param.field());
        }
    }
    // Transferred values equal the fitted ones they came from.
    for e in set.fit_log.iter().filter(|e| e.note.starts_with("transferred")) {
        let from = e.from_profile.as_deref().expect("a transfer names the profile it comes from");
        assert!(
            set.fit_log.iter().any(|f| f.profile == from && f.field == e.field && f.note.starts_with("fit")),
            "{}.{}: {from} has no fitted value to transfer",
            e.profile,
            e.field
        );
        let param = FitParam::ALL.into_iter().find(|p| p.field() == e.field).unwrap();
        let source = param.get(&DeviceProfile::builtin(from).unwrap());
        assert_eq!(param.get(&DeviceProfile::builtin(&e.profile).unwrap()), source, "{}.{}", e.profile, e.field);
        assert_eq!(Some(e.after), source, "{}.{}: fit log", e.profile, e.field);
    }
}

/// A third-party runtime's factor is the fit of its own fit rows against the profiles as they
/// stand, and only its rows name it.
#[test]
fn runtime_factors_are_the_fit_of_their_fit_rows() {
    let set = ValidationSet::builtin().unwrap();
    let profiles: BTreeMap<String, DeviceProfile> =
        DeviceProfile::list_builtin().iter().map(|n| (n.to_string(), DeviceProfile::builtin(n).unwrap())).collect();
    assert!(!set.runtimes.is_empty());
    for rt in &set.runtimes {
        let (f, rows) = fit_runtime_factor(&set, &rt.name, &profiles).unwrap();
        assert!(
            (f - rt.matrix_efficiency_factor).abs() <= 0.005 * f,
            "{}: recorded {}, fit {f}",
            rt.name,
            rt.matrix_efficiency_factor
        );
        assert_eq!(rows, rt.rows, "{}", rt.name);
        for r in set.rows.iter().filter(|r| rows.contains(&r.id)) {
            assert_eq!(r.split, Split::Fit, "{}", r.id);
        }
    }
    // The profile's NPU rates are the vendor runtime's: no third-party row informs them.
    for e in &set.fit_log {
        for id in &e.rows {
            let r = set.rows.iter().find(|r| &r.id == id).unwrap();
            let third_party_npu = r.runtime.is_some() && r.unit == Unit::Npu;
            assert!(!(third_party_npu && e.field.starts_with("npu.")), "{}.{} uses {id}", e.profile, e.field);
        }
    }
}

/// Prints the split, the fit and every prediction (`--ignored --nocapture`).
#[test]
#[ignore]
fn print_validation() {
    let set = ValidationSet::builtin().unwrap();
    let rule = set.rule_split();
    for r in &set.rows {
        println!("split {} {:?}", r.id, rule[&r.id]);
    }
    let mut profiles = BTreeMap::new();
    for name in DeviceProfile::list_builtin() {
        profiles.insert(name.to_string(), DeviceProfile::builtin(name).unwrap());
    }
    for name in ["sm8650", "sm8750", "sm8850"] {
        let p = DeviceProfile::builtin(name).unwrap();
        let (fitted_profile, fitted) = fit_profile(&set, &p).unwrap();
        for f in fitted {
            println!("fit {name} {} {} -> {} (bound {}) rows {:?}", f.field, f.before, f.after, f.at_bound, f.rows);
        }
        profiles.insert(name.to_string(), fitted_profile);
    }
    for rt in &set.runtimes {
        let (f, rows) = fit_runtime_factor(&set, &rt.name, &profiles).unwrap();
        println!("runtime {} factor {} -> {f} rows {rows:?}", rt.name, rt.matrix_efficiency_factor);
    }
}

/// Prints every prediction (`--ignored --nocapture`).
#[test]
#[ignore]
fn print_predictions() {
    let set = ValidationSet::builtin().unwrap();
    let report = evaluate(&set).unwrap();
    for r in &report.rows {
        println!(
            "row {:<50} {:?} {:>9.2} pred {:>9.2} x{:.2} s{}",
            r.id, r.split, r.published, r.predicted, r.factor, r.sessions
        );
    }
    for p in &report.profiles {
        println!("profile {} heldout {:?} fit {:?}", p.profile, p.heldout, p.fit);
    }
}
