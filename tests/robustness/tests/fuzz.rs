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
    /// Matched against a finding's location and engine frame.
    at: &'static str,
    /// Its regression input, relative to `fuzz-regressions/`.
    file: &'static str,
}

/// Open engine bugs: findings at these places are printed but do not fail the fuzz tests, and
/// their inputs are skipped by `regressions_replay_cleanly` (the ignored
/// `open_engine_bugs_still_reproduce` replays them). Remove an entry once its bug is fixed.
const OPEN_ENGINE_BUGS: &[OpenBug] = &[];

fn is_open_bug(f: &Finding) -> bool {
    OPEN_ENGINE_BUGS.iter().any(|b| f.location.contains(b.at) || f.engine_frame.as_deref().is_some_and(|e| e.contains(b.at)))
}

fn config() -> FuzzConfig {
    FuzzConfig { save_dir: Some(fuzz::regressions_dir()), ..FuzzConfig::from_env() }
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
    println!("fuzz target {name}: seed {:#x} (UNMASK_FUZZ_SEED), {:?} (UNMASK_FUZZ_SECS)", cfg.seed, cfg.time_per_target);
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
    let (open, new): (Vec<&Finding>, Vec<&Finding>) = t.crashes.iter().chain(&t.violations).partition(|f| is_open_bug(f));
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
fn report_covers_every_target() {
    assert!(fuzz::alloc::is_installed());
    let cfg = FuzzConfig {
        max_execs_per_target: Some(5),
        minimize_time: std::time::Duration::ZERO,
        ..FuzzConfig::default()
    };
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
