//! The fuzz harness in CI: every stored crashing input replays cleanly, and every target runs for
//! a bounded time without a crash or an allocation violation.
//!
//! `UNMASK_FUZZ_SECS` sets the seconds per target (default 4) and `UNMASK_FUZZ_SEED` the seed
//! (default `fuzz::DEFAULT_SEED`, printed by each test). New crashing inputs are saved under
//! `tests/robustness/fuzz-regressions/<target>/`; commit them with the engine fix.

use unmask_robustness::fuzz::{self, Finding, FuzzConfig, TrackingAlloc};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc;

/// An engine bug the fuzzer found that is not fixed yet.
struct OpenBug {
    /// Each must occur in the finding's location, engine frame or message.
    at: &'static [&'static str],
    /// Its regression input, relative to `fuzz-regressions/` (its folder names the target).
    file: &'static str,
}

/// Open engine bugs: findings matching `at` are printed but do not fail the fuzz tests, and their
/// inputs are skipped by `regressions_replay_cleanly` (the ignored
/// `open_engine_bugs_still_reproduce` replays them). Remove an entry once its bug is fixed.
/// `at` names engine lines as they were when found; a shifted line shows up as a new finding.
const OPEN_ENGINE_BUGS: &[OpenBug] = &[
    // None open: the overflowing tensor sizes, the `tokenizers` panics (now caught and reported
    // as tokenizer errors) and the honoured padding were fixed; their inputs replay in
    // `regressions_replay_cleanly`.
];

/// Whether a finding (of any target) is one of the open bugs.
fn is_open_bug(f: &Finding) -> bool {
    let seen = |s: &str| {
        f.location.contains(s) || f.message.contains(s) || f.engine_frame.as_deref().is_some_and(|e| e.contains(s))
    };
    OPEN_ENGINE_BUGS.iter().any(|b| b.at.iter().all(|s| seen(s)))
}

fn config() -> FuzzConfig {
    FuzzConfig { save_dir: Some(fuzz::regressions_dir()), known: Some(is_open_bug), ..FuzzConfig::from_env() }
}

fn describe(f: &Finding) -> String {
    format!(
        "{:?}: {} at {} ({}), {} hits, saved as {}",
        f.kind,
        f.message,
        f.location,
        f.engine_frame.as_deref().unwrap_or("no engine frame"),
        f.hits,
        f.saved_as.as_ref().map_or("(not saved)".into(), |p| p.display().to_string())
    )
}

fn fuzz_target(name: &str) {
    assert!(fuzz::alloc::is_installed(), "TrackingAlloc must be the global allocator of this test binary");
    let cfg = config();
    println!(
        "fuzz target {name}: seed {:#x} (UNMASK_FUZZ_SEED), {:?} (UNMASK_FUZZ_SECS)",
        cfg.seed, cfg.time_per_target
    );
    let t = fuzz::run_target(name, &cfg).expect("fuzz target starts");
    println!(
        "{name}: {} execs in {:.1} s ({:.0}/s), {} accepted, rejections {:?}, peak {:.1} MiB, slowest {:.1} ms",
        t.execs,
        t.seconds,
        t.execs_per_sec,
        t.accepted,
        t.rejections_by_kind,
        t.max_peak_bytes as f64 / (1 << 20) as f64,
        t.slowest_exec_ms
    );
    for w in &t.wording_examples {
        println!("  wording [{}] {}: {}", w.issue, w.error_kind, w.message);
    }
    for f in &t.slow {
        println!("  slow input ({} bytes): {}", f.input_len, f.message);
        // UNMASK_FUZZ_SLOW_DIR keeps them for a look (they are not regressions).
        if let Ok(dir) = std::env::var("UNMASK_FUZZ_SLOW_DIR") {
            let path = std::path::Path::new(&dir).join(format!("{name}-{}.bin", f.input_len));
            let _ = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(path, &f.input));
        }
    }
    let (open, new): (Vec<&Finding>, Vec<&Finding>) = t.crashes.iter().chain(&t.violations).partition(|f| f.known);
    for f in &open {
        println!("  known open engine bug: {}", describe(f));
    }
    assert!(t.execs > 0, "{name}: no executions");
    let new: Vec<String> = new.iter().map(|f| describe(f)).collect();
    assert!(new.is_empty(), "{name}: {} finding(s):\n{}", new.len(), new.join("\n"));
}

