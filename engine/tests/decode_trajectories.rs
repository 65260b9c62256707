//! Our LLaDA / Dream / threshold decoders reproduce, step by step, the trajectories recorded by
//! the independent Python reference (`tests/reference/decode_reference.py`, float64 NumPy
//! forward) on the tiny golden models at temperature 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, CancelFlag, DecodeSettings, DreamAlg, StepFrame};
use unmask_engine::model::load_transformer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn backend(name: &str) -> Box<dyn Backend> {
    backend_at(&root().join("tests/golden").join(name))
}

fn backend_at(dir: &Path) -> Box<dyn Backend> {
    let (t, _) = load_transformer(dir).expect("load tiny model");
    Box::new(CpuBackend::new(Arc::new(t)))
}

fn load_cases(file: &str) -> Vec<Value> {
    let path = root().join("tests/golden/decode").join(file);
    let text = std::fs::read_to_string(&path).expect("read trajectories");
    let doc: Value = serde_json::from_str(&text).expect("parse trajectories");
    doc["cases"].as_array().expect("cases").clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn settings_of(s: &Value) -> DecodeSettings {
    let gen = s["gen_length"].as_u64().unwrap() as usize;
    let mut d = DecodeSettings {
        gen_length: gen,
        block_length: s.get("block_length").and_then(Value::as_u64).map_or(gen, |b| b as usize),
        steps: s["steps"].as_u64().unwrap() as usize,
        threshold: s.get("threshold").and_then(Value::as_f64),
        logits_eos_inf: s.get("logits_eos_inf").and_then(Value::as_bool).unwrap_or(false),
        confidence_eos_eot_inf: s.get("confidence_eos_eot_inf").and_then(Value::as_bool).unwrap_or(false),
        eos_token_id: s.get("eos").and_then(Value::as_u64).map(|e| e as u32),
        eot_token_id: s.get("eot").and_then(Value::as_u64).map(|e| e as u32),
        ..Default::default()
    };
    if let Some(alg) = s.get("alg").and_then(Value::as_str) {
        d.alg = match alg {
            "maskgit_plus" => DreamAlg::MaskgitPlus,
            "topk_margin" => DreamAlg::TopkMargin,
            "entropy" => DreamAlg::Entropy,
            other => panic!("unknown alg {other}"),
        };
    }
    d
}

/// Commits of a frame as sorted (pos, token) pairs.
fn commits(f: &StepFrame) -> Vec<(usize, u32)> {
    let mut c: Vec<(usize, u32)> = f.changes.iter().map(|c| (c.pos, c.token)).collect();
    c.sort();
    c
}

fn check_file(model: &str, file: &str) {
    check_with(backend(model), model, file);
}

fn check_with(mut be: Box<dyn Backend>, model: &str, file: &str) {
    let cases = load_cases(file);
    assert!(!cases.is_empty());
    for (ci, case) in cases.iter().enumerate() {
        let prompt = ids(&case["prompt"]);
        let settings = settings_of(&case["settings"]);
        let mut frames = Vec::new();
        let out = generate(be.as_mut(), &prompt, &settings, &CancelFlag::new(), |f| {
            frames.push(f.clone());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("{model} case {ci}: {e}"));
        let want_steps = case["steps"].as_array().unwrap();
        let got: Vec<&StepFrame> = frames.iter().filter(|f| !f.changes.is_empty()).collect();
        for (si, (w, g)) in want_steps.iter().zip(&got).enumerate() {
            let want: Vec<(usize, u32)> = w["commits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|pc| (pc[0].as_u64().unwrap() as usize, pc[1].as_u64().unwrap() as u32))
                .collect();
            let block = ids(&w["block"]);
            assert_eq!(
                (g.block.0, g.block.1),
                (block[0] as usize, block[1] as usize),
                "{model} case {ci} step {si}: block"
            );
            assert_eq!(commits(g), want, "{model} case {ci} ({}) step {si}: commits differ", case["settings"]);
        }
        assert_eq!(got.len(), want_steps.len(), "{model} case {ci}: step count");
        assert_eq!(out.tokens, ids(&case["tokens"]), "{model} case {ci}: final tokens");
        assert_eq!(out.steps, want_steps.len(), "{model} case {ci}: steps that ran a forward");
    }
    println!("{model}: {} cases reproduced step by step", cases.len());
}

#[test]
fn llada_trajectories_match_python_reference() {
    check_file("llada", "llada_trajectories.json");
}

#[test]
fn dream_trajectories_match_python_reference() {
    check_file("dream", "dream_trajectories.json");
}

/// The LLaDA model read with `shift_logits` (row p-1 predicts token p, as our AR-converted dLLMs
/// may be trained): the loops fetch the shifted rows and still decode with LLaDA's scorer and
/// schedule.
#[test]
fn shifted_llada_trajectories_match_python_reference() {
    let src = root().join("tests/golden/llada");
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(&src).expect("golden dir") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
    }
    let cfg_path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).expect("config")).expect("json");
    cfg["shift_logits"] = Value::Bool(true);
    std::fs::write(&cfg_path, cfg.to_string()).expect("write config");
    let be = backend_at(dir.path());
    assert!(be.config().shift_logits);
    check_with(be, "llada_shifted", "llada_shifted_trajectories.json");
}
