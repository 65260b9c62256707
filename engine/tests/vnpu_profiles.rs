//! Device profiles: all built-ins load, every number has a source, files round-trip.

use std::path::Path;

use unmask_engine::backend::vnpu::DeviceProfile;

#[test]
fn builtin_profiles_are_complete_and_cited() {
    let names = DeviceProfile::list_builtin();
    for want in ["sm8650", "sm8750", "sm8850", "dimensity9400", "kirin9010", "generic", "m2-max", "a18-pro", "host-cpu"] {
        assert!(names.contains(&want), "missing {want}");
    }
    for name in names {
        let p = DeviceProfile::builtin(name).unwrap();
        assert_eq!(p.name, name);
        let sources = p.sources();
        assert!(sources.len() > 10, "{name}: {} cited fields", sources.len());
        for (field, src) in sources {
            assert!(!src.trim().is_empty(), "{name}.{field} has no source");
        }
        assert_eq!(p.has_npu(), name != "host-cpu");
    }
}

#[test]
fn profiles_load_from_a_path_and_round_trip() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let from_file = DeviceProfile::from_path(&dir.join("sm8850.json")).unwrap();
    assert_eq!(from_file, DeviceProfile::builtin("SM8850").unwrap());
    let json = serde_json::to_string(&from_file).unwrap();
    let back = DeviceProfile::from_json_str(&json, Path::new("mem")).unwrap();
    assert_eq!(back, from_file);
}

#[test]
fn unknown_profile_and_missing_source_are_errors() {
    assert!(DeviceProfile::builtin("sm9999").is_err());
    let mut v: serde_json::Value = serde_json::to_value(DeviceProfile::builtin("generic").unwrap()).unwrap();
    v["memory"]["dram_gbps"]["source"] = serde_json::json!("");
    assert!(DeviceProfile::from_json_str(&v.to_string(), Path::new("mem")).is_err());
}

#[test]
fn published_figures_are_the_cited_ones() {
    let p = DeviceProfile::builtin("sm8650").unwrap();
    let n = p.npu.as_ref().unwrap();
    assert_eq!(n.tile_m.value, 32);
    assert_eq!(n.vtcm_bytes.value, 8 << 20);
    assert_eq!(n.launch_overhead_s.value, 160e-6);
    assert_eq!(n.session_va_bytes.value, 3 * (1 << 30) + 3 * (1 << 28));
    assert_eq!(DeviceProfile::builtin("sm8850").unwrap().npu.unwrap().int8_tops.value, 89.4);
    assert_eq!(DeviceProfile::builtin("host-cpu").unwrap().memory.dram_gbps.value, 11.0);
    // Apple Neural Engine profiles (docs/sources.md §A1).
    let m2 = DeviceProfile::builtin("m2-max").unwrap();
    let ane = m2.npu.as_ref().unwrap();
    assert_eq!(ane.fp16_tops.value, 15.8);
    assert_eq!(ane.dram_read_gbps.value, 62.0);
    assert_eq!(ane.launch_overhead_s.value, 95e-6);
    assert_eq!(m2.memory.dram_gbps.value, 400.0);
    assert_eq!(m2.cpu.total_cores(), 12);
    let a18 = DeviceProfile::builtin("a18-pro").unwrap();
    assert_eq!(a18.npu.as_ref().unwrap().int8_tops.value, 35.0);
    assert_eq!(a18.cpu.total_cores(), 6);
}

/// Every source lives in the repository: a section of docs/sources.md that exists, a fit to the
/// validation set's fit rows, a measurement on this machine, or an estimate that says so.
#[test]
fn every_source_is_in_the_repository_or_an_estimate() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/sources.md")).unwrap();
    let anchors: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("## §"))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
        .collect();
    for name in DeviceProfile::list_builtin() {
        for (field, src) in DeviceProfile::builtin(name).unwrap().sources() {
            let kind_ok = src.starts_with("estimate")
                || src.starts_with("fit")
                || src.starts_with("measured here")
                || src.contains("docs/sources.md §");
            assert!(kind_ok, "{name}.{field}: source is neither cited in docs/sources.md, fitted, measured nor an estimate: {src}");
            assert!(!src.replace("docs/sources.md", "").contains(".md"), "{name}.{field} points outside the repository: {src}");
            if src.starts_with("estimate") {
                assert!(src.len() > 30, "{name}.{field}: an estimate must say how it was derived: {src}");
            }
            for part in src.split("docs/sources.md §").skip(1) {
                let anchor: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
                let anchor = anchor.trim_end_matches('.');
                assert!(anchors.iter().any(|a| a == anchor), "{name}.{field}: docs/sources.md has no §{anchor}");
            }
            if src.starts_with("fit ") && name != "host-cpu" {
                assert!(src.contains("validation/published.json"), "{name}.{field}: a fit names its rows: {src}");
            }
        }
    }
}
