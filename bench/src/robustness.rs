//! Suite `robustness`: hostile and broken inputs. Runs the structured fuzzer over every parser
//! of untrusted files and settings, the bad-input corpus against the `unmask` binary (10 s and
//! 1 GiB per case) and the soaks (100 chat turns through one `unmask chat`, 100 generations in
//! one process; RSS must stay flat).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use unmask_robustness::{corpus, runner, soak};

pub fn run(quick: bool) -> Result<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let models = root.join("models");

    // The binary first: its cases' peak RSS is read per case and must not wait behind the rest.
    let unmask = crate::unmask_bin::build_unmask(&root)?;
    eprintln!("bad-input corpus against {}", unmask.display());
    let dir = tempfile::tempdir()?;
    let cases = corpus::build(dir.path(), &models).context("building the bad-input corpus")?;
    let started = Instant::now();
    let results = runner::run_all(&unmask, &cases, runner::Limits::default());
    let corpus_s = started.elapsed().as_secs_f64();
    let passed = results.iter().filter(|r| r.passed).count();
    eprintln!("{}", runner::table(&results));
    eprintln!("{passed} of {} bad-input cases passed in {corpus_s:.1} s", results.len());
    drop(dir);

    let runs = if quick { 50 } else { 100 };
    eprintln!("soak: {runs} chat turns through one `unmask chat`");
    let chat = soak::chat_loop_soak(&unmask, runs);
    eprintln!("{}", chat.summary());
    eprintln!("soak: {runs} generations in this process");
    let generate = soak::in_process_generate_soak(&models.join("tiny-llada"), runs);
    eprintln!("{}", generate.summary());
    let growth = [chat.growth, generate.growth].into_iter().fold(f64::NEG_INFINITY, f64::max);

    // The fuzzer runs in its own binary: it needs the counting allocator as the global one,
    // which this harness must not install for the timing suites.
    let secs_per_target = if quick { 1.0 } else { 10.0 };
    eprintln!("fuzz: every target for {secs_per_target:.0} s");
    let fuzz_report = run_fuzzer(&root, secs_per_target)?;
    let total = |k: &str| fuzz_report.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (fuzz_execs, fuzz_crashes, fuzz_violations) = (total("total_execs"), total("total_crashes"), total("total_violations"));
    eprintln!("fuzz: {fuzz_execs} executions, {fuzz_crashes} crashes, {fuzz_violations} allocation violations");

    let failing: Vec<Value> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| json!({"name": r.name, "expected_exit": r.expected_exit, "exit": r.exit, "signal": r.signal, "why": r.why, "stderr": r.stderr_first_line}))
        .collect();
    Ok(json!({
        "headline": {
            "fuzz_execs": fuzz_execs,
            "fuzz_crashes": fuzz_crashes,
            "fuzz_violations": fuzz_violations,
            "bad_inputs_passed": passed,
            "bad_inputs_total": results.len(),
            "soak_rss_growth": if growth.is_finite() { json!(growth) } else { Value::Null },
            "soak_flat": chat.passed && generate.passed,
        },
        "fuzz": fuzz_report,
        "bad_inputs": {
            "limits": runner::Limits::default(),
            "seconds": corpus_s,
            "max_peak_rss_mib": results.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max),
            "max_wall_s": results.iter().map(|r| r.wall_s).fold(0.0, f64::max),
            "failing": failing,
            "cases": results,
        },
        "soak": { "cli_chat_loop": chat, "in_process_generate": generate },
    }))
}

/// Runs `unmask-fuzz` (built in the dev profile, like this harness) and returns its JSON report.
fn run_fuzzer(root: &Path, secs_per_target: f64) -> Result<Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["run", "-q", "-p", "unmask-robustness", "--bin", "unmask-fuzz", "--"])
        .arg(secs_per_target.to_string())
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running unmask-fuzz")?;
    if !out.status.success() {
        bail!("unmask-fuzz failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("reading unmask-fuzz's report")
}

