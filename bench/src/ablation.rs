//! Suite `ablation`: NPU-aware decoding on the embedded model's held-out tasks —
//! reference, + prefix cache, + sliding bucket window, + speculative (MBSD), + revision,
//! + both — accuracy, forwards, tokens per forward, CPU wall time and a simulated NPU latency;
//! plus the confidence calibration that justifies the revision thresholds.
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
use unmask_engine::model::{load_model, TextTokenizer};

use crate::tasks::{self, token_agreement, EvalResult, TaskExample};

/// Profiles the recorded runs are replayed on at LLaDA-8B shapes.
const REPLAY_DEVICES: &[&str] = &["sm8650", "sm8750", "sm8850"];

/// One configuration; `npu_loop` forces the NPU-aware loop even with both features off.
struct Variant {
    name: &'static str,
    settings: DecodeSettings,
    npu_loop: bool,
}

fn variants(base: &DecodeSettings) -> Vec<Variant> {
    let prefix = DecodeSettings { cache: CacheMode::Prefix, ..base.clone() };
    // The window's buckets come from the backend's cost profile.
    let spec = Some(SpeculativeSettings::default());
    let rev = Some(RevisionSettings::default());
    let aggressive = Some(SpeculativeSettings { trigger: base.block_length, max_lookahead: 24, accept_confidence: Some(0.5), ..Default::default() });
    // Revision that re-checks more and revises sooner.
    let eager = RevisionSettings { visible_threshold: 0.9, stable_threshold: 0.95, revise_margin: 0.05, max_checks: 8, ..Default::default() };
    let v = |name, settings, npu_loop| Variant { name, settings, npu_loop };
    vec![
        v("reference", base.clone(), false),
        v("prefix_cache", prefix.clone(), false),
        v("sliding_window", DecodeSettings { speculative: None, ..prefix.clone() }, true),
        v("speculative", DecodeSettings { speculative: spec.clone(), ..prefix.clone() }, true),
        v("revision", DecodeSettings { revision: rev.clone(), ..prefix.clone() }, true),
        v("spec_revision", DecodeSettings { speculative: spec.clone(), revision: rev, ..prefix.clone() }, true),
        // The same with the CPU path in lockstep (every step waits for its job).
        v("spec_revision_lockstep", DecodeSettings { speculative: spec, revision: Some(RevisionSettings { schedule: CpuPathSchedule::Lockstep, ..Default::default() }), ..prefix.clone() }, true),
        // Aggressive speculation: look ahead on every step, accept drafts by their own confidence
        // (not by the fresh forward's agreement); the setting where revision has something to fix.
        v("spec_aggressive", DecodeSettings { speculative: aggressive.clone(), ..prefix.clone() }, true),
        v("spec_aggressive_revision", DecodeSettings { speculative: aggressive.clone(), revision: Some(RevisionSettings::default()), ..prefix.clone() }, true),
        v("spec_aggressive_revision_eager", DecodeSettings { speculative: aggressive, revision: Some(eager), ..prefix.clone() }, true),
        // Small sweep behind the revision defaults (margin 0.2, visible 0.7).
        v("revision_margin_0.05", DecodeSettings { revision: Some(RevisionSettings { revise_margin: 0.05, ..Default::default() }), ..prefix.clone() }, true),
        v("revision_margin_0.4", DecodeSettings { revision: Some(RevisionSettings { revise_margin: 0.4, ..Default::default() }), ..prefix.clone() }, true),
        v("revision_visible_0.5", DecodeSettings { revision: Some(RevisionSettings { visible_threshold: 0.5, ..Default::default() }), ..prefix }, true),
    ]
}

/// Totals of one variant beyond the shared `EvalResult`.
#[derive(Default)]
struct Extra {
    /// The variant's forwards, for the 8B replay.
    trace: DualPathTrace,
    /// Simulated time on the virtual NPU (SM8750 profile).
    vnpu_sim_s: f64,
    drafts: usize,
    accepted: usize,
    cpu_forwards: usize,
    deferred: usize,
    busy_steps: usize,
    dropped_jobs: usize,
    revisions: usize,
    merges: usize,
    lm_head_rows: usize,
    lm_head_window_rows: usize,
    lm_head_rows_cpu_path: usize,
    /// Revisions that turned a wrong token into the target one / a right one into a wrong one /
    /// a wrong one into another wrong one (against the answer's tokens).
    revision_fixed: usize,
    revision_broke: usize,
    revision_neutral: usize,
    /// (commit confidence, token correct) per generated position with a known target.
    calibration: Vec<(f32, bool)>,
}

