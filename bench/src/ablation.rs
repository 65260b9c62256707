//! Suite `ablation` (issue 6): NPU-aware decoding on the embedded model's held-out tasks —
//! reference, + prefix cache, + sliding bucket window, + speculative (MBSD), + revision,
//! + both — accuracy, forwards, tokens per forward, CPU wall time and a simulated NPU latency;
//! plus the confidence calibration that justifies the revision thresholds.
//!
//! Runs on the virtual NPU (SM8750 profile; real math on the CPU, its shape buckets drive the
//! speculative window): `vnpu_sim_*` figures are the virtual NPU's **simulated** time for this
//! (tiny) model. `sim_*` figures come from a bucket cost model for an 8B model, **an estimate,
//! not a measurement**: a forward costs `FIXED_PER_FORWARD_S + padded_tokens × PER_TOKEN_S`,
//! with the window padded to the next of `BUCKETS`. The constants stand for an 8B dLLM on a
//! ~45 TOPS phone NPU (fixed part: launch plus weight streaming, which dominates small windows;
//! per-token part: compute). The CPU path of revision is assumed to overlap the NPU fully and
//! costs nothing in the simulation (its forwards are reported separately). Swap in the virtual
//! NPU's `simulated_s` once it is merged.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::vnpu::{profile::DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::decode::dual_path::{self, DualPathStats};
use unmask_engine::decode::revision::RevisionSettings;
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{generate_dyn, trim_at_stop, CacheMode, CancelFlag, DecodeOutput, DecodeSettings, StepFrame, TokenState};
use unmask_engine::model::{load_model, TextTokenizer};

use crate::tasks::{self, token_agreement, EvalResult, TaskExample};

/// Token buckets of the simulated NPU (estimate).
const BUCKETS: &[usize] = &[16, 32, 64, 128, 256];
/// Fixed cost per forward: launch + weight streaming, seconds (estimate).
const FIXED_PER_FORWARD_S: f64 = 0.030;
/// Cost per padded token, seconds (estimate).
const PER_TOKEN_S: f64 = 0.0012;

fn padded(n: usize) -> usize {
    BUCKETS.iter().copied().find(|&b| b >= n).unwrap_or(n)
}

fn sim_cost(tokens: usize) -> f64 {
    FIXED_PER_FORWARD_S + padded(tokens) as f64 * PER_TOKEN_S
}

/// One configuration; `npu_loop` forces the NPU-aware loop even with both features off.
struct Variant {
    name: &'static str,
    settings: DecodeSettings,
    npu_loop: bool,
}

fn variants(base: &DecodeSettings) -> Vec<Variant> {
    let prefix = DecodeSettings { cache: CacheMode::Prefix, ..base.clone() };
    let spec = Some(SpeculativeSettings { token_buckets: BUCKETS.to_vec(), ..Default::default() });
    let rev = Some(RevisionSettings::default());
    let v = |name, settings, npu_loop| Variant { name, settings, npu_loop };
    vec![
        v("reference", base.clone(), false),
        v("prefix_cache", prefix.clone(), false),
        v("sliding_window", DecodeSettings { speculative: None, ..prefix.clone() }, true),
        v("speculative", DecodeSettings { speculative: spec.clone(), ..prefix.clone() }, true),
        v("revision", DecodeSettings { revision: rev.clone(), ..prefix.clone() }, true),
        v("spec_revision", DecodeSettings { speculative: spec, revision: rev, ..prefix.clone() }, true),
        // Small sweep behind the revision defaults (margin 0.2, visible 0.7).
        v("revision_margin_0.05", DecodeSettings { revision: Some(RevisionSettings { revise_margin: 0.05, ..Default::default() }), ..prefix.clone() }, true),
        v("revision_margin_0.4", DecodeSettings { revision: Some(RevisionSettings { revise_margin: 0.4, ..Default::default() }), ..prefix.clone() }, true),
        v("revision_visible_0.5", DecodeSettings { revision: Some(RevisionSettings { visible_threshold: 0.5, ..Default::default() }), ..prefix }, true),
    ]
}

/// Totals of one variant beyond the shared `EvalResult`.
#[derive(Default)]
struct Extra {
    sim_s: f64,
    /// Simulated time on the virtual NPU (SM8750 profile).
    vnpu_sim_s: f64,
    padded_tokens: usize,
    drafts: usize,
    accepted: usize,
    cpu_forwards: usize,
    revisions: usize,
    merges: usize,
    /// Revisions that turned a wrong token into the target one / a right one into a wrong one /
    /// a wrong one into another wrong one (against the answer's tokens).
    revision_fixed: usize,
    revision_broke: usize,
    revision_neutral: usize,
    /// (commit confidence, token correct) per generated position with a known target.
    calibration: Vec<(f32, bool)>,
}

