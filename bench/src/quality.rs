//! Suite `quality`: the four embedded models on the held-out test split, run by our
//! Rust engine: exact match per task with reference decoding (LLaDA's low-confidence schedule for
//! the dLLMs, greedy for the AR models), masked-token accuracy (dLLMs) or perplexity (AR) on
//! held-out prose.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::load_model;

use crate::{prose, tasks};

/// The embedded models, in report order.
pub const MODELS: [&str; 4] = ["tiny-llada", "tiny-ar", "tiny-draft", "tiny-llada-moe"];

/// Evaluates one model directory; `None` when it is not there.
fn eval_model(
    dir: &Path,
    per_task: usize,
    settings: &DecodeSettings,
    prose_set: &prose::ProseSet,
) -> Result<Option<Value>> {
    if !dir.join("config.json").exists() {
        return Ok(None);
    }
    let m = load_model(dir)?;
    let cfg = m.config().clone();
    let stop: Vec<u32> = [cfg.eos_token_id, cfg.eot_token_id].into_iter().flatten().collect();
    let prose_metrics = if cfg.arch.is_diffusion() {
        json!({"masked_token": prose::masked_token_accuracy(&m.transformer, prose_set)?})
    } else {
        json!({"perplexity": prose::perplexity(&m.transformer, prose_set)?})
    };
    let tok = m.tokenizer;
    let template = m.template;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    eprintln!("[quality] {} ({:?}) on {} examples", dir.display(), cfg.arch, examples.len());
    let r = tasks::evaluate_with(&mut backend, &tok, &template, &examples, settings, &stop)?;
    let mut v = r.to_json();
    v["arch"] = json!(cfg.arch);
    v["prose"] = prose_metrics;
    Ok(Some(v))
}

/// Models to evaluate: `$UNMASK_QUALITY_MODELS` (comma-separated) or all four. Entries of models
/// not evaluated in this run are kept from the existing `bench/results/quality.json`, each with
/// its own `evaluated_at` time, so a slow model can be rerun alone.
fn selected_models() -> Vec<String> {
    match std::env::var("UNMASK_QUALITY_MODELS") {
        Ok(s) if !s.trim().is_empty() => s.split(',').map(|m| m.trim().to_owned()).collect(),
        _ => MODELS.iter().map(|m| m.to_string()).collect(),
    }
}

fn previous_results() -> serde_json::Map<String, Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/quality.json");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("models").and_then(|m| m.as_object()).cloned())
        .unwrap_or_default()
}

pub fn run(quick: bool) -> Result<Value> {
    // Examples per task: 50 = the whole test split; `$UNMASK_QUALITY_PER_TASK` overrides.
    let per_task = match std::env::var("UNMASK_QUALITY_PER_TASK").ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None if quick => 6,
        None => 50,
    };
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    // Reference LLaDA decoding: one block covering the short answers, one token per step (the
    // models' generation_config.json); AR models decode greedily up to gen_length tokens.
    let settings = DecodeSettings { gen_length: 16, block_length: 16, steps: 16, ..Default::default() };
    let mut prose_set = prose::load(&prose::test_prose())?;
    if quick {
        prose_set.windows.truncate(8);
        prose_set.masked_positions.values_mut().for_each(|m| m.truncate(8));
    }
    let wanted = selected_models();
    let mut results = if wanted.len() < MODELS.len() && !quick { previous_results() } else { Default::default() };
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    for name in MODELS.iter().filter(|m| wanted.iter().any(|w| w == *m)) {
        let started = std::time::Instant::now();
        let mut v = eval_model(&models.join(name), per_task, &settings, &prose_set)?;
        if let Some(Value::Object(o)) = &mut v {
            o.insert("examples_per_task".into(), json!(per_task));
            o.insert("evaluated_at_unix".into(), json!(stamp));
            o.insert("eval_elapsed_s".into(), json!(started.elapsed().as_secs_f64()));
        }
        results.insert(name.replace('-', "_"), v.into());
    }
    let acc = |m: &str, task: &str| results.get(m).and_then(|v| v["tasks"][task]["accuracy"].as_f64());
    let headline = json!({
        "dllm_addition_accuracy": acc("tiny_llada", "add"),
        "dllm_reverse_accuracy": acc("tiny_llada", "reverse"),
        "ar_addition_accuracy": acc("tiny_ar", "add"),
        "ar_reverse_accuracy": acc("tiny_ar", "reverse"),
    });
    Ok(json!({
        "headline": headline,
        "settings": settings,
        "examples_per_task_this_run": per_task,
        "prose_windows": prose_set.windows.len(),
        "models": results,
        "note": "held-out test split (models/data/test.jsonl, models/data/test_prose.json); null = model missing",
    }))
}