#[test]
fn regressions_replay_cleanly() {
    assert!(fuzz::alloc::is_installed());
    let skip: Vec<&str> = OPEN_ENGINE_BUGS.iter().map(|b| b.file).collect();
    let replays = fuzz::replay_regressions(&fuzz::regressions_dir(), &skip).expect("regressions load");
    let bad: Vec<String> = replays
        .iter()
        .filter_map(|r| Some(format!("{}: {}", r.path.as_ref()?.display(), describe(r.finding.as_ref()?))))
        .collect();
    println!("{} regression inputs replayed ({} skipped as open engine bugs)", replays.len(), skip.len());
    assert!(bad.is_empty(), "regression inputs still crash:\n{}", bad.join("\n"));
}

#[test]
#[ignore = "replays the inputs of the engine bugs listed in OPEN_ENGINE_BUGS"]
fn open_engine_bugs_still_reproduce() {
    assert!(fuzz::alloc::is_installed());
    let dir = fuzz::regressions_dir();
    for bug in OPEN_ENGINE_BUGS {
        let target = bug.file.split('/').next().unwrap_or_default();
        let input = std::fs::read(dir.join(bug.file)).unwrap();
        let r = fuzz::replay(target, &input).unwrap();
        println!("{}: {}", bug.file, r.verdict);
        assert!(r.finding.is_some(), "{} no longer reproduces: remove it from OPEN_ENGINE_BUGS", bug.file);
    }
}

#[test]
fn oversized_requests_are_recorded_without_aborting() {
    // 2 GiB is above the hard cap: served as untouched address space and reported with its site.
    let ((len, site), stats) = fuzz::alloc::measure(|| {
        let v = std::hint::black_box(Vec::<u8>::with_capacity(2 << 30));
        (v.capacity(), fuzz::alloc::over_cap_site().unwrap_or_default())
    });
    assert!(len >= 2 << 30);
    assert_eq!(stats.over_cap_request, Some(2 << 30));
    assert!(site.contains("tests/fuzz.rs"), "site {site}");
    let (_, small) = fuzz::alloc::measure(|| std::hint::black_box(vec![1u8; 1 << 20]).len());
    assert_eq!(small.over_cap_request, None);
    assert!(small.peak_bytes >= 1 << 20);
}

#[test]
fn report_covers_every_target() {
    assert!(fuzz::alloc::is_installed());
    let cfg =
        FuzzConfig { max_execs_per_target: Some(5), minimize_time: std::time::Duration::ZERO, ..FuzzConfig::default() };
    let report = fuzz::run_all(&cfg).unwrap();
    assert!(report.alloc_tracking);
    assert_eq!(report.targets.len(), fuzz::TARGETS.len());
    assert!(report.targets.iter().all(|t| t.execs == 5), "{}", report.summary());
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["total_execs"].as_u64().is_some_and(|n| n > 0));
}

/// Replays one input and prints what happens:
/// `UNMASK_FUZZ_REPLAY=fuzz-regressions/<target>/<file>.bin cargo test -p unmask-robustness --test fuzz replay_one -- --ignored --nocapture`
/// (the target is the parent folder's name; relative paths are taken from `tests/robustness`).
#[test]
#[ignore = "needs UNMASK_FUZZ_REPLAY"]
fn replay_one() {
    let arg = std::env::var("UNMASK_FUZZ_REPLAY").expect("set UNMASK_FUZZ_REPLAY to an input file");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(arg);
    let target = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap().to_owned();
    let input = std::fs::read(&path).unwrap();
    let r = fuzz::replay(&target, &input).unwrap();
    println!("{target} {}: {}", path.display(), r.verdict);
    if let Some(f) = &r.finding {
        println!("finding: {}", describe(f));
    }
}

macro_rules! fuzz_tests {
    ($($(#[$attr:meta])* $test:ident => $target:literal),* $(,)?) => {$(
        #[test]
        $(#[$attr])*
        fn $test() {
            fuzz_target($target);
        }
    )*};
}

fuzz_tests! {
    fuzz_safetensors_header => "safetensors_header",
    fuzz_safetensors_index => "safetensors_index",
    fuzz_gguf_reader => "gguf_reader",
    fuzz_gguf_config => "gguf_config",
    fuzz_gguf_tokenizer => "gguf_tokenizer",
    fuzz_gguf_model => "gguf_model",
    fuzz_hf_config => "hf_config",
    fuzz_hf_model => "hf_model",
    // Open engine bug (tokenizer_json/padding-fixed-large.bin): tokenizer.json padding is honoured,
    // and a huge `Fixed` length fills memory until the watchdog aborts the whole test binary.
    fuzz_tokenizer_json => "tokenizer_json",
    fuzz_chat_template => "chat_template",
    fuzz_decode_settings => "decode_settings",
}

#[test]
fn every_target_has_a_test() {
    // Keeps the list above in step with the library's.
    let here = include_str!("fuzz.rs");
    for t in fuzz::TARGETS {
        assert!(here.contains(&format!("=> \"{t}\"")), "no test for fuzz target {t}");
    }
}