fn run_variant(
    backend: &mut dyn Backend,
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
        let (mut sim, mut pad, mut vsim) = (0.0, 0usize, 0.0f64);
        let mut held: Vec<Option<u32>> = vec![None; ids.len() + v.settings.gen_length];
        let (mut fixed, mut broke, mut neutral) = (0usize, 0usize, 0usize);
        let (out, stats): (DecodeOutput, DualPathStats) = {
            let mut sink = |f: &StepFrame| {
                sim += sim_cost(f.forward_tokens);
                vsim += f.simulated_s.unwrap_or(0.0);
                pad += padded(f.forward_tokens);
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
        x.sim_s += sim;
        x.vnpu_sim_s += vsim;
        x.padded_tokens += pad;
        x.drafts += stats.drafts;
        x.accepted += stats.accepted;
        x.cpu_forwards += stats.cpu_forwards;
        x.revisions += stats.revisions;
        x.merges += stats.merges.len();
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
    let per_task = if quick { 3 } else { 10 };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada");
    let m = load_model(&dir)?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let tok = m.tokenizer;
    let mut backend = VirtualNpu::new(Arc::new(m.transformer), DeviceProfile::builtin("sm8750")?, VnpuConfig::default())?;
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    let base = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let mut results = Vec::new();
    for v in variants(&base) {
        eprintln!("[ablation] tiny-llada {} on {} examples", v.name, examples.len());
        let (r, x) = run_variant(&mut backend as &mut dyn Backend, &tok, &examples, &v, &stop)?;
        results.push((v.name, r, x));
    }
    let find = |n: &str| results.iter().position(|(name, _, _)| *name == n).unwrap_or(0);
    let (reference, prefix, spec, rev, both) = (find("reference"), find("prefix_cache"), find("speculative"), find("revision"), find("spec_revision"));
    let mut rows = serde_json::Map::new();
    for (name, r, x) in &results {
        let mut v = r.to_json();
        v["sim_npu_s"] = json!(x.sim_s);
        v["vnpu_sm8750_simulated_s"] = json!(x.vnpu_sim_s);
        v["vnpu_latency_ratio_vs_prefix_cache"] = json!(x.vnpu_sim_s / results[prefix].2.vnpu_sim_s);
        v["sim_latency_ratio_vs_prefix_cache"] = json!(x.sim_s / results[prefix].2.sim_s);
        v["padded_tokens"] = json!(x.padded_tokens);
        v["drafts"] = json!(x.drafts);
        v["accepted_drafts"] = json!(x.accepted);
        v["cpu_path_forwards"] = json!(x.cpu_forwards);
        v["revisions"] = json!(x.revisions);
        v["kv_merges"] = json!(x.merges);
        v["revisions_fixed_broke_neutral"] = json!([x.revision_fixed, x.revision_broke, x.revision_neutral]);
        v["token_agreement_vs_reference"] = json!(token_agreement(&results[reference].1, r));
        rows.insert((*name).to_owned(), v);
    }
    let acc = |i: usize| results[i].1.accuracy();
    Ok(json!({
        "headline": {
            "accuracy_reference": acc(reference),
            "accuracy_prefix_cache": acc(prefix),
            "accuracy_speculative": acc(spec),
            "accuracy_revision": acc(rev),
            "accuracy_spec_revision": acc(both),
            "forwards_ratio": results[both].1.forwards as f64 / results[prefix].1.forwards.max(1) as f64,
            "sim_latency_ratio": results[both].2.sim_s / results[prefix].2.sim_s,
            "vnpu_sim_latency_ratio": results[both].2.vnpu_sim_s / results[prefix].2.vnpu_sim_s,
        },
        "settings": base,
        "speculative": SpeculativeSettings { token_buckets: BUCKETS.to_vec(), ..Default::default() },
        "revision": RevisionSettings::default(),
        "examples_per_task": per_task,
        "variants": rows,
        "confidence_calibration_prefix_cache": calibration(&results[prefix].2.calibration),
        "sim_cost_model": {
            "estimate": true,
            "buckets": BUCKETS, "fixed_per_forward_s": FIXED_PER_FORWARD_S, "per_padded_token_s": PER_TOKEN_S,
            "note": "per forward = fixed + padded_tokens × per_token; CPU-path forwards assumed overlapped (not counted)",
        },
        "note": "tiny-llada was mid-training when measured; forwards_ratio and sim_latency_ratio are spec_revision ÷ prefix_cache",
    }))
}
