//! The `ablation` suite's search for a setting where the revision question can be answered: does
//! speculative decoding lose accuracy when its drafts are used aggressively, and does progressive
//! revision win it back?
//!
//! Everything here is chosen on the suite's **tuning split** (the evaluation set's generator,
//! other prompts); the suite then judges the chosen settings on the separate evaluation set.
//! Two grids, each point a full run on the same virtual NPU as the suite's variants:
//! 1. speculation, on four schedules (the suite's block of 8 and blocks of 4, each with the fixed
//!    schedule or threshold decoding at τ 0.7): look-ahead trigger (half the block left, or every
//!    step), acceptance (the fresh forward's top-2, or a draft's own confidence ≥ 0.5 / ≥ 0),
//!    look-ahead 32 (the whole canvas). Each schedule also runs without speculation (its control),
//!    so a loss is speculation's own. The point that loses most accuracy against its control while
//!    using at most 0.8x the forwards of fixed-schedule prefix-cache decoding is kept (ties: fewer
//!    forwards);
//! 2. revision on that point: the asynchronous CPU path (its last job dropped or drained) and the
//!    lockstep one (every step's job runs) at visible threshold 0.9 and margin 0.2, settling a
//!    block when it completes or keeping a look-back of 32 positions revisable (re-checked with
//!    the later blocks as context); the inline schedule (no CPU path: the dense device re-checks
//!    after each forward) over visible threshold x revise margin with both look-backs, and with
//!    the look-back also two final passes (dense re-checks of the whole answer at the end), the
//!    re-checked positions of one forward neighbours or never neighbours (isolated), and four
//!    isolated final passes. Highest accuracy within 0.85x the simulated latency of prefix-cache
//!    decoding is kept (the goal's budget; ties: fewer CPU-path forwards; if no point fits,
//!    highest accuracy).
//!
//! The speculation grid ranks losses of several points and runs on the first
//! [`SPEC_GRID_PER_TASK`] prompts per family of the tuning split; the revision grid has to tell
//! apart settings half a point apart, so it (with its control, its speculation point and
//! prefix-cache decoding rerun) runs on the whole split.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::recorder::RecordingBackend;
use unmask_engine::decode::revision::{CpuPathEnd, CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::TextTokenizer;

use crate::ablation::{run_variant, Variant};
use crate::tasks::TaskExample;

/// Forwards budget of the speculative point, as a fraction of prefix-cache decoding's.
const MAX_FORWARDS_RATIO: f64 = 0.8;

/// Simulated latency budget of the revision point, as a fraction of prefix-cache decoding's (the
/// issue's goal).
const MAX_SIM_LATENCY_RATIO: f64 = 0.85;

/// The revision grid's look-back: all of the suite's 32-token canvas stays revisable behind the
/// current block, so a token is re-checked once the blocks after it have committed.
const LOOKBACK: usize = 32;

/// Prompts per family of the tuning split the speculation grid runs on.
const SPEC_GRID_PER_TASK: usize = 50;

/// What the search chose, and the grid behind it.
pub struct Search {
    /// The chosen point's schedule without speculation (what its loss is measured against).
    pub control: DecodeSettings,
    /// Speculative decoding at the chosen point (prefix cache, speculation, maybe a threshold).
    pub speculative: DecodeSettings,
    /// The same with the chosen revision settings.
    pub spec_revision: DecodeSettings,
    /// The section of the suite's JSON.
    pub json: Value,
}

/// One grid point's outcome on the tuning split.
#[derive(Clone)]
struct Point {
    name: String,
    settings: DecodeSettings,
    accuracy: f64,
    correct: usize,
    total: usize,
    forwards: usize,
    sim_s: f64,
    cpu_forwards: usize,
    revisions: usize,
    fixed_broke_neutral: [usize; 3],
    /// Accuracy per task family.
    tasks: BTreeMap<String, f64>,
}

impl Point {
    fn to_json(&self, prefix: &Point) -> Value {
        json!({
            "name": self.name,
            "accuracy": self.accuracy,
            "correct": self.correct,
            "examples": self.total,
            "accuracy_change_vs_prefix_cache_points": 100.0 * (self.accuracy - prefix.accuracy),
            "forwards": self.forwards,
            "forwards_ratio_vs_prefix_cache": self.forwards as f64 / prefix.forwards.max(1) as f64,
            "sim_8b_latency_ratio_vs_prefix_cache": self.sim_s / prefix.sim_s,
            "cpu_path_forwards": self.cpu_forwards,
            "revisions": self.revisions,
            "revisions_fixed_broke_neutral": self.fixed_broke_neutral,
            "tasks": self.tasks,
            "speculative": self.settings.speculative,
            "threshold": self.settings.threshold,
            "revision": self.settings.revision,
        })
    }
}

fn run_point(
    backend: &mut RecordingBackend,
    tok: &TextTokenizer,
    examples: &[TaskExample],
    name: String,
    settings: DecodeSettings,
    npu_loop: bool,
    stop: &[u32],
) -> Result<Point> {
    let v = Variant { name, settings, npu_loop };
    eprintln!("[ablation] search: {} on {} tuning examples", v.name, examples.len());
    let (r, x) = run_variant(backend, tok, examples, &v, stop)?;
    let (correct, total) = r.correct();
    Ok(Point {
        name: v.name,
        settings: v.settings,
        accuracy: r.accuracy(),
        correct,
        total,
        forwards: r.forwards,
        sim_s: x.vnpu_sim_s,
        cpu_forwards: x.cpu_forwards,
        revisions: x.revisions,
        fixed_broke_neutral: [x.revision_fixed, x.revision_broke, x.revision_neutral],
        tasks: r.per_task.iter().map(|(t, &(c, n))| (t.clone(), c as f64 / n.max(1) as f64)).collect(),
    })
}

/// The decoding schedule a speculation point runs on: block length and threshold decoding.
#[derive(Clone, Copy, PartialEq)]
struct Schedule {
    block_length: usize,
    threshold: Option<f64>,
}

impl Schedule {
    fn name(&self) -> String {
        let t = self.threshold.map_or("fixed schedule".to_owned(), |t| format!("threshold {t}"));
        format!("block {} {t}", self.block_length)
    }
    fn apply(&self, prefix: &DecodeSettings) -> DecodeSettings {
        DecodeSettings { block_length: self.block_length, threshold: self.threshold, ..prefix.clone() }
    }
}

/// Schedules of the grid: the suite's block and half of it, each fixed or with threshold τ 0.7.
fn schedules(prefix: &DecodeSettings) -> Vec<Schedule> {
    let mut out = Vec::new();
    for block_length in [prefix.block_length, (prefix.block_length / 2).max(1)] {
        for threshold in [None, Some(0.7)] {
            out.push(Schedule { block_length, threshold });
        }
    }
    out
}

/// The speculation grid on one schedule.
fn speculation_grid(schedule: Schedule, prefix: &DecodeSettings) -> Vec<(String, DecodeSettings)> {
    let mut out = Vec::new();
    // Look ahead over the block's second half, or on every step.
    for trigger in [(schedule.block_length / 2).max(1), schedule.block_length] {
        for accept in [None, Some(0.5), Some(0.0)] {
            let spec =
                SpeculativeSettings { trigger, max_lookahead: 32, accept_confidence: accept, ..Default::default() };
            let name = format!(
                "spec {} trigger {trigger} accept {}",
                schedule.name(),
                accept.map_or("top-2".to_owned(), |c| format!("conf>={c}")),
            );
            out.push((name, DecodeSettings { speculative: Some(spec), ..schedule.apply(prefix) }));
        }
    }
    out
}

/// The revision grid (see the module docs): 24 points.
fn revision_grid() -> Vec<RevisionSettings> {
    let point = |schedule, at_end, visible_threshold: f64, revise_margin, lookback, final_passes, isolated_checks| {
        RevisionSettings {
            visible_threshold,
            stable_threshold: visible_threshold.max(RevisionSettings::default().stable_threshold),
            revise_margin,
            max_checks: 16,
            lookback,
            schedule,
            at_end,
            final_passes,
            isolated_checks,
            ..Default::default()
        }
    };
    let mut out = Vec::new();
    for (schedule, at_end) in [
        (CpuPathSchedule::Async, CpuPathEnd::Drop),
        (CpuPathSchedule::Async, CpuPathEnd::Drain),
        (CpuPathSchedule::Lockstep, CpuPathEnd::Drop),
    ] {
        for lookback in [0, LOOKBACK] {
            out.push(point(schedule, at_end, 0.9, 0.2, lookback, 0, false));
        }
    }
    let inline = |v, m, lookback, passes, isolated| {
        point(CpuPathSchedule::Inline, CpuPathEnd::Drop, v, m, lookback, passes, isolated)
    };
    for visible_threshold in [0.9f64, 0.99] {
        for revise_margin in [0.0, 0.2] {
            for lookback in [0, LOOKBACK] {
                out.push(inline(visible_threshold, revise_margin, lookback, 0, false));
            }
            for isolated in [false, true] {
                out.push(inline(visible_threshold, revise_margin, LOOKBACK, 2, isolated));
            }
        }
    }
    for revise_margin in [0.0, 0.2] {
        out.push(inline(0.9, revise_margin, LOOKBACK, 4, true));
    }
    out
}

fn revision_name(r: &RevisionSettings) -> String {
    format!(
        "revision visible {} margin {} checks {} lookback {} {:?} at end {:?} final passes {}{}",
        r.visible_threshold,
        r.revise_margin,
        r.max_checks,
        r.lookback,
        r.schedule,
        r.at_end,
        r.final_passes,
        if r.isolated_checks { " isolated" } else { "" }
    )
}

/// The first `n` examples of each task family, in file order.
fn first_per_task(examples: &[TaskExample], n: usize) -> Vec<TaskExample> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    examples
        .iter()
        .filter(|e| {
            let c = seen.entry(e.task.as_str()).or_default();
            *c += 1;
            *c <= n
        })
        .cloned()
        .collect()
}

