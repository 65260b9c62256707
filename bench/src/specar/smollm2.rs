//! The SmolLM2-135M-Instruct pair of `specar`: SmolLM2 (its GGUF) as target, the draft trained
//! for it (`models/smollm2-draft`, distilled from SmolLM2's greedy outputs) when present, else a
//! clearly labelled untrained layer-skip self-draft.
//!
//! Draft length per schedule is chosen by measurement on the validation split
//! (`models/data/val.jsonl`), then every schedule runs at its chosen length on the test split,
//! the prompts the numbers are reported on; acceptance is reported per task family.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::spec_ar::{draft_on_int8, SpecArSettings, SpecSchedule};
use unmask_engine::model::weights::ModelWeights;
use unmask_engine::model::{load_model, Transformer};

use super::{main_methods, measure, models_dir, pair_json, spec, task_prompts, Pair, Tally};
use crate::tasks;

/// Where the SmolLM2-135M-Instruct GGUF lives: the engine tests' finder, one file for both (its
/// `CARGO_MANIFEST_DIR` is this crate's, a sibling of `engine/`, so `../target` is the same place).
#[path = "../../../engine/tests/common/smollm2.rs"]
mod locate;

/// The trained draft, if present.
fn trained_draft_dir() -> Option<PathBuf> {
    let dir = models_dir().join("smollm2-draft");
    dir.join("model.safetensors").is_file().then_some(dir)
}

/// SmolLM2's own first `keep` layers with its final norm and (tied) LM head: an untrained
/// layer-skip self-draft, the fallback when no trained draft is present.
fn self_draft(target: &Transformer, keep: usize) -> Result<Transformer> {
    let mut cfg = target.config.clone();
    if keep == 0 || keep >= cfg.n_layers {
        bail!("self-draft layer count {keep} must be in 1..{}", cfg.n_layers);
    }
    cfg.n_layers = keep;
    let w = &target.weights;
    let weights = ModelWeights {
        embedding: w.embedding.clone(),
        layers: w.layers[..keep].to_vec(),
        final_norm: w.final_norm.clone(),
        lm_head: w.lm_head.clone(),
        tied_head: w.tied_head,
    };
    Ok(Transformer::new(cfg, weights))
}

/// Draft lengths tried per schedule on the validation prompts.
fn tuning_methods() -> Vec<(String, Option<SpecArSettings>)> {
    let mut m: Vec<(String, Option<SpecArSettings>)> = vec![("ar".into(), None)];
    for k in [2, 3, 4, 6, 8] {
        m.push((format!("sync k={k}"), Some(spec(SpecSchedule::Sync, k))));
    }
    for k in [4, 8] {
        m.push((format!("adaptive k={k}"), Some(spec(SpecSchedule::Adaptive, k))));
    }
    for k in [2, 4, 6, 8] {
        m.push((format!("async k={k}"), Some(spec(SpecSchedule::Async, k))));
    }
    // How far ahead drafting pays when the drafter's core is also the verifier's.
    for ahead in [4, 8] {
        m.push((format!("async k=4 max_ahead={ahead}"), Some(SpecArSettings { max_ahead: ahead, ..spec(SpecSchedule::Async, 4) })));
    }
    m
}

/// Per schedule, the fastest draft length of the tuning run.
fn best_lengths(methods: &[(String, Option<SpecArSettings>)], tallies: &[Tally]) -> BTreeMap<String, usize> {
    let mut best: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let default_ahead = SpecArSettings::default().max_ahead;
    for ((_, s), t) in methods.iter().zip(tallies) {
        // Draft length only: rows that vary other knobs are reported, not chosen from.
        let Some(s) = s.as_ref().filter(|s| s.max_ahead == default_ahead) else { continue };
        let e = best.entry(s.schedule.to_string()).or_insert((0.0, s.draft_len));
        if t.tokens_per_s() > e.0 {
            *e = (t.tokens_per_s(), s.draft_len);
        }
    }
    best.into_iter().map(|(k, (_, n))| (k, n)).collect()
}

/// Acceptance and speed per task family and method.
fn per_task_json(methods: &[(String, Option<SpecArSettings>)], by_task: &BTreeMap<String, Vec<Tally>>) -> Value {
    let mut out = Map::new();
    for (task, tallies) in by_task {
        let base = tallies[0].tokens_per_s();
        let rows: Map<String, Value> = methods
            .iter()
            .zip(tallies)
            .filter(|((_, s), _)| s.is_some())
            .map(|((name, _), t)| {
                (
                    name.clone(),
                    json!({
                        "acceptance_rate": t.stats.acceptance_rate(), "accepted": t.stats.accepted, "judged": t.stats.offered,
                        "tokens": t.tokens, "tokens_per_target_forward": t.tokens as f64 / t.stats.verify_forwards.max(1) as f64,
                        "speedup_vs_ar": t.tokens_per_s() / base.max(1e-9), "identical_outputs": t.runs - t.mismatches, "runs": t.runs,
                    }),
                )
            })
            .collect();
        out.insert(task.clone(), json!({"prompts": tallies[0].runs, "ar_tokens": tallies[0].tokens, "methods": rows}));
    }
    Value::Object(out)
}

