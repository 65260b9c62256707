//! Recorded runs: `generate` records, `runs list|show|compare`, `trace export`.

mod common;

use common::{Env, SMALL};

fn generate_json(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["generate", "What is 2+3?", "--json"];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(extra);
    env.json(&args)
}

#[test]
fn two_generates_then_list_show_compare() {
    let env = Env::new();
    let a = generate_json(&env, &[]);
    let b = generate_json(&env, &["--threshold", "0.5", "--cache", "prefix"]);
    let (ia, ib) = (a["run_id"].as_i64().expect("run id"), b["run_id"].as_i64().expect("run id"));
    assert_ne!(ia, ib);

    let list = env.json(&["runs", "list", "--json"]);
    let runs = list.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["id"].as_i64(), Some(ib), "newest first");
    assert!(runs.iter().all(|r| r["status"] == "completed" && r["model_name"] == "tiny-llada"));
    let filtered = env.json(&["runs", "list", "--model", "no-such-model", "--json"]);
    assert_eq!(filtered.as_array().unwrap().len(), 0);
    let text = env.ok(&["runs", "list", "--model", "tiny-llada"]);
    assert_eq!(text.lines().count(), 3, "header + 2 runs: {text}");

    let show = env.json(&["runs", "show", &ia.to_string(), "--json", "--steps"]);
    assert_eq!(show["run"]["output"].as_str(), a["text"].as_str());
    assert_eq!(show["run"]["metrics"]["steps"].as_u64(), a["steps"].as_u64());
    let steps = show["steps"].as_array().unwrap();
    assert_eq!(steps.len() as u64, a["steps"].as_u64().unwrap(), "one stored frame per step");
    assert_eq!(show["run"]["trace_frames"].as_u64(), Some(steps.len() as u64));
    let text = env.ok(&["runs", "show", &ib.to_string()]);
    assert!(text.contains("tokens/forward") && text.contains("\"threshold\":0.5"), "{text}");

    let cmp = env.json(&["runs", "compare", &ia.to_string(), &ib.to_string(), "--json"]);
    let diff = cmp["settings_diff"].as_object().unwrap();
    assert!(diff.contains_key("threshold") && diff.contains_key("cache"), "{cmp}");
    assert_eq!(cmp["runs"].as_array().unwrap().len(), 2);
    let vs = &cmp["versus_first"][0];
    assert_eq!(vs["run"].as_i64(), Some(ib));
    let fa = a["forwards"].as_f64().unwrap();
    let fb = b["forwards"].as_f64().unwrap();
    assert!((vs["ratios"]["forwards"].as_f64().unwrap() - fb / fa).abs() < 1e-9);
    let table = env.ok(&["runs", "compare", &ia.to_string(), &ib.to_string()]);
    for row in ["output", "steps", "forwards", "tokens/forward", "wall", "simulated NPU", "energy", "≠ threshold"] {
        assert!(table.lines().any(|l| l.starts_with(row)), "row {row} missing:\n{table}");
    }
}

#[test]
fn no_record_leaves_no_run_and_chat_records_each_turn() {
    let env = Env::new();
    let mut args = vec!["generate", "hi", "--no-record", "--json"];
    args.extend_from_slice(&SMALL);
    let g = env.json(&args);
    assert!(g["run_id"].is_null());
    assert_eq!(env.json(&["runs", "list", "--json"]).as_array().unwrap().len(), 0);

    let mut cmd = env.cmd();
    cmd.arg("chat").args(SMALL).arg("--json");
    let out = assert_cmd::Command::from_std(cmd).write_stdin("What is 2+3?\nAnd 4+4?\n/quit\n").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let replies: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(replies.len(), 2, "one reply per turn");
    let runs = env.json(&["runs", "list", "--json"]);
    let prompts: Vec<&str> = runs.as_array().unwrap().iter().map(|r| r["prompt"].as_str().unwrap()).collect();
    assert_eq!(prompts, ["And 4+4?", "What is 2+3?"]);
}

#[test]
fn trace_export_cpu_and_vnpu() {
    let env = Env::new();
    let cpu_run = generate_json(&env, &[]);
    let cpu = cpu_run["run_id"].as_i64().unwrap();
    let npu = generate_json(&env, &["--backend", "vnpu", "--device", "sm8750"]);
    let npu_id = npu["run_id"].as_i64().unwrap();
    assert!(npu["simulated_s"].as_f64().unwrap() > 0.0);

    let out = env.data().join("cpu.json");
    env.ok(&["trace", "export", &cpu.to_string(), "--perfetto", out.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("valid JSON");
    let ev = doc["traceEvents"].as_array().expect("traceEvents");
    let slices: Vec<_> = ev.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len() as u64, cpu_run["steps"].as_u64().unwrap(), "one slice per step");
    assert!(slices.iter().all(|e| e["dur"].as_f64().unwrap() > 0.0));
    assert!(ev.iter().any(|e| e["name"] == "process_name" && e["args"]["name"].as_str().unwrap().contains("measured")));

    let out = env.data().join("npu.json");
    env.ok(&["trace", "export", &npu_id.to_string(), "--perfetto", out.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("valid JSON");
    let ev = doc["traceEvents"].as_array().expect("traceEvents");
    assert!(ev.iter().any(|e| e["ph"] == "X" && e["tid"] == 1), "NPU lane slices");
    assert!(ev.iter().any(|e| e["ph"] == "C" && e["name"] == "power (simulated)"));
    // Energy came from the stored timeline.
    let show = env.json(&["runs", "show", &npu_id.to_string(), "--json"]);
    assert!(show["run"]["metrics"]["energy_mj"].as_f64().unwrap() > 0.0);
    assert_eq!(show["run"]["has_timeline"], true);

    let missing = env.run(&["trace", "export", "9999", "--perfetto", "/dev/null"]);
    assert_eq!(missing.status.code(), Some(3));
    let missing = env.run(&["runs", "show", "9999"]);
    assert_eq!(missing.status.code(), Some(3));
    let one = env.run(&["runs", "compare", &cpu.to_string()]);
    assert_eq!(one.status.code(), Some(2), "compare needs two runs");
}
