//! Suite `moe`, measured part (this machine, real wall time, real math): grouped expert execution
//! against per-expert launches on the embedded MoE model's prefill, and what capacity dropping
//! costs in accuracy (exact match on the large held-out task set, masked-token accuracy on
//! held-out prose), with capacity dropping off (exact routing) as the reference.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::vnpu::profile::DeviceProfile;
use unmask_engine::backend::vnpu::{VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::{load_model, ChatMessage, ChatTemplate, ForwardRequest, KvMode, TextTokenizer, Transformer};
use unmask_engine::moe::ffn::{MoeExecution, StaticPlan};
use unmask_engine::moe::{CapacityTiers, MoeCalibration, MoePolicy};
use unmask_engine::run::{calibrate_moe, static_plan, CalibrationShape};

use crate::{prose, tasks};

/// The embedded MoE model.
const MODEL: &str = "tiny-llada-moe";

/// Prefill lengths timed (the model's context is 256).
const PREFILL_LENGTHS: [usize; 3] = [64, 128, 256];

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(MODEL)
}

/// The calibration set: the validation split (never the test data accuracy is judged on).
fn calibration_messages() -> Result<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/val.jsonl");
    let ex = tasks::load(&path, usize::MAX)?;
    Ok(ex.into_iter().filter_map(|e| e.message).collect())
}

/// The large held-out set (300 prompts per task, disjoint from val and test).
fn eval_set() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/eval_large.jsonl")
}

fn exec(policy: MoePolicy, plan: &Arc<StaticPlan>, renormalise: bool) -> MoeExecution {
    let plan = (policy == MoePolicy::StaticTiers).then(|| plan.clone());
    MoeExecution { policy, plan, renormalise_dropped: renormalise, residency: None }
}

/// Accuracy per task with its Wilson interval.
fn per_task_json(r: &tasks::EvalResult) -> serde_json::Map<String, Value> {
    r.per_task
        .iter()
        .map(|(k, &(c, n))| {
            let (l, h) = crate::tasks::wilson(c, n);
            (k.clone(), json!({"accuracy": c as f64 / n.max(1) as f64, "ci95": [l, h], "n": n}))
        })
        .collect()
}