/// Runs both grids on `val` and picks the settings the suite then judges on its evaluation set.
pub fn search(
    backend: &mut RecordingBackend,
    tok: &TextTokenizer,
    val: &[TaskExample],
    prefix: &DecodeSettings,
    stop: &[u32],
    split: &str,
) -> Result<Search> {
    let spec_val = first_per_task(val, SPEC_GRID_PER_TASK);
    // Each schedule's control: the same schedule without speculation, so a loss is speculation's.
    let mut controls = Vec::new();
    let mut spec_points: Vec<(usize, Point)> = Vec::new();
    for (ci, schedule) in schedules(prefix).into_iter().enumerate() {
        let control = run_point(
            backend,
            tok,
            &spec_val,
            format!("prefix_cache {}", schedule.name()),
            schedule.apply(prefix),
            false,
            stop,
        )?;
        controls.push((schedule, control));
        for (name, settings) in speculation_grid(schedule, prefix) {
            spec_points.push((ci, run_point(backend, tok, &spec_val, name, settings, true, stop)?));
        }
    }
    // The forwards budget is against prefix-cache decoding with the fixed schedule at that block.
    let fixed_forwards = |block: usize| {
        controls
            .iter()
            .find(|(s, _)| s.block_length == block && s.threshold.is_none())
            .map_or(usize::MAX, |(_, c)| c.forwards)
    };
    let within_budget = |(ci, p): &&(usize, Point)| {
        p.forwards as f64 <= MAX_FORWARDS_RATIO * fixed_forwards(controls[*ci].0.block_length) as f64
    };
    let loss = |(ci, p): &(usize, Point)| controls[*ci].1.correct as i64 - p.correct as i64;
    // Most accuracy lost against its control; among equals, the fewest forwards.
    let (chosen_ci, chosen) = spec_points
        .iter()
        .filter(within_budget)
        .max_by(|a, b| loss(a).cmp(&loss(b)).then(b.1.forwards.cmp(&a.1.forwards)))
        .or_else(|| spec_points.iter().min_by_key(|(_, p)| p.forwards))
        .ok_or_else(|| anyhow::anyhow!("empty speculation grid"))?;
    let spec = chosen.settings.clone();
    // On the whole split: prefix-cache decoding as the suite runs it (the first schedule is the
    // suite's own), the chosen point's control and the chosen point itself.
    let rerun = |backend: &mut RecordingBackend, p: &Point, npu_loop: bool| -> Result<Point> {
        if spec_val.len() == val.len() {
            return Ok(p.clone());
        }
        run_point(backend, tok, val, p.name.clone(), p.settings.clone(), npu_loop, stop)
    };
    let base = &rerun(backend, &controls[0].1, false)?;
    let control = &if *chosen_ci == 0 { base.clone() } else { rerun(backend, &controls[*chosen_ci].1, false)? };
    let chosen_full = rerun(backend, chosen, true)?;

    let mut rev_points = Vec::new();
    for r in revision_grid() {
        let settings = DecodeSettings { revision: Some(r.clone()), ..spec.clone() };
        rev_points.push(run_point(
            backend,
            tok,
            val,
            format!("{} + {}", chosen.name, revision_name(&r)),
            settings,
            true,
            stop,
        )?);
    }
    // Highest accuracy within the goal's latency budget (the CPU path must not make the run
    // slower than the budget allows); if no point fits, highest accuracy overall.
    let within_latency = |p: &&Point| p.sim_s <= MAX_SIM_LATENCY_RATIO * base.sim_s;
    let best = |a: &&Point, b: &&Point| a.correct.cmp(&b.correct).then(b.cpu_forwards.cmp(&a.cpu_forwards));
    let revision = rev_points
        .iter()
        .filter(within_latency)
        .max_by(best)
        .or_else(|| rev_points.iter().max_by(best))
        .and_then(|p| p.settings.revision.clone())
        .ok_or_else(|| anyhow::anyhow!("empty revision grid"))?;

    let chosen_json = chosen_full.to_json(control);
    let lost_points = 100.0 * (control.accuracy - chosen_full.accuracy);
    let json = json!({
        "split": format!("{split} (tuning only)"),
        "examples": base.total,
        "speculation_grid_examples": spec_val.len(),
        "max_forwards_ratio": MAX_FORWARDS_RATIO,
        "max_sim_latency_ratio": MAX_SIM_LATENCY_RATIO,
        "rule": "speculation: most accuracy lost against its control (prefix-cache decoding on the same schedule, no speculation) within the forwards budget (prefix-cache decoding, fixed schedule, same block); ties: fewer forwards. Revision on that point: highest accuracy within 0.85x the SIMULATED latency of prefix-cache decoding (ties: fewer CPU-path forwards; if none fits, highest accuracy). All on the tuning split: the speculation grid and its controls on its first 50 prompts per family, the revision grid (with prefix-cache decoding, the chosen control and the chosen speculation point rerun) on all of it; ratios in the grids are against the control on the same prompts",
        "prefix_cache": base.to_json(base),
        "controls": controls.iter().map(|(_, c)| c.to_json(&controls[0].1)).collect::<Vec<_>>(),
        "speculation_grid": spec_points.iter().map(|(ci, p)| p.to_json(&controls[*ci].1)).collect::<Vec<_>>(),
        "revision_grid": rev_points.iter().map(|p| p.to_json(control)).collect::<Vec<_>>(),
        "chosen_control": control.to_json(base),
        "chosen_speculation": chosen_json,
        "chosen_speculation_loss_points": lost_points,
        "chosen_revision": revision,
    });
    Ok(Search {
        control: control.settings.clone(),
        spec_revision: DecodeSettings { revision: Some(revision), ..spec.clone() },
        speculative: spec,
        json,
    })
}
