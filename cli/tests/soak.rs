//! Soak: 100 chat turns through one `unmask chat` process and 100 generations inside one
//! process, resident memory flat (last 20 runs within 5 % of the first 20 after a warm-up of 10).

use std::path::Path;

use unmask_robustness::soak::{self, SoakReport};

const RUNS: usize = 100;

fn check(r: &SoakReport) {
    println!("{}", r.summary());
    println!("RSS MiB per run: {:?}", r.rss_mib.iter().map(|m| (m * 10.0).round() / 10.0).collect::<Vec<_>>());
    assert!(r.error.is_none(), "{} stopped: {:?}", r.name, r.error);
    assert_eq!(r.runs, RUNS, "{} completed {} of {RUNS} runs", r.name, r.runs);
    assert!(r.passed, "{} memory grows: {}", r.name, r.summary());
}

#[test]
fn chat_loop_memory_stays_flat() {
    check(&soak::chat_loop_soak(Path::new(env!("CARGO_BIN_EXE_unmask")), RUNS));
}

#[test]
fn in_process_generate_memory_stays_flat() {
    let model = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tiny-llada"));
    check(&soak::in_process_generate_soak(model, RUNS));
}