fn run_variant(
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
        e.0 += usize::from(text.trim() == ex.answer.trim());
        r.forwards += out.forwards;
        r.steps += out.steps;
        r.generated_tokens += answer_ids.len().max(1);
        r.wall_s += out.wall_s;
        x.vnpu_sim_s += vsim;
        x.trace.extend(log.take_trace(v.name, answer_ids.len()));
        x.drafts += stats.drafts;
        x.accepted += stats.accepted;
        x.cpu_forwards += stats.cpu_forwards;
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

pub fn run(quick: bool) -> Result<Value> {
    let per_task = if quick { 2 } else { 10 };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada");
    let m = load_model(&dir)?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let tok = m.tokenizer;
    let cfg = VnpuConfig { timed_as: Some(ModelPreset::Llada8B.config()), ..VnpuConfig::default() };
    let transformer = Arc::new(m.transformer);
    let npu = VirtualNpu::new(Arc::clone(&transformer), DeviceProfile::builtin("sm8750")?, cfg)?;
    let mut backend = RecordingBackend::new(Box::new(npu));
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    let base = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let mut results = Vec::new();
    for v in variants(&base) {
        eprintln!("[ablation] tiny-llada {} on {} examples", v.name, examples.len());
        let (r, x) = run_variant(&mut backend, &tok, &examples, &v, &stop)?;
        let replays = REPLAY_DEVICES
            .iter()
            .map(|d| replay_dual_path_on(&x.trace, ModelPreset::Llada8B, d))
            .collect::<unmask_engine::Result<Vec<_>>>()?;
        results.push((v.name, r, x, replays));
    }
    eprintln!("[ablation] host wall time (CPU backend, dense path on one core, CPU path on the other)");
    let host_wall = crate::ablation_wall::measure(&transformer, &tok, &examples, &base, &stop)?;
    let find = |n: &str| results.iter().position(|(name, ..)| *name == n).unwrap_or(0);
    let (reference, prefix, spec, rev, both) = (find("reference"), find("prefix_cache"), find("speculative"), find("revision"), find("spec_revision"));
    let both_lockstep = find("spec_revision_lockstep");
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
        v["revisions"] = json!(x.revisions);
        v["kv_merges"] = json!(x.merges);
        // The NPU-aware loop counts LM-head rows (the reference loop does not report them).
        if x.lm_head_window_rows > 0 {
            v["lm_head_rows"] = json!(x.lm_head_rows);
            v["lm_head_rows_cpu_path"] = json!(x.lm_head_rows_cpu_path);
            v["lm_head_rows_saved"] = json!(x.lm_head_window_rows.saturating_sub(x.lm_head_rows));
        }
        v["revisions_fixed_broke_neutral"] = json!([x.revision_fixed, x.revision_broke, x.revision_neutral]);
        v["token_agreement_vs_reference"] = json!(token_agreement(&results[reference].1, r));
        rows.insert((*name).to_owned(), v);
    }
    let acc = |i: usize| results[i].1.accuracy();
    let ci = |i: usize| results[i].1.accuracy_ci95();
    let fixed_broke = |i: usize| (results[i].2.revision_fixed, results[i].2.revision_broke);
    let buckets = backend.cost_profile().map(|c| c.token_buckets);
    Ok(json!({
        "headline": {
            "accuracy_reference": acc(reference),
            "accuracy_prefix_cache": acc(prefix),
            "accuracy_speculative": acc(spec),
            "accuracy_revision": acc(rev),
            "accuracy_spec_revision": acc(both),
            "forwards_ratio": results[both].1.forwards as f64 / results[prefix].1.forwards.max(1) as f64,
            "sim_latency_ratio": sim8b(both) / sim8b(prefix),
            "sim_latency_ratio_speculative": sim8b(spec) / sim8b(prefix),
            "sim_latency_ratio_lockstep_cpu_path": sim8b(both_lockstep) / sim8b(prefix),
            "accuracy_spec_revision_lockstep": acc(both_lockstep),
            "accuracy_reference_ci95": ci(reference),
            "accuracy_speculative_ci95": ci(spec),
            "accuracy_spec_revision_ci95": ci(both),
            "accuracy_spec_aggressive": acc(find("spec_aggressive")),
            "accuracy_spec_aggressive_ci95": ci(find("spec_aggressive")),
            "accuracy_spec_aggressive_revision": acc(find("spec_aggressive_revision")),
            "accuracy_spec_aggressive_revision_eager": acc(find("spec_aggressive_revision_eager")),
            "revisions_fixed": fixed_broke(find("spec_aggressive_revision_eager")).0,
            "revisions_harmed": fixed_broke(find("spec_aggressive_revision_eager")).1,
            "forwards_ratio_spec_aggressive_revision_eager": results[find("spec_aggressive_revision_eager")].1.forwards as f64 / results[prefix].1.forwards.max(1) as f64,
            "host_wall_ratio_spec_revision": host_wall["host_wall_ratio_spec_revision"],
            "host_wall_ratio_spec_revision_lockstep": host_wall["host_wall_ratio_spec_revision_lockstep"],
        },
        "host_wall": host_wall,
        "settings": base,
        "speculative": SpeculativeSettings::default(),
        "token_buckets": buckets,
        "revision": RevisionSettings::default(),
        "examples_per_task": per_task,
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
