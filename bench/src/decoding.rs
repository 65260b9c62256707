//! Suite `decoding`: reference decoding vs + prefix cache, + dual cache, + confidence
//! threshold — wall time, forwards per token, tokens per forward and task accuracy — on the
//! embedded model, and timing on a LLaDA-8B-shaped model with 2 layers (random weights).

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, CacheMode, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{load_model, load_transformer};

use crate::synth::{write_llada, LladaShape};
use crate::tasks::{self, token_agreement};

/// The variants compared, in table order.
fn variants(base: &DecodeSettings) -> Vec<(&'static str, DecodeSettings)> {
    vec![
        ("reference", base.clone()),
        ("prefix_cache", DecodeSettings { cache: CacheMode::Prefix, ..base.clone() }),
        ("dual_cache", DecodeSettings { cache: CacheMode::Dual, ..base.clone() }),
        ("prefix_cache_threshold_0.9", DecodeSettings { cache: CacheMode::Prefix, threshold: Some(0.9), ..base.clone() }),
    ]
}

pub fn run(quick: bool) -> Result<Value> {
    let per_task = if quick { 4 } else { 15 };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada");
    let m = load_model(&dir)?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let tok = m.tokenizer;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    // Four blocks of 8 so caches have block boundaries to work across.
    let base = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let mut rows = serde_json::Map::new();
    let mut results = Vec::new();
    for (name, s) in variants(&base) {
        eprintln!("[decoding] tiny-llada {name} on {} examples", examples.len());
        let r = tasks::evaluate(&mut backend, &tok, &examples, &s, &stop)?;
        results.push((name, r));
    }
    let ref_wall = results[0].1.wall_s;
    for (name, r) in &results {
        let mut v = r.to_json();
        v["speedup_vs_reference"] = json!(ref_wall / r.wall_s);
        v["token_agreement_vs_reference"] = json!(token_agreement(&results[0].1, r));
        rows.insert((*name).to_owned(), v);
    }
    let big = if quick { Value::Null } else { llada8b_timing()? };
    Ok(json!({
        "headline": {
            "prefix_cache_speedup": ref_wall / results[1].1.wall_s,
            "dual_cache_speedup": ref_wall / results[2].1.wall_s,
            "accuracy_reference": results[0].1.accuracy(),
            "accuracy_prefix_cache": results[1].1.accuracy(),
        },
        "settings": base,
        "examples_per_task": per_task,
        "tiny_llada": rows,
        "llada8b_2layer": big,
    }))
}

/// Timing only (random weights): one prompt, each variant.
fn llada8b_timing() -> Result<Value> {
    let shape = LladaShape { hidden: 4096, layers: 2, heads: 32, ffn: 12288, vocab: 126464 };
    let dir = std::env::temp_dir().join("unmask-bench/llada8b-2l-v126464");
    write_llada(&dir, &shape)?;
    let (t, _) = load_transformer(&dir)?;
    let mut backend = CpuBackend::new(Arc::new(t));
    let prompt: Vec<u32> = (0..32u32).map(|i| 1000 + i * 17).collect();
    let base = DecodeSettings { gen_length: 32, block_length: 16, steps: 8, ..Default::default() };
    let mut out = serde_json::Map::new();
    for (name, s) in variants(&base) {
        eprintln!("[decoding] llada8b-2layer {name}");
        let o = generate(&mut backend as &mut dyn Backend, &prompt, &s, &CancelFlag::new(), |_: &StepFrame| ControlFlow::Continue(()))?;
        out.insert(name.into(), json!({"wall_s": o.wall_s, "forwards": o.forwards, "steps": o.steps,
            "tokens_per_forward": o.tokens_per_forward}));
    }
    Ok(json!({"settings": base, "prompt_tokens": prompt.len(), "variants": out,
              "note": "random weights: timing only; threshold decoding on random logits rarely exceeds 0.9"}))
}
