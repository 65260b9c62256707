//! The `ablation` suite's measured part: dual-path revision in **real wall time on this machine**,
//! with the dense path on one core (its kernels in a one-thread pool) and the CPU path on the
//! other (the `threaded` schedule's worker, one kernel thread of its own). Per prompt the variants
//! run back to back (interleaved), on the CPU backend; nothing here is simulated.
//!
//! Variants: prefix-cache decoding (the baseline, dense path alone), speculative + revision with
//! the threaded CPU path (the dense path never waits; the last job drained), and the same with the
//! CPU path in lockstep (every step waits for its job), and the settings the ablation's search
//! chose with the threaded CPU path (or inline on the dense path's core, if the search chose the
//! inline schedule).

use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::dual_path;
use unmask_engine::decode::revision::{CpuPathEnd, CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{generate_dyn, trim_at_stop, CacheMode, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{TextTokenizer, Transformer};

use crate::tasks::TaskExample;

struct WallVariant {
    name: &'static str,
    settings: DecodeSettings,
}

fn wall_variants(base: &DecodeSettings, searched: &DecodeSettings) -> Vec<WallVariant> {
    let prefix = DecodeSettings { cache: CacheMode::Prefix, ..base.clone() };
    let rev = |schedule| RevisionSettings { schedule, at_end: CpuPathEnd::Drain, ..Default::default() };
    let spec = Some(SpeculativeSettings::default());
    vec![
        WallVariant { name: "prefix_cache", settings: prefix.clone() },
        WallVariant {
            name: "spec_revision_threaded",
            settings: DecodeSettings {
                speculative: spec.clone(),
                revision: Some(rev(CpuPathSchedule::Threaded)),
                ..prefix.clone()
            },
        },
        WallVariant {
            name: "spec_revision_lockstep",
            settings: DecodeSettings { speculative: spec, revision: Some(rev(CpuPathSchedule::Lockstep)), ..prefix },
        },
        // The ablation's searched point, its CPU path on the other core (the inline schedule has
        // none: its re-checks run on the dense path's core, as chosen).
        WallVariant {
            name: "spec_searched_revision_threaded",
            settings: DecodeSettings {
                revision: searched.revision.clone().map(|r| match r.schedule {
                    CpuPathSchedule::Inline => r,
                    _ => RevisionSettings { schedule: CpuPathSchedule::Threaded, ..r },
                }),
                ..searched.clone()
            },
        },
    ]
}

#[derive(Default)]
struct WallTotals {
    wall_s: f64,
    correct: usize,
    runs: usize,
    forwards: usize,
    cpu_forwards: usize,
    revisions: usize,
    busy_steps: usize,
    deferred: usize,
    drained: usize,
    threaded_runs: usize,
}

/// Runs the measured variants on `examples`; the JSON object of the suite's `host_wall` section.
pub fn measure(
    model: &Arc<Transformer>,
    tok: &TextTokenizer,
    examples: &[TaskExample],
    base: &DecodeSettings,
    searched: &DecodeSettings,
    stop: &[u32],
) -> Result<Value> {
    let variants = wall_variants(base, searched);
    let mut totals: Vec<WallTotals> = variants.iter().map(|_| WallTotals::default()).collect();
    // The dense path's kernels run on one core; the threaded CPU path builds its own one-thread pool.
    let dense_pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let cancel = CancelFlag::new();
    for ex in examples {
        let ids = tok.encode(&ex.prompt)?;
        for (v, t) in variants.iter().zip(totals.iter_mut()) {
            let mut backend = CpuBackend::new(Arc::clone(model));
            let mut sink = |_: &StepFrame| std::ops::ControlFlow::Continue(());
            let (out, stats) = dense_pool.install(|| -> Result<_> {
                Ok(if v.settings.revision.is_some() {
                    dual_path::run(&mut backend, &ids, &v.settings, &cancel, &mut sink)?
                } else {
                    (generate_dyn(&mut backend, &ids, &v.settings, &cancel, &mut sink)?, Default::default())
                })
            })?;
            let text = tok.decode(trim_at_stop(&out.tokens, stop), true);
            t.wall_s += out.wall_s;
            t.correct += usize::from(text.trim() == ex.answer.trim());
            t.runs += 1;
            t.forwards += out.forwards;
            t.cpu_forwards += stats.cpu_forwards;
            t.revisions += stats.revisions;
            t.busy_steps += stats.busy_steps;
            t.deferred += stats.deferred;
            t.drained += stats.drained_jobs;
            t.threaded_runs += usize::from(stats.threaded);
        }
    }
    let baseline = totals[0].wall_s;
    let mut rows = serde_json::Map::new();
    for (v, t) in variants.iter().zip(&totals) {
        rows.insert(
            v.name.to_owned(),
            json!({
                "wall_s": t.wall_s,
                "wall_ratio_vs_prefix_cache": t.wall_s / baseline,
                "accuracy": t.correct as f64 / t.runs.max(1) as f64,
                "runs": t.runs,
                "dense_forwards": t.forwards,
                "cpu_path_forwards": t.cpu_forwards,
                "revisions": t.revisions,
                "cpu_path_busy_steps": t.busy_steps,
                "cpu_path_jobs_deferred": t.deferred,
                "cpu_path_jobs_drained": t.drained,
                "threaded_runs": t.threaded_runs,
            }),
        );
    }
    Ok(json!({
        "measured": true,
        "backend": "cpu",
        "threads": "dense path 1 (its own one-thread pool), CPU path 1 (the threaded schedule's worker)",
        "examples": examples.len(),
        "variants": rows,
        "host_wall_ratio_spec_revision": totals[1].wall_s / baseline,
        "host_wall_ratio_spec_revision_lockstep": totals[2].wall_s / baseline,
        "host_wall_ratio_spec_searched_revision": totals[3].wall_s / baseline,
    }))
}
