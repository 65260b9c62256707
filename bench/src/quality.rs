//! Suite `quality`: the embedded models on the held-out test split, run by our
//! Rust engine: exact match per task with reference decoding (LLaDA's low-confidence schedule for
//! the dLLMs, greedy for the AR models), masked-token accuracy (dLLMs) or perplexity (AR) on
//! held-out prose; the unseen set (`models/data/unseen.jsonl`: words and instructions no training
//! example used, `models/train/skills.py`) per skill family with 95 % intervals; for dLLMs with a
//! 512-token context the long-answer set (`models/data/unseen_long.jsonl`, answers of 60-260
//! tokens); the unseen set again as each message's second turn of a conversation (one earlier
//! exchange before it); the default dLLM by right unseen answers per second; and every answer the
//! README and docs promise, run through the `unmask` binary.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::{trim_at_stop, CacheMode, DecodeSettings};
use unmask_engine::model::load_model;
use unmask_engine::run::{effective_settings, SettingsOverrides};

use crate::{docs_examples, prose, tasks};

/// The unseen set's families (`models/train/skills.py` FAMILIES), in report order.
pub const UNSEEN_FAMILIES: [&str; 8] = ["add", "sub", "reverse", "sort", "copy", "kv", "count", "chat"];

/// Canvas for the unseen set: its longest answers (12 mixed-case words) take ~60 tokens.
/// dLLMs: LLaDA's semi-autoregressive reference (blocks of 32, one token per step); AR: greedy.
fn unseen_settings() -> DecodeSettings {
    DecodeSettings { gen_length: 64, block_length: 32, steps: 64, ..Default::default() }
}

fn unseen_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/unseen.jsonl")
}

/// The long-answer families (`models/train/skills.py` LONG_FAMILIES), in report order.
pub const LONG_FAMILIES: [&str; 5] = ["long_reverse", "long_sort", "long_count", "long_add_steps", "long_copy"];

/// Context a model needs for the long-answer set: prompts reach 278 tokens, answers 260.
const LONG_CONTEXT: usize = 512;

/// Canvas for the long-answer set: 256 tokens in blocks of 32, one token per step; the prefix
/// and suffix K/V cached at each block's start (dual cache) and decoding stopped after a block
/// that ends in end-of-text, so a 256-step decode of a 300-token prompt stays affordable.
fn long_settings() -> DecodeSettings {
    DecodeSettings {
        gen_length: 256,
        block_length: 32,
        steps: 256,
        cache: CacheMode::Dual,
        early_stop_eos: true,
        ..Default::default()
    }
}

fn unseen_long_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/unseen_long.jsonl")
}

/// The embedded models, in report order.
pub const MODELS: [&str; 5] = ["tiny-llada", "tiny-ar", "tiny-draft", "tiny-llada-moe", "small-llada"];

/// The two embedded dLLMs the default is chosen from, by right answers per second of decoding
/// on the unseen set.
const DEFAULT_CANDIDATES: [&str; 2] = ["tiny_llada", "small_llada"];

