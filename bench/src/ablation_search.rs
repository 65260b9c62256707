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
//!    so a loss is speculation's own. Candidates: the points using at most 0.8x the forwards of
//!    fixed-schedule prefix-cache decoding that lose at least the goal's 2 points against their
//!    control, most lost first (ties: fewer forwards), one per schedule and acceptance rule (the
//!    trigger barely matters once drafts are accepted by confidence), at most three; if none
//!    loses that much, the one losing most;
//! 2. revision on each candidate, all with a look-back of 32 positions kept revisable (re-checked
//!    with the later blocks as context): the asynchronous CPU path with its last job drained and
//!    the lockstep one (every step's job runs), at visible threshold 0.9 and margin 0.2; the
//!    inline schedule (no CPU path: the dense device re-checks after each forward) over visible
//!    threshold x revise margin, each with two final passes (dense re-checks of the whole answer
//!    at the end) whose re-checked positions are never neighbours (isolated), reading the prefix
//!    cache or forwarding the whole canvas fresh. The earlier searches' larger grids (64, 24 and
//!    10 points, in the history of `bench/results/ablation.json`) found no look-back, the async
//!    drop and plain (non-isolated) final passes never better, and no final passes better than
//!    two isolated ones only once (by 2 prompts of 1,600), so they are left out. The pair kept: the
//!    highest accuracy within 0.85x the simulated latency of prefix-cache decoding (the goal's
//!    budget; if no point fits, highest accuracy), among candidates that still lose the goal's
//!    points on the whole split (if none does, among all); ties: fewer forwards, then fewer
//!    CPU-path forwards.
//!
//! The speculation grid ranks losses of several points and runs on the first
//! [`SPEC_GRID_PER_TASK`] prompts per family of the tuning split; the revision grids have to tell
//! apart settings half a point apart, so they (with each candidate and its control, and
//! prefix-cache decoding, rerun) run on the whole split.

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

/// The goal's accuracy loss of speculation alone, in points: speculation points losing at least
/// this much on the speculation grid are candidates for the revision grid.
const GOAL_LOSS_POINTS: f64 = 2.0;

/// Most speculation points the revision grid runs on.
const MAX_SPEC_CANDIDATES: usize = 3;

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

/// The revision grid (see the module docs): 10 points.
fn revision_grid() -> Vec<RevisionSettings> {
    // Final passes: (passes, isolated checks, fresh whole-canvas forwards).
    let point = |schedule, at_end, visible_threshold: f64, revise_margin, (final_passes, isolated_checks, fresh)| {
        RevisionSettings {
            visible_threshold,
            stable_threshold: visible_threshold.max(RevisionSettings::default().stable_threshold),
            revise_margin,
            max_checks: 16,
            lookback: LOOKBACK,
            schedule,
            at_end,
            final_passes,
            isolated_checks,
            fresh_final_passes: fresh,
            ..Default::default()
        }
    };
    let mut out = vec![
        point(CpuPathSchedule::Async, CpuPathEnd::Drain, 0.9, 0.2, (0, false, false)),
        point(CpuPathSchedule::Lockstep, CpuPathEnd::Drop, 0.9, 0.2, (0, false, false)),
    ];
    for visible_threshold in [0.9f64, 0.99] {
        for revise_margin in [0.0, 0.2] {
            for passes in [(2, true, false), (2, true, true)] {
                out.push(point(CpuPathSchedule::Inline, CpuPathEnd::Drop, visible_threshold, revise_margin, passes));
            }
        }
    }
    out
}

