//! Suite `ablation`: does dual-path progressive revision earn its place? First a search on a
//! tuning split for a setting where speculation loses accuracy and revision might win it back
//! (`ablation_search`); then, on the evaluation set (300 prompts per family, none of them in the
//! tuning split; by default the unseen-word, paraphrased-instruction set: reversal, sorting,
//! copying, key-value lookup, arithmetic, counting, chat; `$UNMASK_ABLATION_PROMPTS`), the
//! reference, prefix-cache decoding, speculation and revision at their defaults, and
//! the searched point without speculation / speculative / speculative + revision: accuracy with
//! 95 % intervals and paired differences, forwards, LM-head rows, revisions (fixed / broke),
//! CPU wall time, simulated NPU latency and energy; the searched point again on the MoE dLLM;
//! measured host wall time (`ablation_wall`); and the confidence calibration behind the revision
//! thresholds. `$UNMASK_ABLATION_PER_TASK` / `_VAL_PER_TASK` / `_WALL_PER_TASK` /
//! `_MOE_PER_TASK` override the prompts per task (defaults 300 / 200 / 50 / 100).
//!
//! Runs on the virtual NPU (SM8750 profile; real math of the tiny model on this CPU) **timed at
//! LLaDA-8B layer shapes** (`VnpuConfig::timed_as`): its shape buckets and launch costs drive the
//! speculative window, its CPU path (the phone's cores, 8B-shaped forwards) runs revision, and the
//! decoding loop's asynchronous CPU-path schedule runs on that simulated clock. `sim_8b_sm8750_s`
//! is that **simulated** latency, accuracy comes from the same runs. Every run is also recorded
//! (shape of each dense and CPU-path forward, `RecordingBackend`) and replayed on the SM8650 /
//! SM8750 / SM8850 profiles (`replay_dual_path`: lockstep and the async estimate).

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::vnpu::{profile::DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::recorder::RecordingBackend;
use unmask_engine::backend::vnpu::replay::{replay_dual_path_on, DualPathTrace, ModelPreset};
use unmask_engine::backend::Backend;
use unmask_engine::decode::dual_path::{self, DualPathStats};
use unmask_engine::decode::revision::{CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{generate_dyn, trim_at_stop, CacheMode, CancelFlag, DecodeOutput, DecodeSettings, StepFrame, TokenState};
use unmask_engine::model::{load_model, ChatTemplate, TextTokenizer, Transformer};

use crate::tasks::{self, token_agreement, EvalResult, TaskExample};

/// Profiles the recorded runs are replayed on at LLaDA-8B shapes.
const REPLAY_DEVICES: &[&str] = &["sm8650", "sm8750", "sm8850"];

/// One configuration; `npu_loop` forces the NPU-aware loop even with both features off.
pub(crate) struct Variant {
    pub(crate) name: String,
    pub(crate) settings: DecodeSettings,
    pub(crate) npu_loop: bool,
}

fn variants(base: &DecodeSettings) -> Vec<Variant> {
    let prefix = DecodeSettings { cache: CacheMode::Prefix, ..base.clone() };
    // The window's buckets come from the backend's cost profile.
    let spec = Some(SpeculativeSettings::default());
    let rev = Some(RevisionSettings::default());
    let aggressive = Some(SpeculativeSettings { trigger: base.block_length, max_lookahead: 24, accept_confidence: Some(0.5), ..Default::default() });
    let v = |name: &str, settings, npu_loop| Variant { name: name.to_owned(), settings, npu_loop };
    vec![
        v("reference", base.clone(), false),
        v("prefix_cache", prefix.clone(), false),
        v("speculative", DecodeSettings { speculative: spec.clone(), ..prefix.clone() }, true),
        v("spec_revision", DecodeSettings { speculative: spec.clone(), revision: rev, ..prefix.clone() }, true),
        // The same with the CPU path in lockstep (every step waits for its job).
        v("spec_revision_lockstep", DecodeSettings { speculative: spec, revision: Some(RevisionSettings { schedule: CpuPathSchedule::Lockstep, ..Default::default() }), ..prefix.clone() }, true),
        // Aggressive speculation: look ahead on every step, accept drafts by their own confidence
        // (not by the fresh forward's agreement). The search (tuning split) covers this and
        // more, with revision thresholds swept on its point.
        v("spec_aggressive", DecodeSettings { speculative: aggressive, ..prefix }, true),
    ]
}

/// Totals of one variant beyond the shared `EvalResult`.
#[derive(Default)]
pub(crate) struct Extra {
    /// The variant's forwards, for the 8B replay.
    trace: DualPathTrace,
    /// Simulated time on the virtual NPU (SM8750 profile).
    pub(crate) vnpu_sim_s: f64,
    drafts: usize,
    accepted: usize,
    pub(crate) cpu_forwards: usize,
    /// Revision forwards on the dense device (inline jobs, final passes): in `forwards` too.
    inline_forwards: usize,
    final_pass_forwards: usize,
    deferred: usize,
    busy_steps: usize,
    dropped_jobs: usize,
    pub(crate) revisions: usize,
    merges: usize,
    lm_head_rows: usize,
    lm_head_window_rows: usize,
    lm_head_rows_cpu_path: usize,
    lm_head_rows_final_passes: usize,
    /// Revisions that turned a wrong token into the target one / a right one into a wrong one /
    /// a wrong one into another wrong one (against the answer's tokens).
    pub(crate) revision_fixed: usize,
    pub(crate) revision_broke: usize,
    pub(crate) revision_neutral: usize,
    /// (commit confidence, token correct) per generated position with a known target.
    calibration: Vec<(f32, bool)>,
    /// Whether each example's answer was right, in example order (for paired comparisons).
    pub(crate) correct: Vec<bool>,
}

/// Paired accuracy difference `b - a` in points over the same examples, with a 95 % normal
/// interval of the mean per-example difference (-1, 0 or +1).
pub(crate) fn paired_points(a: &[bool], b: &[bool]) -> Value {
    let n = a.len().min(b.len());
    if n == 0 {
        return Value::Null;
    }
    let d: Vec<f64> = a.iter().zip(b).map(|(&x, &y)| f64::from(u8::from(y)) - f64::from(u8::from(x))).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
    let half = 1.96 * (var / n as f64).sqrt();
    json!({
        "points": 100.0 * mean,
        "ci95_points": [100.0 * (mean - half), 100.0 * (mean + half)],
        "examples": n,
        "gained": a.iter().zip(b).filter(|(x, y)| !**x && **y).count(),
        "lost": a.iter().zip(b).filter(|(x, y)| **x && !**y).count(),
    })
}

pub(crate) fn run_variant(
    backend: &mut RecordingBackend,
    tok: &TextTokenizer,
    examples: &[TaskExample],
    v: &Variant,
    stop: &[u32],
) -> Result<(EvalResult, Extra)> {
    let mut r = EvalResult::default();
    let mut x = Extra::default();
    let cancel = CancelFlag::new();
    for ex in examples {
        // One example's trace at a time (the backend lives for the whole suite).
        backend.discard_timeline();
        let ids = tok.encode(&ex.prompt)?;
        // Calibration target: the answer's tokens, then any stop token.
        let target = tok.encode(ex.answer.trim())?;
        let p0 = ids.len();
        let right = |pos: usize, t: u32| match target.get(pos - p0) {
            Some(&want) => t == want,
            None => stop.contains(&t),
        };
        let mut vsim = 0.0f64;
        let log = backend.log();
        let _ = log.take_trace("", 0);
        let mut held: Vec<Option<u32>> = vec![None; ids.len() + v.settings.gen_length];
        let (mut fixed, mut broke, mut neutral) = (0usize, 0usize, 0usize);
        let (out, stats): (DecodeOutput, DualPathStats) = {
            let mut sink = |f: &StepFrame| {
                vsim += f.simulated_s.unwrap_or(0.0);
                let n_held = held.len();
                for c in f.changes.iter().filter(|c| !c.speculative && c.pos >= p0 && c.pos < n_held) {
                    if let (true, Some(old)) = (c.revised, held[c.pos]) {
                        match (right(c.pos, old), right(c.pos, c.token)) {
                            (false, true) => fixed += 1,
                            (true, false) => broke += 1,
                            (false, false) if old != c.token => neutral += 1,
                            _ => {}
                        }
                    }
                    held[c.pos] = Some(c.token);
                }
                std::ops::ControlFlow::Continue(())
            };
            if v.npu_loop {
                dual_path::run(backend, &ids, &v.settings, &cancel, &mut sink)?
            } else {
                (generate_dyn(backend, &ids, &v.settings, &cancel, &mut sink)?, DualPathStats::default())
            }
        };
        let answer_ids = trim_at_stop(&out.tokens, stop);
        let text = tok.decode(answer_ids, true);
        let e = r.per_task.entry(ex.task.clone()).or_default();
        e.1 += 1;
        let ok = text.trim() == ex.answer.trim();
        e.0 += usize::from(ok);
        x.correct.push(ok);
        r.forwards += out.forwards;
        r.steps += out.steps;
        r.generated_tokens += answer_ids.len().max(1);
        r.wall_s += out.wall_s;
        x.vnpu_sim_s += vsim;
        x.trace.extend(log.take_trace(&v.name, answer_ids.len()));
        x.drafts += stats.drafts;
        x.accepted += stats.accepted;
        x.cpu_forwards += stats.cpu_forwards;
        x.inline_forwards += stats.inline_forwards;
        x.final_pass_forwards += stats.final_pass_forwards;
        x.lm_head_rows_final_passes += stats.lm_head_rows_final_passes;
        x.deferred += stats.deferred;
        x.busy_steps += stats.busy_steps;
        x.dropped_jobs += stats.dropped_jobs;
        x.revisions += stats.revisions;
        x.merges += stats.merges.len();
        x.lm_head_rows += stats.lm_head_rows;
        x.lm_head_window_rows += stats.lm_head_window_rows;
        x.lm_head_rows_cpu_path += stats.lm_head_rows_cpu_path;
        x.revision_fixed += fixed;
        x.revision_broke += broke;
        x.revision_neutral += neutral;
        for (i, &t) in out.tokens.iter().enumerate() {
            if out.canvas.state(p0 + i) == TokenState::Masked {
                continue;
            }
            x.calibration.push((out.canvas.confidence(p0 + i), right(p0 + i, t)));
        }
        r.outputs.push(out.tokens);
    }
    Ok((r, x))
}

/// Token precision per commit-confidence bin.
fn calibration(points: &[(f32, bool)]) -> Value {
    let edges = [0.0f32, 0.5, 0.7, 0.9, 1.01];
    let bins: Vec<Value> = edges
        .windows(2)
        .map(|w| {
            let inside: Vec<bool> = points.iter().filter(|(c, _)| *c >= w[0] && *c < w[1]).map(|&(_, ok)| ok).collect();
            let correct = inside.iter().filter(|&&ok| ok).count();
            json!({"confidence": format!("[{:.1}, {:.1})", w[0], w[1].min(1.0)), "tokens": inside.len(),
                   "precision": if inside.is_empty() { Value::Null } else { json!(correct as f64 / inside.len() as f64) }})
        })
        .collect();
    Value::Array(bins)
}

/// Examples per task: `$NAME` when set, else `default` (`quick` runs take 2).
fn per_task(name: &str, quick: bool, default: usize) -> usize {
    match std::env::var(name).ok().and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None if quick => 2,
        None => default,
    }
}

/// The prompts the suite tunes and judges on: a tuning split for the search and a disjoint
/// evaluation set of 300 prompts per family.
pub(crate) struct PromptSets {
    /// `unseen` or `in-distribution`.
    pub(crate) name: &'static str,
    /// Repository-relative paths (for the JSON).
    pub(crate) tune: &'static str,
    pub(crate) eval: &'static str,
}

impl PromptSets {
    /// `$UNMASK_ABLATION_PROMPTS`: `unseen` (default: held-out words and paraphrased instructions,
    /// where the model is unsure and speculation and revision have something to do) or
    /// `in-distribution` (the training generators' own words and templates, another seed).
    fn from_env() -> Result<Self> {
        match std::env::var("UNMASK_ABLATION_PROMPTS").as_deref() {
            Err(_) | Ok("unseen") => Ok(UNSEEN_PROMPTS),
            Ok("in-distribution") => Ok(PromptSets {
                name: "in-distribution",
                tune: "models/data/val.jsonl",
                eval: "models/data/eval_large.jsonl",
            }),
            Ok(other) => anyhow::bail!("UNMASK_ABLATION_PROMPTS={other}: expected `unseen` or `in-distribution`"),
        }
    }
}

const UNSEEN_PROMPTS: PromptSets =
    PromptSets { name: "unseen", tune: "models/data/unseen_val.jsonl", eval: "models/data/unseen.jsonl" };

/// A repository-relative path from this crate.
fn repo_path(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The in-distribution evaluation set, for the MoE dLLM: it was trained on the training
/// generators only and answers almost none of the unseen prompts (quality suite), so speculation
/// and revision could not change its accuracy there.
const MOE_EVAL_SET: &str = "models/data/eval_large.jsonl";

/// Canvas of the MoE dLLM's shipped decoding (`models/tiny-llada-moe/generation_config.json`).
const MOE_CANVAS: usize = 16;

/// The searched settings judged on the MoE dLLM (chosen on tiny-llada's tuning split, not
/// searched again here), same virtual NPU and evaluation prompts.
fn moe_section(searched: &crate::ablation_search::Search, base: &DecodeSettings, examples: &[TaskExample]) -> Result<Value> {
    let per_task = examples.first().map_or(0, |f| examples.iter().filter(|e| e.task == f.task).count());
    let TimedModel { tok, stop, template, mut backend, .. } = timed_model("tiny-llada-moe")?;
    // Prompts in the MoE model's own chat template.
    let examples: Vec<TaskExample> =
        examples.iter().map(|e| TaskExample { prompt: e.prompt_for(&template), ..e.clone() }).collect();
    let examples = examples.as_slice();
    // The MoE model was trained on 16-token answers (its generation_config: 16 tokens, one block,
    // 16 steps; on the suite's 32-token canvas it rarely ends its answer): its own canvas, with
    // the searched block length, acceptance and revision.
    let canvas = |s: &DecodeSettings| DecodeSettings {
        gen_length: MOE_CANVAS,
        steps: MOE_CANVAS,
        speculative: s.speculative.clone().map(|sp| SpeculativeSettings { max_lookahead: sp.max_lookahead.min(MOE_CANVAS), ..sp }),
        ..s.clone()
    };
    let prefix = DecodeSettings { cache: CacheMode::Prefix, block_length: MOE_CANVAS, ..canvas(base) };
    let variants = [
        Variant { name: "prefix_cache".into(), settings: prefix, npu_loop: false },
        Variant { name: "searched_control".into(), settings: canvas(&searched.control), npu_loop: false },
        Variant { name: "spec_searched".into(), settings: canvas(&searched.speculative), npu_loop: true },
        Variant { name: "spec_searched_revision".into(), settings: canvas(&searched.spec_revision), npu_loop: true },
    ];
    let mut rows = serde_json::Map::new();
    let mut correct = Vec::new();
    let mut sim = Vec::new();
    for v in &variants {
        eprintln!("[ablation] tiny-llada-moe {} on {} examples", v.name, examples.len());
        let (r, x) = run_variant(&mut backend, &tok, examples, v, &stop)?;
        let mut row = r.to_json();
        row["accuracy_ci95"] = json!(r.accuracy_ci95());
        row["sim_8b_sm8750_s"] = json!(x.vnpu_sim_s);
        row["revisions"] = json!(x.revisions);
        row["revisions_fixed_broke_neutral"] = json!([x.revision_fixed, x.revision_broke, x.revision_neutral]);
        row["cpu_path_forwards"] = json!(x.cpu_forwards);
        rows.insert(v.name.clone(), row);
        sim.push(x.vnpu_sim_s);
        correct.push(x.correct);
    }
    Ok(json!({
        "model": "tiny-llada-moe",
        "timing": "virtual NPU SM8750 timed_as LLaDA-8B (dense shapes: the MoE model's own math, charged as the dense 8B)",
        "examples": examples.len(),
        "examples_per_task": per_task,
        "eval_set": MOE_EVAL_SET,
        "eval_set_note": "in-distribution prompts: the MoE dLLM was trained on the training generators only and answers almost none of the unseen ones",
        "canvas": format!("{MOE_CANVAS} tokens, {MOE_CANVAS} steps (the model's generation_config); prefix_cache in one block, the others with the searched block, speculation and revision"),
        "variants": rows,
        "speculation_loss": paired_points(&correct[2], &correct[1]),
        "revision_recovery": paired_points(&correct[2], &correct[3]),
        "spec_revision_vs_prefix_cache": paired_points(&correct[0], &correct[3]),
        "sim_latency_ratio_spec_revision_vs_prefix_cache": sim[3] / sim[0],
    }))
}

/// `models/NAME` on the virtual SM8750 timed as LLaDA-8B, every forward's shape recorded; with
/// its tokenizer, stop ids, chat template and weights (shared with the host wall-time runs).
struct TimedModel {
    transformer: Arc<Transformer>,
    tok: TextTokenizer,
    stop: Vec<u32>,
    template: ChatTemplate,
    backend: RecordingBackend,
}

fn timed_model(name: &str) -> Result<TimedModel> {
    let m = load_model(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(name))?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let cfg = VnpuConfig { timed_as: Some(ModelPreset::Llada8B.config()), record_trace: false, ..VnpuConfig::default() };
    let transformer = Arc::new(m.transformer);
    let npu = VirtualNpu::new(Arc::clone(&transformer), DeviceProfile::builtin("sm8750")?, cfg)?;
    let backend = RecordingBackend::new(Box::new(npu));
    Ok(TimedModel { transformer, tok: m.tokenizer, stop, template: m.template, backend })
}

pub fn run(quick: bool) -> Result<Value> {
    let per_task_eval = per_task("UNMASK_ABLATION_PER_TASK", quick, 300);
    let per_task_val = per_task("UNMASK_ABLATION_VAL_PER_TASK", quick, 200);
    let TimedModel { transformer, tok, stop, mut backend, .. } = timed_model("tiny-llada")?;
    let base = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let prefix = DecodeSettings { cache: CacheMode::Prefix, ..base.clone() };
    // Settings where the question can be answered, chosen on the tuning split only.
    let prompts = PromptSets::from_env()?;
    let val = tasks::load(&repo_path(prompts.tune), per_task_val)?;
    let searched = crate::ablation_search::search(&mut backend, &tok, &val, &prefix, &stop, prompts.tune)?;
    let examples = tasks::load(&repo_path(prompts.eval), per_task_eval)?;
    let mut all = variants(&base);
    all.push(Variant { name: "searched_control".into(), settings: searched.control.clone(), npu_loop: false });
    all.push(Variant { name: "spec_searched".into(), settings: searched.speculative.clone(), npu_loop: true });
    all.push(Variant { name: "spec_searched_revision".into(), settings: searched.spec_revision.clone(), npu_loop: true });
    let mut results = Vec::new();
    for v in all {
        eprintln!("[ablation] tiny-llada {} on {} examples", v.name, examples.len());
        let (r, x) = run_variant(&mut backend, &tok, &examples, &v, &stop)?;
        let replays = REPLAY_DEVICES
            .iter()
            .map(|d| replay_dual_path_on(&x.trace, ModelPreset::Llada8B, d))
            .collect::<unmask_engine::Result<Vec<_>>>()?;
        results.push((v.name, r, x, replays));
    }
    eprintln!("[ablation] host wall time (CPU backend, dense path on one core, CPU path on the other)");
    // Wall-time ratios need fewer prompts than accuracy: the first ones of each task.
    let wall_examples =
        tasks::load(&repo_path(prompts.eval), per_task("UNMASK_ABLATION_WALL_PER_TASK", quick, 50).min(per_task_eval))?;
    let host_wall = crate::ablation_wall::measure(&transformer, &tok, &wall_examples, &base, &searched.spec_revision, &stop)?;
    let find = |n: &str| {
        results.iter().position(|(name, ..)| name == n).ok_or_else(|| anyhow::anyhow!("ablation: no variant named {n}"))
    };
    let (reference, prefix, spec, both) = (find("reference")?, find("prefix_cache")?, find("speculative")?, find("spec_revision")?);
    let (both_lockstep, aggressive) = (find("spec_revision_lockstep")?, find("spec_aggressive")?);
    let mut rows = serde_json::Map::new();
    // The loop's own simulated clock on the 8B-timed virtual SM8750 is the headline; the replays
    // (index 1 = SM8750) cross-check it.
    let sim8b = |i: usize| results[i].2.vnpu_sim_s;
    let replay8b = |i: usize| results[i].3[1].simulated_latency_s;
    for (name, r, x, replays) in &results {
        let mut v = r.to_json();
        v["sim_8b_replay"] = json!(replays);
        v["sim_8b_sm8750_s"] = json!(x.vnpu_sim_s);
        v["sim_8b_latency_ratio_vs_prefix_cache"] = json!(x.vnpu_sim_s / sim8b(prefix));
        v["sim_8b_replay_lockstep_ratio_vs_prefix_cache"] = json!(replays[1].simulated_latency_s / replay8b(prefix));
        v["cpu_path_jobs_deferred"] = json!(x.deferred);
        v["cpu_path_busy_steps"] = json!(x.busy_steps);
        v["cpu_path_jobs_dropped"] = json!(x.dropped_jobs);
        v["drafts"] = json!(x.drafts);
        v["accepted_drafts"] = json!(x.accepted);
        v["cpu_path_forwards"] = json!(x.cpu_forwards);
        v["inline_revision_forwards"] = json!(x.inline_forwards);
        v["final_pass_forwards"] = json!(x.final_pass_forwards);
        v["revisions"] = json!(x.revisions);
        v["kv_merges"] = json!(x.merges);
        // The NPU-aware loop counts LM-head rows (the reference loop does not report them).
        if x.lm_head_window_rows > 0 {
            v["lm_head_rows"] = json!(x.lm_head_rows);
            v["lm_head_rows_cpu_path"] = json!(x.lm_head_rows_cpu_path);
            v["lm_head_rows_final_passes"] = json!(x.lm_head_rows_final_passes);
            v["lm_head_rows_saved"] = json!(x.lm_head_window_rows.saturating_sub(x.lm_head_rows));
        }
        v["revisions_fixed_broke_neutral"] = json!([x.revision_fixed, x.revision_broke, x.revision_neutral]);
        v["token_agreement_vs_reference"] = json!(token_agreement(&results[reference].1, r));
        rows.insert(name.clone(), v);
    }
    let acc = |i: usize| results[i].1.accuracy();
    let ci = |i: usize| results[i].1.accuracy_ci95();
    let fixed_broke = |i: usize| (results[i].2.revision_fixed, results[i].2.revision_broke);
    let (control, s_spec, s_both) = (find("searched_control")?, find("spec_searched")?, find("spec_searched_revision")?);
    let fw_ratio = |i: usize| results[i].1.forwards as f64 / results[prefix].1.forwards.max(1) as f64;
    let correct = |i: usize| &results[i].2.correct;
    let spec_loss = paired_points(correct(s_spec), correct(control));
    let recovery = paired_points(correct(s_spec), correct(s_both));
    let gap_to_reference = paired_points(correct(reference), correct(s_both));
    let points = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    // The question, answered on the evaluation set with the settings the search chose.
    let goal_met = points(&spec_loss, "points") >= 2.0
        && points(&gap_to_reference, "points").abs() <= 0.5
        && fw_ratio(s_both) <= 0.8
        && sim8b(s_both) / sim8b(prefix) <= 0.85;
    eprintln!("[ablation] the searched settings on tiny-llada-moe");
    let moe_examples =
        tasks::load(&repo_path(MOE_EVAL_SET), per_task("UNMASK_ABLATION_MOE_PER_TASK", quick, 100).min(per_task_eval))?;
    let moe = moe_section(&searched, &base, &moe_examples)?;
    let buckets = backend.cost_profile().map(|c| c.token_buckets);
    Ok(json!({
        "headline": {
            "accuracy_reference": acc(reference),
            "accuracy_reference_ci95": ci(reference),
            "accuracy_prefix_cache": acc(prefix),
            "accuracy_searched_control": acc(control),
            "accuracy_speculative": acc(s_spec),
            "accuracy_speculative_ci95": ci(s_spec),
            "accuracy_spec_revision": acc(s_both),
            "accuracy_spec_revision_ci95": ci(s_both),
            "speculation_loss_points": spec_loss["points"],
            "speculation_loss_points_ci95": spec_loss["ci95_points"],
            "revision_recovery_points": recovery["points"],
            "revision_recovery_points_ci95": recovery["ci95_points"],
            "revisions": results[s_both].2.revisions,
            "revisions_fixed": fixed_broke(s_both).0,
            "revisions_harmed": fixed_broke(s_both).1,
            "forwards_ratio": fw_ratio(s_both),
            "sim_latency_ratio": sim8b(s_both) / sim8b(prefix),
            "goal_met": goal_met,
            "spec_revision_schedule": searched.spec_revision.revision.as_ref().map(|r| r.schedule),
            "final_pass_forwards": results[s_both].2.final_pass_forwards,
            "inline_forwards": results[s_both].2.inline_forwards,
            "host_wall_ratio_spec_revision": host_wall["host_wall_ratio_spec_searched_revision"],
            "host_wall_ratio_spec_revision_default": host_wall["host_wall_ratio_spec_revision"],
            "host_wall_ratio_spec_revision_lockstep": host_wall["host_wall_ratio_spec_revision_lockstep"],
            "moe_speculation_loss_points": moe["speculation_loss"]["points"],
            "moe_revision_recovery_points": moe["revision_recovery"]["points"],
            "accuracy_speculative_default": acc(spec),
            "accuracy_spec_revision_default": acc(both),
            "forwards_ratio_default": fw_ratio(both),
            "sim_latency_ratio_default": sim8b(both) / sim8b(prefix),
            "sim_latency_ratio_speculative_default": sim8b(spec) / sim8b(prefix),
            "sim_latency_ratio_lockstep_cpu_path": sim8b(both_lockstep) / sim8b(prefix),
            "accuracy_spec_aggressive": acc(aggressive),
        },
        "paired": {
            "note": "paired over the same evaluation prompts: points = 100 x mean per-prompt difference (second minus first), 95 % normal interval",
            "spec_searched_vs_searched_control": paired_points(correct(control), correct(s_spec)),
            "spec_searched_revision_vs_spec_searched": recovery,
            "spec_searched_revision_vs_reference": gap_to_reference,
            "spec_searched_vs_reference": paired_points(correct(reference), correct(s_spec)),
            "speculative_vs_prefix_cache": paired_points(correct(prefix), correct(spec)),
            "spec_revision_vs_speculative": paired_points(correct(spec), correct(both)),
        },
        "moe": moe,
        "host_wall": host_wall,
        "settings": base,
        "speculative": SpeculativeSettings::default(),
        "token_buckets": buckets,
        "revision": RevisionSettings::default(),
        "examples_per_task": per_task_eval,
        "prompts": prompts.name,
        "eval_set": prompts.eval,
        "tune_set": prompts.tune,
        "search": searched.json,
        "variants": rows,
        "confidence_calibration_prefix_cache": calibration(&results[prefix].2.calibration),
        "replay": {
            "simulated": true, "model": "LLaDA-8B shapes", "devices": REPLAY_DEVICES,
            "note": "each variant's recorded forwards replayed: dense path on the NPU (swap-optimized memory runtime), CPU-path forwards on the profile's CPU cores but one; simulated_latency_s = a step lasts max(dense, CPU path) (lockstep); async_latency_s = jobs only when the CPU path is idle, the rest dropped (what the loop's async schedule does, here re-timed on each device); the commit schedule is the tiny model's",
        },
        "timing": "virtual NPU SM8750 timed_as LLaDA-8B: tiny-llada's math on this CPU, every dense and CPU-path forward charged at LLaDA-8B layer shapes; the loop's async CPU-path schedule runs on that clock",
        "note": "SIMULATED latencies except host_wall (measured on this machine, CPU backend: host_wall_ratio_* = wall time of speculative + revision with the threaded / lockstep CPU path ÷ prefix-cache decoding, dense path on one core, CPU path on the other, same prompts interleaved). forwards_ratio and sim_latency_ratio (the loop's own simulated clock, virtual SM8750 timed at LLaDA-8B shapes) are spec_revision ÷ prefix_cache; sim_latency_ratio_lockstep_cpu_path is the same run with the CPU path in lockstep",
    }))
}
