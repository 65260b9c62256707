//! Drives the `unmask` binary as a user or script would: flags, errors and exit codes,
//! generate and chat on the embedded model.

mod common;

use common::{default_model, Env, SMALL};

#[test]
fn help_lists_exit_codes_and_bad_flags_exit_2() {
    let env = Env::new();
    let help = env.ok(&["--help"]);
    assert!(help.contains("Exit codes") && help.contains("6 store"), "{help}");
    let help = env.ok(&["generate", "--help"]);
    for flag in ["--spec-lookahead", "--revision-stable-threshold", "--threshold", "--no-record", "--eps"] {
        assert!(help.contains(flag), "{flag} missing from generate --help");
    }
    for args in [
        &["generate", "--no-such-flag", "x"][..],
        &["generate", "x", "--threshold", "abc"],
        &["generate", "x", "--cache", "sideways"],
        // A speculative knob without --speculative.
        &["generate", "x", "--spec-lookahead", "8"],
        &["models", "frobnicate"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn missing_model_is_exit_3() {
    let env = Env::new();
    let out = env.run(&["generate", "--model", "/nonexistent/model", "hi"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = env.run(&["generate", "--model", "no-such-model", "hi"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    let out = env.run(&["generate", "hi", "--backend", "vnpu", "--device", "sm0000"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sm8750"), "lists the profiles");
}

#[test]
fn corrupt_weights_are_exit_3_with_file_name() {
    let env = Env::new();
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "generation_config.json"] {
        std::fs::copy(default_model().join(f), dir.path().join(f)).unwrap();
    }
    let w = std::fs::read(default_model().join("model.safetensors")).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    let out = env.cmd().args(["generate", "--model"]).arg(dir.path()).arg("hi").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.safetensors") && err.contains("corrupt"), "{err}");
    // A garbage GGUF file.
    let g = dir.path().join("junk.gguf");
    std::fs::write(&g, b"GGUF\x03\x00\x00\x00 definitely not a model").unwrap();
    let out = env.cmd().args(["generate", "--model"]).arg(&g).arg("hi").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn invalid_settings_are_exit_4() {
    let env = Env::new();
    for args in [
        &["generate", "hi", "--gen-length", "10", "--block-length", "4"][..],
        &["generate", "hi", "--threshold", "1.5"],
        &["generate", "hi", "--temperature=-1"],
        &["generate", "hi", "--revision", "--revision-visible-threshold", "0.95", "--revision-stable-threshold", "0.9"],
        &["generate", "hi", "--gen-length", "100000", "--block-length", "100000", "--steps", "100000"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn generate_json_on_embedded_model() {
    let env = Env::new();
    let mut args = vec!["generate", "What is 12+7?", "--json"];
    args.extend_from_slice(&SMALL);
    let v = env.json(&args);
    assert!(v["steps"].as_u64().unwrap() >= 1);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 16);
    assert!(v["text"].is_string());
    assert!(v["run_id"].is_i64(), "recorded by default");
}

#[test]
fn npu_aware_flags_reach_the_decoder() {
    let env = Env::new();
    let base = ["generate", "Sort: pear apple fig", "--json", "--gen-length", "32", "--block-length", "8", "--steps", "32"];
    let mut a = base.to_vec();
    a.extend(["--speculative", "--spec-lookahead", "8", "--spec-buckets", "8,16", "--revision", "--revision-max-checks", "2", "--revision-lookback", "8"]);
    a.extend(["--revision-final-passes", "3", "--revision-schedule", "inline", "--revision-isolated-checks"]);
    a.push("--revision-fresh-final-passes");
    let v = env.json(&a);
    let run = v["run_id"].as_i64().unwrap();
    let show = env.json(&["runs", "show", &run.to_string(), "--json"]);
    let s = &show["run"]["settings"];
    assert_eq!(s["speculative"]["max_lookahead"], 8);
    assert_eq!(s["speculative"]["token_buckets"], serde_json::json!([8, 16]));
    assert_eq!(s["revision"]["max_checks"], 2);
    assert_eq!(s["revision"]["lookback"], 8);
    assert_eq!(s["revision"]["final_passes"], 3);
    assert_eq!(s["revision"]["schedule"], "inline");
    assert_eq!(s["revision"]["isolated_checks"], true);
    assert_eq!(s["revision"]["fresh_final_passes"], true);
    assert_eq!(s["revision"]["stable_threshold"], 0.9);
    // Out of range is refused with a message, before anything runs.
    let mut bad = base.to_vec();
    bad.extend(["--revision", "--revision-final-passes", "1000", "--no-record"]);
    let out = env.cmd().args(&bad).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("final_passes must be at most 64"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn generate_is_reproducible() {
    let env = Env::new();
    let run = || {
        let mut a = vec!["generate", "Reverse: pear apple fig", "--cache", "prefix", "--no-record"];
        a.extend_from_slice(&SMALL);
        env.ok(&a)
    };
    assert_eq!(run(), run());
}

#[test]
fn chat_reads_turns_from_stdin() {
    let env = Env::new();
    let mut cmd = env.cmd();
    cmd.args(["chat"]).args(SMALL);
    let out = assert_cmd::Command::from_std(cmd).write_stdin("What is 2+3?\n/reset\nSort: pear apple fig\n/quit\nignored\n").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // One reply line per turn; /reset is acknowledged; nothing after /quit.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("conversation cleared"));
}

#[test]
fn a_long_chat_leaves_out_its_oldest_turns_and_keeps_answering() {
    // Twelve turns overflow the embedded model's 256-token context; the chat goes on with the
    // newest turns and says what it left out.
    // The AR model reuses its K/V across turns: a prompt that lost its oldest turns starts anew.
    let env = Env::new();
    for model in ["tiny-llada", "tiny-ar"] {
        let mut cmd = env.cmd();
        cmd.args(["chat", "--no-record", "-m", model]);
        let turns = "Please tell me: what is 512+389?\n".repeat(12);
        let out = assert_cmd::Command::from_std(cmd).write_stdin(turns).output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{model}: {stderr}");
        assert_eq!(stdout.lines().count(), 12, "{model}: one reply per turn: {stdout}");
        assert!(stderr.contains("no longer fit the model's context of 256 tokens"), "{model}: {stderr}");
        assert!(!stderr.contains("error"), "{model}: {stderr}");
    }
}

#[test]
fn info_and_data_dir_flag() {
    let env = Env::new();
    let v = env.json(&["info", "--json"]);
    assert_eq!(v["config"]["arch"], "llada");
    // --data-dir wins over $UNMASK_DATA_DIR.
    let other = tempfile::tempdir().unwrap();
    let out = env.cmd().args(["models", "list", "--data-dir"]).arg(other.path()).output().unwrap();
    assert!(out.status.success());
    assert!(other.path().join("unmask.db").exists());
}

#[test]
fn a_draft_model_changes_no_token() {
    let env = Env::new();
    let base = ["generate", "Continue: the old man and the", "-m", "tiny-ar", "--json", "--no-record", "--gen-length", "24"];
    let plain = env.json(&base);
    for schedule in ["sync", "adaptive", "async"] {
        let mut a = base.to_vec();
        a.extend(["--draft", "tiny-draft", "--spec-schedule", schedule, "--draft-len", "3"]);
        let v = env.json(&a);
        assert_eq!(v["tokens"], plain["tokens"], "{schedule}");
        assert_eq!(v["text"], plain["text"]);
        let sp = &v["speculation"];
        assert_eq!(sp["schedule"], schedule);
        assert!(sp["drafted"].as_u64().unwrap() > 0 && sp["verify_forwards"].as_u64().unwrap() == v["forwards"].as_u64().unwrap());
    }
    assert!(plain["speculation"].is_null());
}

#[test]
fn a_speculative_run_is_stored_with_its_draft_model_and_counters() {
    let env = Env::new();
    let v = env.json(&["generate", "Continue: the old man and the", "-m", "tiny-ar", "--draft", "tiny-draft", "--json"]);
    let id = v["run_id"].as_i64().expect("a recorded run").to_string();
    let shown = env.json(&["runs", "show", &id, "--json"]);
    let sp = &shown["speculation"];
    assert_eq!(sp["draft_model"], "tiny-draft", "{shown}");
    assert_eq!(sp["stats"]["drafted"], v["speculation"]["drafted"]);
    assert_eq!(sp["stats"]["accepted"], v["speculation"]["accepted"]);
    let text = env.ok(&["runs", "show", &id]);
    assert!(text.contains("speculation draft tiny-draft"), "{text}");
    // Its trace shows the two tasks, measured: one slice per draft and per verification.
    let out = env.data().join("spec.json");
    env.ok(&["trace", "export", &id, "--perfetto", out.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("valid JSON");
    let ev = doc["traceEvents"].as_array().expect("traceEvents");
    let thread = |name: &str| ev.iter().find(|e| e["name"] == "thread_name" && e["args"]["name"] == name).map(|e| e["tid"].clone());
    let (drafter, verifier) = (thread("Drafter").expect("a Drafter lane"), thread("Verifier").expect("a Verifier lane"));
    let slices = |tid: &serde_json::Value| ev.iter().filter(|e| e["ph"] == "X" && &e["tid"] == tid).count() as u64;
    assert_eq!(slices(&drafter), v["speculation"]["drafted"].as_u64().unwrap());
    assert_eq!(slices(&verifier), v["speculation"]["verify_forwards"].as_u64().unwrap());
    assert!(ev.iter().any(|e| e["ph"] == "C" && e["name"] == "draft_queue_depth"), "queue depth counter");
    assert!(ev.iter().any(|e| e["name"] == "process_name" && e["args"]["name"].as_str().unwrap().contains("measured")));
    // A run without a draft has no speculation record.
    let plain = env.json(&["generate", "Continue: the old man and the", "-m", "tiny-ar", "--json"]);
    let shown = env.json(&["runs", "show", &plain["run_id"].as_i64().unwrap().to_string(), "--json"]);
    assert!(shown["speculation"].is_null(), "{shown}");
}

#[test]
fn a_draft_for_a_diffusion_model_or_another_vocabulary_is_refused() {
    let env = Env::new();
    let out = env.run(&["generate", "hi", "--draft", "tiny-draft", "--no-record"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("diffusion model"), "{out:?}");
    let out = env.run(&["generate", "hi", "-m", "tiny-ar", "--draft", "tiny-llada", "--no-record"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("autoregressive"));
    let out = env.run(&["generate", "hi", "-m", "tiny-ar", "--spec-schedule", "async", "--no-record"]);
    assert_eq!(out.status.code(), Some(2), "--spec-schedule needs --draft");
}

#[test]
fn an_autoregressive_model_runs_with_its_own_defaults() {
    // tiny-ar's generation_config.json sets gen_length 16 and nothing about blocks.
    let env = Env::new();
    let v = env.json(&["generate", "What is 12+7?", "-m", "tiny-ar", "--json", "--no-record"]);
    assert_eq!(v["tokens"].as_array().unwrap().len().min(16), v["tokens"].as_array().unwrap().len());
    let v = env.json(&["generate", "What is 12+7?", "-m", "tiny-ar", "--draft", "tiny-draft", "--json", "--no-record"]);
    assert!(v["speculation"]["accepted"].is_u64());
}

#[test]
fn moe_calibration_is_stored_and_drives_static_tiers() {
    let env = Env::new();
    // A dense model has nothing to calibrate.
    let out = env.run(&["moe", "calibrate", "-m", "tiny-llada", "--limit", "3"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a mixture-of-experts"), "{out:?}");
    // Before calibrating, there is nothing to show.
    let out = env.run(&["moe", "show", "-m", "tiny-llada-moe"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    let cal = env.json(&["moe", "calibrate", "-m", "tiny-llada-moe", "--limit", "20", "--json"]);
    let prompts: u64 = cal["prompts"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).sum();
    assert_eq!(prompts, 20);
    let shown = env.json(&["moe", "show", "-m", "tiny-llada-moe", "--json"]);
    assert_eq!(shown, cal, "the stored calibration is the one computed");

    let base = ["generate", "What is 12+7?", "-m", "tiny-llada-moe", "--json", "--no-record"];
    let exact = env.json(&base);
    assert_eq!(exact["moe"]["launches"].as_u64(), exact["moe"]["layer_runs"].as_u64(), "cpu: one region per layer");
    assert_eq!(exact["moe"]["dropped"], 0);
    let mut a = base.to_vec();
    a.extend(["--moe", "static-tiers"]);
    let tiers = env.json(&a);
    let m = &tiers["moe"];
    assert!(m["launches"].as_u64().unwrap() <= 2 * m["layer_runs"].as_u64().unwrap(), "grouped: {m}");
    assert!(m["padded_rows"].as_u64().unwrap() > 0, "static shapes pad: {m}");
    let mut a = base.to_vec();
    a.extend(["--moe", "naive"]);
    let naive = env.json(&a);
    assert_eq!(naive["tokens"], exact["tokens"], "per-expert launches are exact");
    assert!(naive["moe"]["launches"].as_u64().unwrap() > 2 * naive["moe"]["layer_runs"].as_u64().unwrap());
    // A recorded run keeps its MoE counters.
    let rec = env.json(&["generate", "What is 12+7?", "-m", "tiny-llada-moe", "--json", "--moe", "naive"]);
    let id = rec["run_id"].as_i64().unwrap().to_string();
    let shown = env.json(&["runs", "show", &id, "--json"]);
    assert_eq!(shown["moe"]["launches"], rec["moe"]["launches"]);
    assert_eq!(shown["run"]["settings"]["moe"]["policy"], "naive", "the policy is part of the recorded settings");
    // Dense models ignore the flag.
    let dense = env.json(&["generate", "What is 12+7?", "--moe", "naive", "--json", "--no-record", "--gen-length", "16", "--steps", "16", "--block-length", "16"]);
    assert!(dense["moe"].is_null());
    let out = env.run(&["generate", "hi", "--moe", "fast"]);
    assert_eq!(out.status.code(), Some(2));
}