fn revision_name(r: &RevisionSettings) -> String {
    format!(
        "revision visible {} margin {} checks {} lookback {} {:?} at end {:?} final passes {}{}{}",
        r.visible_threshold,
        r.revise_margin,
        r.max_checks,
        r.lookback,
        r.schedule,
        r.at_end,
        r.final_passes,
        if r.isolated_checks { " isolated" } else { "" },
        if r.fresh_final_passes { " fresh" } else { "" }
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

/// The revision grid on one speculation candidate, all on the whole tuning split.
struct Grid {
    /// Index of the candidate's schedule (its control) in the schedules' list.
    control: usize,
    speculative: Point,
    revision: Vec<Point>,
}

/// Indices into `points` (speculation points with their schedule's index in `controls`) of the
/// candidates the revision grid runs on: within the budget, most accuracy lost against their
/// control first (ties: fewer forwards), one per schedule and acceptance rule (the trigger barely
/// matters once drafts are accepted by confidence), at most [`MAX_SPEC_CANDIDATES`], those losing
/// at least [`GOAL_LOSS_POINTS`]; if none does, the one losing most (if none is within the budget,
/// the one with the fewest forwards).
fn spec_candidates(
    points: &[(usize, Point)],
    controls: &[Point],
    within_budget: impl Fn(&(usize, Point)) -> bool,
) -> Vec<usize> {
    let lost = |i: usize| controls[points[i].0].correct as i64 - points[i].1.correct as i64;
    let accept = |i: usize| points[i].1.settings.speculative.as_ref().map(|s| s.accept_confidence.map(f64::to_bits));
    let mut ranked: Vec<usize> = (0..points.len()).filter(|&i| within_budget(&points[i])).collect();
    ranked.sort_by(|&a, &b| lost(b).cmp(&lost(a)).then(points[a].1.forwards.cmp(&points[b].1.forwards)));
    let mut out: Vec<usize> = Vec::new();
    for i in ranked {
        let lost_points = 100.0 * lost(i) as f64 / points[i].1.total.max(1) as f64;
        let first_of_kind = !out.iter().any(|&j| points[j].0 == points[i].0 && accept(j) == accept(i));
        if first_of_kind && out.len() < MAX_SPEC_CANDIDATES && (out.is_empty() || lost_points >= GOAL_LOSS_POINTS) {
            out.push(i);
        }
    }
    if out.is_empty() {
        out.extend((0..points.len()).min_by_key(|&i| points[i].1.forwards));
    }
    out
}

/// The speculation point and revision setting kept: the highest accuracy with revision within
/// `max_sim_s` of simulated time (the CPU path must not make the run slower than the goal's budget
/// allows; if no point fits, highest accuracy overall), among candidates still losing
/// [`GOAL_LOSS_POINTS`] against their control on the whole split (if none does, among all); ties:
/// fewer forwards, then fewer CPU-path forwards.
fn pick_pair<'a>(
    grids: &'a [Grid],
    controls: &BTreeMap<usize, Point>,
    max_sim_s: f64,
) -> Option<(&'a Grid, &'a Point)> {
    let loss = |g: &Grid| 100.0 * (controls[&g.control].accuracy - g.speculative.accuracy);
    let losing: Vec<&Grid> = grids.iter().filter(|g| loss(g) >= GOAL_LOSS_POINTS).collect();
    let pool = if losing.is_empty() { grids.iter().collect() } else { losing };
    let best = |a: &(&Grid, &Point), b: &(&Grid, &Point)| {
        a.1.correct
            .cmp(&b.1.correct)
            .then(b.1.forwards.cmp(&a.1.forwards))
            .then(b.1.cpu_forwards.cmp(&a.1.cpu_forwards))
    };
    let pairs: Vec<(&Grid, &Point)> = pool.iter().flat_map(|g| g.revision.iter().map(move |p| (*g, p))).collect();
    pairs
        .iter()
        .copied()
        .filter(|(_, p)| p.sim_s <= max_sim_s)
        .max_by(best)
        .or_else(|| pairs.iter().copied().max_by(best))
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
    let within_budget = |(ci, p): &(usize, Point)| {
        p.forwards as f64 <= MAX_FORWARDS_RATIO * fixed_forwards(controls[*ci].0.block_length) as f64
    };
    let control_points: Vec<Point> = controls.iter().map(|(_, c)| c.clone()).collect();
    let candidates: Vec<&(usize, Point)> =
        spec_candidates(&spec_points, &control_points, within_budget).into_iter().map(|i| &spec_points[i]).collect();
    // On the whole split: prefix-cache decoding as the suite runs it (the first schedule is the
    // suite's own), each candidate's control and each candidate itself.
    let rerun = |backend: &mut RecordingBackend, p: &Point, npu_loop: bool| -> Result<Point> {
        if spec_val.len() == val.len() {
            return Ok(p.clone());
        }
        run_point(backend, tok, val, p.name.clone(), p.settings.clone(), npu_loop, stop)
    };
    let base = rerun(backend, &controls[0].1, false)?;
    let mut full_controls: BTreeMap<usize, Point> = BTreeMap::from([(0, base.clone())]);
    let mut grids = Vec::new();
    for c in &candidates {
        let (ci, point) = (c.0, &c.1);
        if !full_controls.contains_key(&ci) {
            let c = rerun(backend, &controls[ci].1, false)?;
            full_controls.insert(ci, c);
        }
        let speculative = rerun(backend, point, true)?;
        let mut rev_points = Vec::new();
        for r in revision_grid() {
            let settings = DecodeSettings { revision: Some(r.clone()), ..point.settings.clone() };
            let name = format!("{} + {}", point.name, revision_name(&r));
            rev_points.push(run_point(backend, tok, val, name, settings, true, stop)?);
        }
        grids.push(Grid { control: ci, speculative, revision: rev_points });
    }
    let (grid, rev_point) = pick_pair(&grids, &full_controls, MAX_SIM_LATENCY_RATIO * base.sim_s)
        .ok_or_else(|| anyhow::anyhow!("empty revision grid"))?;
    let revision =
        rev_point.settings.revision.clone().ok_or_else(|| anyhow::anyhow!("revision point without revision"))?;
    let control = &full_controls[&grid.control];
    let chosen_full = &grid.speculative;
    let spec = chosen_full.settings.clone();

    let chosen_json = chosen_full.to_json(control);
    let lost_points = 100.0 * (control.accuracy - chosen_full.accuracy);
    let json = json!({
        "split": format!("{split} (tuning only)"),
        "examples": base.total,
        "speculation_grid_examples": spec_val.len(),
        "max_forwards_ratio": MAX_FORWARDS_RATIO,
        "max_sim_latency_ratio": MAX_SIM_LATENCY_RATIO,
        "rule": format!("speculation candidates: within the forwards budget (prefix-cache decoding, fixed schedule, same block), the points losing at least {GOAL_LOSS_POINTS} points against their control (prefix-cache decoding on the same schedule, no speculation), most lost first (ties: fewer forwards), one per schedule and acceptance rule, at most {MAX_SPEC_CANDIDATES} (if none loses that much, the one losing most). The revision grid runs on each candidate; the pair kept: highest accuracy within {MAX_SIM_LATENCY_RATIO}x the SIMULATED latency of prefix-cache decoding (if none fits, highest accuracy), among candidates that still lose at least {GOAL_LOSS_POINTS} points on the whole split (if none does, among all); ties: fewer forwards, then fewer CPU-path forwards. All on the tuning split: the speculation grid and its controls on its first {SPEC_GRID_PER_TASK} prompts per family, the revision grids (with prefix-cache decoding and each candidate and its control rerun) on all of it; ratios in the grids are against the control on the same prompts"),
        "prefix_cache": base.to_json(&base),
        "controls": controls.iter().map(|(_, c)| c.to_json(&controls[0].1)).collect::<Vec<_>>(),
        "speculation_grid": spec_points.iter().map(|(ci, p)| p.to_json(&controls[*ci].1)).collect::<Vec<_>>(),
        "revision_grids": grids.iter().map(|g| json!({
            "speculation": g.speculative.to_json(&full_controls[&g.control]),
            "control": full_controls[&g.control].to_json(&base),
            "points": g.revision.iter().map(|p| p.to_json(&full_controls[&g.control])).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "chosen_control": control.to_json(&base),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn point(correct: usize, forwards: usize, sim_s: f64, accept: Option<f64>) -> Point {
        let speculative = SpeculativeSettings { accept_confidence: accept, ..Default::default() };
        Point {
            name: format!("{correct} {forwards} {accept:?}"),
            settings: DecodeSettings { speculative: Some(speculative), ..Default::default() },
            accuracy: correct as f64 / 400.0,
            correct,
            total: 400,
            forwards,
            sim_s,
            cpu_forwards: 0,
            revisions: 0,
            fixed_broke_neutral: [0; 3],
            tasks: BTreeMap::new(),
        }
    }

    #[test]
    fn candidates_lose_the_goals_points_within_budget_one_per_schedule_and_acceptance() {
        let controls = [point(200, 100, 1.0, None), point(180, 60, 1.0, None)];
        let points = vec![
            (0, point(199, 90, 1.0, None)),       // 0.25 points lost: too little
            (0, point(190, 50, 1.0, Some(0.5))),  // 2.5 points
            (0, point(190, 40, 1.0, Some(0.5))),  // the same loss with fewer forwards: ranked first
            (0, point(150, 200, 1.0, Some(0.0))), // 12.5 points, over the forwards budget
            (1, point(168, 30, 1.0, Some(0.0))),  // 3 points
            (1, point(176, 30, 1.0, Some(0.5))),  // 1 point
        ];
        let within = |(_, p): &(usize, Point)| p.forwards <= 80;
        assert_eq!(spec_candidates(&points, &controls, within), vec![4, 2]);
        // At most three, most lost first.
        let many: Vec<(usize, Point)> = (0..5).map(|i| (0, point(150 + i, 10, 1.0, Some(i as f64 / 10.0)))).collect();
        assert_eq!(spec_candidates(&many, &controls, within), vec![0, 1, 2]);
        // None loses the goal's points: the one losing most.
        let mild = vec![(0, point(199, 10, 1.0, None)), (0, point(198, 20, 1.0, Some(0.0)))];
        assert_eq!(spec_candidates(&mild, &controls, within), vec![1]);
        // None within the budget: the one with the fewest forwards.
        assert_eq!(spec_candidates(&mild, &controls, |_: &(usize, Point)| false), vec![0]);
    }

    #[test]
    fn the_pair_kept_is_the_most_accurate_within_latency_among_candidates_still_losing() {
        let controls = BTreeMap::from([(0, point(200, 100, 1.0, None)), (1, point(200, 100, 1.0, None))]);
        let grid = |control, spec: usize, revision: Vec<Point>| Grid {
            control,
            speculative: point(spec, 30, 0.5, None),
            revision,
        };
        let grids = vec![
            // Loses 3 points; its best point within 0.8 s is the 195 one (the 199 one is too slow).
            grid(0, 188, vec![point(190, 40, 0.6, None), point(195, 50, 0.7, None), point(199, 60, 0.9, None)]),
            // Loses 1 point on the whole split: not kept although its revision scores higher.
            grid(1, 196, vec![point(198, 40, 0.6, None)]),
        ];
        let (g, p) = pick_pair(&grids, &controls, 0.8).unwrap();
        assert_eq!((g.speculative.correct, p.correct), (188, 195));
        // Ties on accuracy: fewer forwards.
        let tied = vec![grid(0, 188, vec![point(195, 50, 0.7, None), point(195, 45, 0.7, None)])];
        assert_eq!(pick_pair(&tied, &controls, 0.8).unwrap().1.forwards, 45);
        // Nothing within the latency budget: the most accurate.
        assert_eq!(pick_pair(&grids, &controls, 0.1).unwrap().1.correct, 199);
        // No candidate loses the goal's points any more: among all.
        assert_eq!(pick_pair(&grids[1..], &controls, 0.8).unwrap().1.correct, 198);
    }
}