/// Evaluates one model directory; `None` when it is not there.
fn eval_model(
    dir: &Path,
    per_task: usize,
    per_family: usize,
    turn2_per_family: usize,
    long_per_family: usize,
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
    let shipped = effective_settings(&cfg, &m.generation, &SettingsOverrides::default());
    let tok = m.tokenizer;
    let template = m.template;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    eprintln!("[quality] {} ({:?}) on {} examples", dir.display(), cfg.arch, examples.len());
    let r = tasks::evaluate_with(&mut backend, &tok, &template, &examples, settings, &stop)?;
    let mut v = r.to_json();
    v["arch"] = json!(cfg.arch);
    v["prose"] = prose_metrics;
    // The decoding a user gets (the model's generation_config as `unmask generate` and `unmask
    // serve` apply it) on the same prompts, when it is not the reference above: a shipped
    // default must score what the reference scores.
    if cfg.arch.is_diffusion() && shipped_differs(&shipped, settings) {
        eprintln!("[quality] {} with its shipped decoding on {} examples", dir.display(), examples.len());
        let s = tasks::evaluate_with(&mut backend, &tok, &template, &examples, &shipped, &stop)?;
        let mut sv = s.to_json();
        sv["settings"] = json!(shipped);
        sv["ci95"] = json!(s.accuracy_ci95());
        sv["reference_ci95"] = json!(r.accuracy_ci95());
        sv["same_answer_as_reference"] = json!(same_answers(&r, &s, &stop));
        v["shipped_decoding"] = sv;
    }
    let unseen = tasks::load(&unseen_path(), per_family)?;
    eprintln!("[quality] {} on the unseen set: {} examples", dir.display(), unseen.len());
    let u = tasks::evaluate_with(&mut backend, &tok, &template, &unseen, &unseen_settings(), &stop)?;
    let mut uv = u.to_json();
    // Answer quality per second of decoding: what picks the default dLLM (the bigger model
    // must earn its slower forwards with more right answers in the same time).
    let (correct, _) = u.correct();
    uv["correct_per_s"] = json!(if u.wall_s > 0.0 { Some(correct as f64 / u.wall_s) } else { None });
    with_ci95(&mut uv, &u);
    v["unseen"] = uv;
    if turn2_per_family > 0 {
        // The same messages as the second turn of a conversation (one earlier turn, answered
        // right): a chat must not answer worse after its first exchange.
        let later = tasks::as_later_turns(&tasks::load(&unseen_path(), turn2_per_family)?, 1);
        eprintln!("[quality] {} on the unseen set as second turns: {} examples", dir.display(), later.len());
        let t = tasks::evaluate_with(&mut backend, &tok, &template, &later, &unseen_settings(), &stop)?;
        let mut tv = t.to_json();
        with_ci95(&mut tv, &t);
        v["unseen_second_turn"] = tv;
    }
    if cfg.arch.is_diffusion() && cfg.max_seq >= LONG_CONTEXT && long_per_family > 0 {
        let long = tasks::load(&unseen_long_path(), long_per_family)?;
        eprintln!("[quality] {} on the long-answer set: {} examples", dir.display(), long.len());
        let l = tasks::evaluate_with(&mut backend, &tok, &template, &long, &long_settings(), &stop)?;
        let mut lv = l.to_json();
        with_ci95(&mut lv, &l);
        v["unseen_long"] = lv;
    }
    Ok(Some(v))
}

/// Fraction of examples whose answers (up to the first stop token) are identical in two runs.
fn same_answers(a: &tasks::EvalResult, b: &tasks::EvalResult, stop: &[u32]) -> f64 {
    let same = a.outputs.iter().zip(&b.outputs).filter(|(x, y)| trim_at_stop(x, stop) == trim_at_stop(y, stop)).count();
    same as f64 / a.outputs.len().max(1) as f64
}

/// Whether a model's shipped decoding differs from the reference on the test split's canvas.
fn shipped_differs(shipped: &DecodeSettings, reference: &DecodeSettings) -> bool {
    shipped.gen_length == reference.gen_length
        && (shipped.block_length, shipped.steps, shipped.threshold, shipped.cache)
            != (reference.block_length, reference.steps, reference.threshold, reference.cache)
}

/// Adds each family's 95 % Wilson interval to `json` (the `to_json` of `r`).
fn with_ci95(json: &mut Value, r: &tasks::EvalResult) {
    for (fam, (ok, n)) in &r.per_task {
        let (lo, hi) = tasks::wilson(*ok, *n);
        json["tasks"][fam]["ci95"] = json!([lo, hi]);
    }
}

