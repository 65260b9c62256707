//! The bad-input corpus against the `unmask` binary: every damaged model, hostile prompt and
//! extreme setting must end with its README exit code and a one-line error naming the file and
//! field, within 10 s and 1 GiB of resident memory, never by a signal.

use std::path::Path;

use unmask_robustness::{corpus, runner};

#[test]
fn every_bad_input_fails_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../models"));
    let cases = corpus::build(dir.path(), models).expect("corpus builds from the embedded models");
    let bin = Path::new(env!("CARGO_BIN_EXE_unmask"));
    let started = std::time::Instant::now();
    let results = runner::run_all(bin, &cases, runner::Limits::default());
    println!("{}", runner::table(&results));
    let failed: Vec<&runner::CaseResult> = results.iter().filter(|r| !r.passed).collect();
    println!(
        "{} of {} cases passed in {:.1} s",
        results.len() - failed.len(),
        results.len(),
        started.elapsed().as_secs_f64()
    );
    let list: Vec<String> = failed
        .iter()
        .map(|r| format!("  {}: {} | {}", r.name, r.why, runner::shorten(&r.stderr_first_line, 160)))
        .collect();
    assert!(failed.is_empty(), "{} bad-input cases failed:\n{}", failed.len(), list.join("\n"));
}