/// The SmolLM2 section of `specar.json` (headline keys go into `headline`).
pub(super) fn run(quick: bool, lossless: &mut bool, headline: &mut Map<String, Value>) -> Result<Value> {
    let Some(path) = locate::find_smollm2() else {
        eprintln!("[specar] SmolLM2 GGUF not found (tests/fetch-test-inputs.sh fetches it): pair skipped");
        return Ok(json!({"skipped": "SmolLM2-135M-Instruct GGUF not found; run tests/fetch-test-inputs.sh"}));
    };
    let (n_test, n_val) = if quick { (9, 9) } else { (100, 27) };
    let target = load_model(&path).with_context(|| format!("loading {}", path.display()))?;
    let test_prompts = task_prompts(&target, &tasks::test_split(), n_test)?;
    let val_prompts = task_prompts(&target, &tasks::val_split(), n_val)?;
    let target = Arc::new(target.transformer);
    let gen_length = 48;

    let Some(dir) = trained_draft_dir() else {
        return self_draft_fallback(quick, target, test_prompts, lossless, headline);
    };
    let draft = load_model(&dir).with_context(|| format!("loading {}", dir.display()))?;
    // As `Session::set_draft` runs every draft (the CLI's `--draft`): on the int8 kernels.
    let draft = Arc::new(draft_on_int8(&draft.transformer)?);
    let draft_note = format!(
        "models/smollm2-draft ({} layers, d_model {}, trained on SmolLM2's greedy outputs)",
        draft.config.n_layers, draft.config.hidden
    );
    let pair = |prompts| Pair {
        name: "smollm2-135m/smollm2-draft".into(),
        target: target.clone(),
        draft: draft.clone(),
        draft_note: draft_note.clone(),
        prompts,
        gen_length,
    };

    eprintln!("[specar] SmolLM2-135M / smollm2-draft: draft length per schedule on {n_val} val prompts");
    let tune_pair = pair(val_prompts);
    let tune_methods = tuning_methods();
    let tuned = measure(&tune_pair, &tune_methods)?;
    *lossless &= tuned.all.iter().all(|x| x.mismatches == 0);
    let chosen = best_lengths(&tune_methods, &tuned.all);
    let length = |s: SpecSchedule| chosen.get(&s.to_string()).copied().unwrap_or(4);
    let fastest_on_val = tune_methods
        .iter()
        .zip(&tuned.all)
        .skip(1)
        .max_by(|a, b| a.1.tokens_per_s().total_cmp(&b.1.tokens_per_s()))
        .and_then(|((_, s), _)| s.as_ref().map(|s| s.schedule));

    eprintln!("[specar] SmolLM2-135M / smollm2-draft: {n_test} test prompts, lengths {chosen:?}");
    let methods = vec![
        ("ar".to_string(), None),
        ("sync".into(), Some(spec(SpecSchedule::Sync, length(SpecSchedule::Sync)))),
        ("adaptive".into(), Some(spec(SpecSchedule::Adaptive, length(SpecSchedule::Adaptive)))),
        ("async".into(), Some(spec(SpecSchedule::Async, length(SpecSchedule::Async)))),
        (
            "async own core".into(),
            Some(SpecArSettings { verifier_shares_cores: false, ..spec(SpecSchedule::Async, length(SpecSchedule::Async)) }),
        ),
    ];
    let main = pair(test_prompts);
    let s = measure(&main, &methods)?;
    *lossless &= s.all.iter().all(|x| x.mismatches == 0);
    let ar = s.all[0].tokens_per_s();
    headline.insert("measured_speedup_vs_ar".into(), json!(s.all[3].tokens_per_s() / ar));
    headline.insert("measured_speedup_vs_sync_spec".into(), json!(s.all[3].tokens_per_s() / s.all[1].tokens_per_s()));
    headline.insert("acceptance_rate".into(), json!(s.all[3].stats.acceptance_rate()));
    headline.insert("smollm2_draft".into(), json!("models/smollm2-draft"));
    headline.insert("smollm2_sync_speedup_vs_ar".into(), json!(s.all[1].tokens_per_s() / ar));
    headline.insert("smollm2_sync_acceptance_rate".into(), json!(s.all[1].stats.acceptance_rate()));
    headline.insert("smollm2_async_own_core_speedup_vs_ar".into(), json!(s.all[4].tokens_per_s() / ar));
    if let Some(best) = fastest_on_val {
        let i = methods.iter().position(|(n, _)| *n == best.to_string()).unwrap_or(3);
        headline.insert("smollm2_schedule_chosen_on_val".into(), json!(best.to_string()));
        headline.insert("smollm2_chosen_speedup_vs_ar".into(), json!(s.all[i].tokens_per_s() / ar));
    }
    let mut j = pair_json(&main, &methods, &s.all);
    if let Value::Object(m) = &mut j {
        m.insert("per_task".into(), per_task_json(&methods, &s.by_task));
        m.insert(
            "tuning".into(),
            json!({
                "split": "models/data/val.jsonl", "prompts": tune_pair.prompts.len(),
                "chosen_draft_len": chosen, "fastest_schedule": fastest_on_val.map(|s| s.to_string()),
                "methods": pair_json(&tune_pair, &tune_methods, &tuned.all)["methods"].clone(),
            }),
        );
        m.insert("verify_cost".into(), verify_cost(&main.target, if quick { 5 } else { 15 })?);
    }
    Ok(j)
}