/// Mean and 95 % interval of paired differences.
fn paired(diffs: &[f64]) -> (f64, f64, f64) {
    let n = diffs.len().max(1) as f64;
    let mean = diffs.iter().sum::<f64>() / n;
    let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    let half = 1.96 * (var / n).sqrt();
    (mean, mean - half, mean + half)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prefill tokens: the calibration prompts' ids laid end to end (real text, not random ids).
fn prefill_tokens(t: &Transformer, ids: &[Vec<u32>], n: usize) -> Vec<u32> {
    let mut out: Vec<u32> = ids.iter().flatten().copied().take(n).collect();
    let mask = t.config.mask_token_id.unwrap_or(0);
    out.resize(n, mask);
    out
}

/// Times one prefill forward of each length under each policy, interleaved, `reps` times.
fn time_prefill(t: &Transformer, plan: &Arc<StaticPlan>, ids: &[Vec<u32>], reps: usize) -> Result<Value> {
    let policies = [MoePolicy::Naive, MoePolicy::StaticTiers, MoePolicy::Cpu];
    let mut rows = Vec::new();
    for &n in &PREFILL_LENGTHS {
        let tokens = prefill_tokens(t, ids, n);
        let positions: Vec<usize> = (0..n).collect();
        let req = ForwardRequest { tokens: &tokens, positions: &positions, logits_rows: &[], kv: KvMode::Ignore };
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
        let mut stats = Vec::new();
        for rep in 0..reps + 1 {
            for (i, &p) in policies.iter().enumerate() {
                t.set_moe_execution(exec(p, plan, true))?;
                t.take_moe_stats();
                let start = Instant::now();
                t.forward(&req, None)?;
                let s = start.elapsed().as_secs_f64();
                let st = t.take_moe_stats();
                // The first round warms caches and the scratch; it is not timed.
                if rep > 0 {
                    times[i].push(s);
                } else {
                    stats.push(st);
                }
            }
        }
        let med: Vec<f64> = times.into_iter().map(median).collect();
        rows.push(json!({
            "tokens": n,
            "per_expert_s": med[0], "grouped_s": med[1], "cpu_dynamic_s": med[2],
            "grouped_speedup_vs_per_expert": med[0] / med[1],
            "launches_per_expert": stats[0].launches, "launches_grouped": stats[1].launches,
            "grouped_dropped_pairs": stats[1].dropped, "grouped_routed_pairs": stats[1].routed,
            "grouped_padding_rows": stats[1].padded_rows,
        }));
    }
    Ok(Value::Array(rows))
}

/// Exact match per task under one execution, with per-example correctness for paired stats.
fn accuracy(
    t: &Arc<Transformer>,
    tok: &TextTokenizer,
    template: &ChatTemplate,
    examples: &[tasks::TaskExample],
    e: MoeExecution,
) -> Result<(tasks::EvalResult, Vec<bool>, unmask_engine::moe::MoeStats)> {
    t.set_moe_execution(e)?;
    t.take_moe_stats();
    let cfg = &t.config;
    let stop: Vec<u32> = [cfg.eos_token_id, cfg.eot_token_id].into_iter().flatten().collect();
    // The quality suite's reference LLaDA decoding for the embedded models.
    let settings = DecodeSettings { gen_length: 16, block_length: 16, steps: 16, ..Default::default() };
    let mut backend = CpuBackend::new(t.clone());
    let r = tasks::evaluate_with(&mut backend, tok, template, examples, &settings, &stop)?;
    let ok: Vec<bool> = r
        .outputs
        .iter()
        .zip(examples)
        .map(|(out, ex)| tok.decode(unmask_engine::decode::trim_at_stop(out, &stop), true).trim() == ex.answer.trim())
        .collect();
    Ok((r, ok, t.take_moe_stats()))
}

/// The device load-aware residency is judged on (the ANE profile of the simulated prefill).
const RESIDENCY_PROFILE: &str = "m2-max";

/// Load-aware residency in real runs: the embedded MoE model decodes held-out prompts on the
/// virtual NPU under static tiers, every group launched vs cold groups on the CPU lane (a real
/// second thread here), prompt by prompt alternating. Simulated device time and energy (labelled)
/// and this machine's wall time are reported apart; the answers must be identical.
fn residency_runs(
    t: &Arc<Transformer>,
    tok: &TextTokenizer,
    template: &ChatTemplate,
    plan: &Arc<StaticPlan>,
    examples: &[tasks::TaskExample],
) -> Result<Value> {
    let cfg = &t.config;
    let stop: Vec<u32> = [cfg.eos_token_id, cfg.eot_token_id].into_iter().flatten().collect();
    let settings = DecodeSettings { gen_length: 16, block_length: 16, steps: 16, ..Default::default() };
    let profile = DeviceProfile::builtin(RESIDENCY_PROFILE)?;
    let mut backends = [
        VirtualNpu::new(t.clone(), profile.clone(), VnpuConfig::default())?,
        VirtualNpu::new(t.clone(), profile, VnpuConfig::default())?,
    ];
    let model = backends[1].moe_residency().context("the residency profile has no NPU")?;
    let mut wall = [0.0f64; 2];
    let mut stats = [unmask_engine::moe::MoeStats::default(), Default::default()];
    let mut outputs: [Vec<Vec<u32>>; 2] = [Vec::new(), Vec::new()];
    for ex in examples {
        for (i, b) in backends.iter_mut().enumerate() {
            let residency = (i == 1).then(|| model.clone());
            t.set_moe_execution(MoeExecution {
                policy: MoePolicy::StaticTiers,
                plan: Some(plan.clone()),
                renormalise_dropped: true,
                residency,
            })?;
            t.take_moe_stats();
            let start = Instant::now();
            let r = tasks::evaluate_with(b, tok, template, std::slice::from_ref(ex), &settings, &stop)?;
            wall[i] += start.elapsed().as_secs_f64();
            stats[i].merge(&t.take_moe_stats());
            outputs[i].extend(r.outputs);
        }
    }
    t.set_moe_execution(MoeExecution::default())?;
    let totals = [backends[0].totals(), backends[1].totals()];
    let side = |i: usize| {
        json!({
            "simulated_s": totals[i].simulated_s, "simulated_energy_j": totals[i].energy_j,
            "measured_wall_s": wall[i], "launches": stats[i].launches,
            "cpu_lane_groups": stats[i].cpu_lane_groups, "forwards": totals[i].forwards,
        })
    };
    Ok(json!({
        "profile": RESIDENCY_PROFILE,
        "prompts": examples.len(),
        "all_groups_launched": side(0),
        "cold_groups_on_cpu_lane": side(1),
        "sim_speedup": totals[0].simulated_s / totals[1].simulated_s,
        "sim_energy_ratio": totals[0].energy_j / totals[1].energy_j,
        "measured_wall_ratio": wall[0] / wall[1],
        "groups_moved_share": stats[1].cpu_lane_groups as f64 / (stats[1].cpu_lane_groups + stats[1].launches).max(1) as f64,
        "identical_answers": outputs[0] == outputs[1],
        "simulated": true,
    }))
}

/// The measured section of the `moe` suite.
pub fn run(quick: bool) -> Result<Value> {
    let dir = model_dir();
    let m = load_model(&dir).with_context(|| format!("loading {}", dir.display()))?;
    let (tok, template) = (m.tokenizer, m.template);
    let t = Arc::new(m.transformer);

    // Calibrate on the validation split.
    let messages = calibration_messages()?;
    let messages = if quick { messages.into_iter().step_by(5).collect() } else { messages };
    let ids: Vec<Vec<u32>> = messages
        .iter()
        .map(|msg| tok.encode(&template.render(&[ChatMessage::user(msg.clone())], true)))
        .collect::<unmask_engine::Result<_>>()?;
    let shape = CalibrationShape::for_model(&t, 16);
    eprintln!("[moe] calibrating {MODEL} on {} validation prompts", ids.len());
    let cal: MoeCalibration = calibrate_moe(&t, &ids, &shape, &mut |_, _| {})?;
    let plan = static_plan(&t, Some(&cal))?;

    eprintln!("[moe] timing prefill: per-expert launches vs grouped vs dynamic");
    let prefill = time_prefill(&t, &plan, &ids, if quick { 5 } else { 30 })?;
    let longest = prefill.as_array().and_then(|a| a.last()).cloned().unwrap_or(Value::Null);

    // Accuracy: exact routing vs capacity dropping with and without renormalisation.
    let per_task = if quick { 20 } else { 300 };
    let examples = tasks::load(&eval_set(), per_task)?;
    eprintln!("[moe] exact match on {} held-out prompts x 3 executions", examples.len());
    let (exact, ok_exact, _) = accuracy(&t, &tok, &template, &examples, exec(MoePolicy::Cpu, &plan, true))?;
    let mut variants = serde_json::Map::new();
    let mut drop_points = None;
    for (name, renorm) in [("static_tiers_renormalised", true), ("static_tiers_kept_weights", false)] {
        let (r, ok, stats) = accuracy(&t, &tok, &template, &examples, exec(MoePolicy::StaticTiers, &plan, renorm))?;
        let diffs: Vec<f64> = ok_exact.iter().zip(&ok).map(|(a, b)| (*a as i32 - *b as i32) as f64 * 100.0).collect();
        let (d, lo, hi) = paired(&diffs);
        let tasks_json = per_task_json(&r);
        if renorm {
            drop_points = Some(d);
        }
        variants.insert(
            name.into(),
            json!({
                "accuracy": r.accuracy(), "tasks": tasks_json,
                "drop_points_vs_exact": d, "drop_points_ci95": [lo, hi],
                "dropped_pairs": stats.dropped, "routed_pairs": stats.routed, "drop_rate": stats.drop_rate(),
            }),
        );
    }
    let exact_tasks = per_task_json(&exact);

    let residency_prompts: Vec<tasks::TaskExample> =
        examples.iter().step_by(if quick { 10 } else { 15 }).cloned().collect();
    eprintln!("[moe] load-aware residency on vnpu:{RESIDENCY_PROFILE}: {} prompts x 2", residency_prompts.len());
    let mut residency = serde_json::Map::new();
    // The default plan (groups of 4: two groups per layer on this 8-expert model) and a finer one,
    // where a cold group is small enough for one CPU core to beat a launch.
    let pairs = plan.groups.first().and_then(|g| g.groups.first()).map_or(0, Vec::len);
    let fine = Arc::new(StaticPlan::from_calibration(&cal, &CapacityTiers::default(), 2));
    for (size, p) in [(pairs, &plan), (2, &fine)] {
        residency.insert(format!("groups_of_{size}"), residency_runs(&t, &tok, &template, p, &residency_prompts)?);
    }

    // Masked-token accuracy on held-out prose, capacity off vs on.
    let mut prose_set = prose::load(&prose::test_prose())?;
    if quick {
        prose_set.windows.truncate(8);
        prose_set.masked_positions.values_mut().for_each(|v| v.truncate(8));
    }
    t.set_moe_execution(exec(MoePolicy::Cpu, &plan, true))?;
    let prose_exact = prose::masked_token_accuracy(&t, &prose_set)?;
    t.set_moe_execution(exec(MoePolicy::StaticTiers, &plan, true))?;
    t.take_moe_stats();
    let prose_tiers = prose::masked_token_accuracy(&t, &prose_set)?;
    let prose_stats = t.take_moe_stats();
    t.set_moe_execution(MoeExecution::default())?;

    Ok(json!({
        "model": MODEL,
        "calibration": {"split": "models/data/val.jsonl", "prompts": cal.total_prompts(), "buckets": cal.buckets},
        "plan": {"distinct_expert_shapes": plan.capacities.distinct_shapes(), "group_size": plan.groups.first().and_then(|g| g.groups.first()).map_or(0, Vec::len)},
        "prefill": prefill,
        "measured_grouped_speedup_cpu": longest["grouped_speedup_vs_per_expert"],
        "accuracy": {
            "set": "models/data/eval_large.jsonl", "per_task": per_task,
            "exact_routing": {"accuracy": exact.accuracy(), "tasks": exact_tasks},
            "variants": variants,
        },
        "accuracy_drop_points": drop_points,
        "residency": residency,
        "prose_masked_token": {"exact_routing": prose_exact, "static_tiers": prose_tiers, "drop_rate": prose_stats.drop_rate()},
    }))
}
