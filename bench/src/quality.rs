//! Suite `quality` (issue 4): exact-match accuracy of the embedded models on the held-out test
//! split with reference decoding, run by our Rust engine.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::load_model;

use crate::tasks;

/// Evaluates one model directory; `None` when it is not there (not trained yet).
fn eval_model(dir: &Path, per_task: usize, settings: &DecodeSettings) -> Result<Option<Value>> {
    if !dir.join("config.json").exists() {
        return Ok(None);
    }
    let m = load_model(dir)?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let tok = m.tokenizer;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    eprintln!("[quality] {} on {} examples", dir.display(), examples.len());
    let r = tasks::evaluate(&mut backend, &tok, &examples, settings, &stop)?;
    Ok(Some(r.to_json()))
}

pub fn run(quick: bool) -> Result<Value> {
    let per_task = if quick { 6 } else { 25 };
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    // Reference LLaDA decoding, one block covering the short answers, one token per step.
    let settings = DecodeSettings { gen_length: 32, block_length: 32, steps: 32, ..Default::default() };
    let dllm = eval_model(&models.join("tiny-llada"), per_task, &settings)?;
    let ar = eval_model(&models.join("tiny-ar"), per_task, &settings)?;
    let acc = |v: &Option<Value>, task: &str| v.as_ref().and_then(|v| v["tasks"][task]["accuracy"].as_f64());
    Ok(json!({
        "headline": {
            "dllm_addition_accuracy": acc(&dllm, "add"),
            "dllm_reverse_accuracy": acc(&dllm, "reverse"),
            "ar_addition_accuracy": acc(&ar, "add"),
            "ar_reverse_accuracy": acc(&ar, "reverse"),
        },
        "settings": settings,
        "examples_per_task": per_task,
        "tiny_llada": dllm,
        "tiny_ar": ar,
        "note": "held-out test split (models/data/test.jsonl); null = model not trained yet",
    }))
}