/// No trained draft: the untrained layer-skip self-draft, its depth chosen by a short probe.
fn self_draft_fallback(
    quick: bool,
    target: Arc<Transformer>,
    prompts: Vec<(String, Vec<u32>)>,
    lossless: &mut bool,
    headline: &mut Map<String, Value>,
) -> Result<Value> {
    eprintln!("[specar] no models/smollm2-draft: SmolLM2-135M / untrained self-draft (fallback)");
    let pair = |keep: usize, prompts: Vec<(String, Vec<u32>)>| -> Result<Pair> {
        Ok(Pair {
            name: "smollm2-135m/self-draft (fallback: models/smollm2-draft absent)".into(),
            draft_note: format!(
                "SmolLM2's first {keep} of 30 layers + its final norm and LM head (untrained layer-skip self-draft)"
            ),
            draft: Arc::new(draft_on_int8(&self_draft(&target, keep)?)?),
            target: target.clone(),
            prompts,
            gen_length: 48,
        })
    };
    let mut probe = Map::new();
    let mut best = (0.0f64, 4usize);
    for keep in [2, 4, 8] {
        let p = pair(keep, prompts[..prompts.len().min(if quick { 3 } else { 9 })].to_vec())?;
        let m = vec![("ar".into(), None), ("sync".into(), Some(spec(SpecSchedule::Sync, 4)))];
        let r = measure(&p, &m)?.all;
        let speed = r[1].tokens_per_s() / r[0].tokens_per_s();
        *lossless &= r.iter().all(|x| x.mismatches == 0);
        probe.insert(
            format!("keep {keep}"),
            json!({"speedup_sync_vs_ar": speed, "acceptance_rate": r[1].stats.acceptance_rate()}),
        );
        if speed > best.0 {
            best = (speed, keep);
        }
    }
    let smol = pair(best.1, prompts)?;
    let methods = main_methods(4);
    let s = measure(&smol, &methods)?;
    *lossless &= s.all.iter().all(|x| x.mismatches == 0);
    headline.insert("measured_speedup_vs_ar".into(), json!(s.all[3].tokens_per_s() / s.all[0].tokens_per_s()));
    headline.insert("measured_speedup_vs_sync_spec".into(), json!(s.all[3].tokens_per_s() / s.all[1].tokens_per_s()));
    headline.insert("acceptance_rate".into(), json!(s.all[3].stats.acceptance_rate()));
    headline.insert("smollm2_draft".into(), json!("untrained self-draft (fallback)"));
    let mut j = pair_json(&smol, &methods, &s.all);
    if let Value::Object(m) = &mut j {
        m.insert("per_task".into(), per_task_json(&methods, &s.by_task));
        m.insert("self_draft_probe".into(), Value::Object(probe));
        m.insert("verify_cost".into(), verify_cost(&smol.target, if quick { 5 } else { 15 })?);
    }
    Ok(j)
}

/// What verifying k drafts costs the target relative to one token (one forward of 1 + k tokens
/// after a 128-token context, median of `reps`): the ceiling a perfect draft could reach is
/// `(k + 1) / ratio`. Measured.
fn verify_cost(target: &Arc<Transformer>, reps: usize) -> Result<Value> {
    use unmask_engine::backend::Backend;
    use unmask_engine::model::{ForwardRequest, KvMode};
    let mut be = CpuBackend::new(target.clone());
    let ctx = 128usize;
    let mut cache = be.new_cache(ctx + 16);
    let toks: Vec<u32> = (0..ctx as u32 + 16).map(|i| 100 + (i * 7) % 1000).collect();
    let pos: Vec<usize> = (0..ctx + 16).collect();
    be.forward(
        &ForwardRequest {
            tokens: &toks[..ctx],
            positions: &pos[..ctx],
            logits_rows: &[ctx - 1],
            kv: KvMode::ReadWrite,
        },
        Some(&mut cache),
    )?;
    let mut rows = Map::new();
    let mut base = f64::NAN;
    for m in [1usize, 2, 3, 5, 9] {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            cache.invalidate_from(ctx);
            let req_rows: Vec<usize> = (0..m).collect();
            let t0 = Instant::now();
            be.forward(
                &ForwardRequest {
                    tokens: &toks[ctx..ctx + m],
                    positions: &pos[ctx..ctx + m],
                    logits_rows: &req_rows,
                    kv: KvMode::ReadWrite,
                },
                Some(&mut cache),
            )?;
            times.push(t0.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        if m == 1 {
            base = med;
        }
        rows.insert(format!("{m}"), json!({"median_s": med, "ratio_to_one_token": med / base}));
    }
    Ok(json!({"context": ctx, "reps": reps, "tokens": rows}))
}
