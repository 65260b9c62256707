//! `unmask bench` drives a harness: here a stand-in script with the harness's interface
//! (`--list` on stderr; `SUITE [--quick]`: progress on stderr, `wrote PATH`, headline JSON on stdout).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::Env;

fn fake_harness(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("fake-bench");
    let script = r#"#!/bin/sh
if [ "$1" = "--list" ]; then
  echo "usage: bench/run SUITE [--quick]" >&2
  echo "suites:" >&2
  echo "  alpha      first suite" >&2
  echo "  beta       second suite" >&2
  echo "  broken     always fails" >&2
  exit 0
fi
suite="$1"; quick=false; [ "$2" = "--quick" ] && quick=true
if [ "$suite" = "broken" ]; then echo "[broken] exploding" >&2; exit 3; fi
echo "[$suite] step 1 of 2" >&2
echo "[$suite] step 2 of 2" >&2
out="$(dirname "$0")/$suite.json"
echo "{\"headline\": {\"suite_ran\": \"$suite\", \"quick\": $quick}}" > "$out"
echo "wrote $out" >&2
echo "{\"suite_ran\": \"$suite\", \"quick\": $quick}"
"#;
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn bench_runs_each_suite_and_collects_headlines() {
    let env = Env::new();
    let h = fake_harness(env.data());
    let hs = h.to_str().unwrap();
    let v = env.json(&["bench", "alpha", "beta", "--quick", "--json", "--harness", hs]);
    let suites = v["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 2);
    assert_eq!(suites[0]["suite"], "alpha");
    assert_eq!(suites[0]["headline"]["suite_ran"], "alpha");
    assert_eq!(suites[1]["headline"]["quick"], true);
    assert!(suites[1]["results_path"].as_str().unwrap().ends_with("beta.json"));
    // Human output: headline figures per suite; progress passed through on stderr (not a terminal).
    let out = env.cmd().args(["bench", "alpha", "--harness", hs]).output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("== alpha") && stdout.contains("suite_ran"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[alpha] step 2 of 2") && !stderr.contains('\x1b'), "{stderr}");
    // The environment variable finds the harness too; --list shows its suites.
    let out = env.cmd().args(["bench", "--list"]).env("UNMASK_BENCH_HARNESS", hs).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("beta"));
}

#[test]
fn bench_errors() {
    let env = Env::new();
    let h = fake_harness(env.data());
    let hs = h.to_str().unwrap();
    let out = env.run(&["bench", "nosuch", "--harness", hs]);
    assert_eq!(out.status.code(), Some(2), "unknown suite is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("alpha, beta, broken"));
    let out = env.run(&["bench", "--harness", hs]);
    assert_eq!(out.status.code(), Some(2), "no suite named");
    let out = env.run(&["bench", "broken", "--harness", hs]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exploding"));
    let out = env.run(&["bench", "alpha", "--harness", "/nonexistent/harness"]);
    assert_eq!(out.status.code(), Some(3));
}