/// The default-model candidate with the most right unseen answers per second, when every
/// candidate was evaluated in the same run (a ratio across runs would compare different
/// machine states); `None` otherwise.
fn default_pick(results: &serde_json::Map<String, Value>) -> Option<String> {
    let entries: Vec<(&str, &Value)> =
        DEFAULT_CANDIDATES.iter().filter_map(|m| results.get(*m).map(|v| (*m, v))).collect();
    if entries.len() != DEFAULT_CANDIDATES.len() {
        return None;
    }
    let stamp = entries[0].1["evaluated_at_unix"].as_u64()?;
    if entries.iter().any(|(_, v)| v["evaluated_at_unix"].as_u64() != Some(stamp)) {
        return None;
    }
    entries
        .iter()
        .filter_map(|(m, v)| v["unseen"]["correct_per_s"].as_f64().map(|c| (*m, c)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(m, _)| m.replace('_', "-"))
}

/// Models to evaluate: `$UNMASK_QUALITY_MODELS` (comma-separated) or all of them. Entries of models
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
    // Unseen-set examples per family: all 300, `$UNMASK_QUALITY_PER_FAMILY` overrides.
    let per_family = match std::env::var("UNMASK_QUALITY_PER_FAMILY").ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None if quick => 4,
        None => 300,
    };
    // Unseen-set examples per family asked as a conversation's second turn: 100,
    // `$UNMASK_QUALITY_TURN2_PER_FAMILY` overrides (0 skips).
    let turn2_per_family = match std::env::var("UNMASK_QUALITY_TURN2_PER_FAMILY").ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None if quick => 2,
        None => 100,
    };
    // Long-answer examples per family (models with a 512-token context): all 300 by default,
    // `$UNMASK_QUALITY_LONG_PER_FAMILY` overrides.
    let long_per_family = match std::env::var("UNMASK_QUALITY_LONG_PER_FAMILY").ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None if quick => 1,
        None => 300,
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
        let dir = models.join(name);
        let mut v = eval_model(&dir, per_task, per_family, turn2_per_family, long_per_family, &settings, &prose_set)?;
        if let Some(Value::Object(o)) = &mut v {
            o.insert("examples_per_task".into(), json!(per_task));
            o.insert("unseen_examples_per_family".into(), json!(per_family));
            if o.contains_key("unseen_second_turn") {
                o.insert("unseen_second_turn_examples_per_family".into(), json!(turn2_per_family));
            }
            if o.contains_key("unseen_long") {
                o.insert("unseen_long_examples_per_family".into(), json!(long_per_family));
            }
            o.insert("evaluated_at_unix".into(), json!(stamp));
            o.insert("eval_elapsed_s".into(), json!(started.elapsed().as_secs_f64()));
        }
        results.insert(name.replace('-', "_"), v.into());
    }
    let acc = |m: &str, task: &str| results.get(m).and_then(|v| v["tasks"][task]["accuracy"].as_f64());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let unmask = crate::unmask_bin::build_unmask(&root)?;
    let docs = docs_examples::check(&root, &unmask)?;
    for d in docs.iter().filter(|d| !d.passed) {
        eprintln!("[quality] {}: \"{}\" promises {} but answered {:?}", d.page, d.prompt, d.promised, d.answered);
    }
    let mut headline = json!({
        "dllm_addition_accuracy": acc("tiny_llada", "add"),
        "dllm_reverse_accuracy": acc("tiny_llada", "reverse"),
        "ar_addition_accuracy": acc("tiny_ar", "add"),
        "ar_reverse_accuracy": acc("tiny_ar", "reverse"),
        "docs_examples_passed": docs.iter().filter(|d| d.passed).count(),
        "docs_examples_total": docs.len(),
        "chat_intent_accuracy": results.get("tiny_llada").and_then(|v| v["unseen"]["tasks"]["chat"]["accuracy"].as_f64()),
    });
    for (model, v) in &results {
        for fam in UNSEEN_FAMILIES {
            headline[format!("{model}_unseen_{fam}_accuracy")] = v["unseen"]["tasks"][fam]["accuracy"].clone();
        }
        headline[format!("{model}_unseen_correct_per_s")] = v["unseen"]["correct_per_s"].clone();
        headline[format!("{model}_unseen_accuracy")] = v["unseen"]["accuracy"].clone();
        headline[format!("{model}_unseen_second_turn_accuracy")] = v["unseen_second_turn"]["accuracy"].clone();
        if v.get("shipped_decoding").is_some() {
            headline[format!("{model}_shipped_decoding_accuracy")] = v["shipped_decoding"]["accuracy"].clone();
            headline[format!("{model}_reference_decoding_accuracy")] = v["accuracy"].clone();
        }
        if v.get("unseen_long").is_some() {
            for fam in LONG_FAMILIES {
                headline[format!("{model}_unseen_{fam}_accuracy")] = v["unseen_long"]["tasks"][fam]["accuracy"].clone();
            }
        }
    }
    headline["default_dllm_by_unseen_correct_per_s"] = json!(default_pick(&results));
    Ok(json!({
        "headline": headline,
        "settings": settings,
        "unseen_settings": unseen_settings(),
        "unseen_long_settings": long_settings(),
        "unseen_long_examples_per_family_this_run": long_per_family,
        "unseen_examples_per_family_this_run": per_family,
        "docs_examples": docs,
        "examples_per_task_this_run": per_task,
        "prose_windows": prose_set.windows.len(),
        "models": results,
        "note": "held-out test split (models/data/test.jsonl, models/data/test_prose.json); unseen set \
                 (models/data/unseen.jsonl: held-out words, names, made-up words and paraphrased \
                 instructions; chat = exact intent reply); null = model missing",
    }))
}
