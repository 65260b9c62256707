//! Drives the `unmask` binary as a user or script would.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::prelude::*;

fn unmask() -> Command {
    let mut c = Command::cargo_bin("unmask").expect("binary built");
    c.env("UNMASK_THREADS", "2").env_remove("UNMASK_MODEL");
    c
}

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada")
}

const SMALL: [&str; 6] = ["--gen-length", "16", "--block-length", "16", "--steps", "16"];

#[test]
fn help_and_bad_flags() {
    unmask().arg("--help").assert().success();
    let out = unmask().args(["generate", "--no-such-flag", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "bad flags exit 2");
}

#[test]
fn missing_model_is_exit_3() {
    let out = unmask().args(["generate", "--model", "/nonexistent/model", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn corrupt_weights_are_exit_3_with_file_name() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "generation_config.json"] {
        std::fs::copy(default_model().join(f), dir.path().join(f)).unwrap();
    }
    let w = std::fs::read(default_model().join("model.safetensors")).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    let out = unmask().args(["generate", "--model"]).arg(dir.path()).arg("hi").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.safetensors") && err.contains("corrupt"), "{err}");
}

#[test]
fn invalid_settings_are_exit_4() {
    let out = unmask().args(["generate", "hi", "--gen-length", "10", "--block-length", "4"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn generate_json_on_embedded_model() {
    let out = unmask().args(["generate", "What is 12+7?", "--json"]).args(SMALL).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["steps"].as_u64().unwrap() >= 1);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 16);
    assert!(v["text"].is_string());
    // Not a terminal: no escape sequences.
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
}

#[test]
fn generate_is_reproducible() {
    let run = || unmask().args(["generate", "Reverse: pear apple fig", "--cache", "prefix"]).args(SMALL).output().unwrap().stdout;
    assert_eq!(run(), run());
}

#[test]
fn chat_reads_turns_from_stdin() {
    let mut cmd = unmask();
    cmd.args(["chat"]).args(SMALL);
    let out = assert_cmd::Command::from_std(cmd).write_stdin("What is 2+3?\nSort: pear apple fig\n/quit\n").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // One reply line per turn.
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() >= 2);
}

#[test]
fn info_and_models_list() {
    let out = unmask().args(["info", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["arch"], "llada");
    let out = unmask().args(["models", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("tiny-llada (default)"));
}

/// The live canvas is drawn when stdout is a terminal: run under `script` for a pseudo-terminal.
#[test]
fn live_mode_draws_in_a_pty() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping: `script` (util-linux) not installed");
        return;
    }
    let bin = assert_cmd::cargo::cargo_bin("unmask");
    let cmd = format!("{} generate 'What is 2+3?' {}", bin.display(), SMALL.join(" "));
    let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).env("UNMASK_THREADS", "2").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("step") && text.contains("committed"), "status line missing: {text}");
    assert!(text.contains("\x1b["), "no redraw escape sequences");
    assert!(text.contains('▒'), "masked positions not shown");
}
