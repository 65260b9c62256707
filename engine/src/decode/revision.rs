//! Dual-path progressive revision (llada.cpp §7): committed tokens stay revisable until stable.
//!
//! Life cycle: **Invisible** (`TokenState::Masked`) → **Visible** (committed, revisable) →
//! **Stable** (trusted; never re-scored, never given LM-head rows).
//!
//! * A commit with confidence ≥ `stable_threshold` goes straight to Stable, otherwise Visible.
//! * Each step, the CPU path ([`RevisionWorker`], on its own thread next to the dense forward)
//!   re-scores up to `max_checks` Visible positions of the current block and the `lookback`
//!   positions before it (lowest commit confidence first). Choice: the checked positions are
//!   **re-masked** in that forward, because a LLaDA-style model is trained to predict masked
//!   positions only; the row of a visible token mostly echoes its own input and says little
//!   about whether the context supports it. With `isolated_checks` no two of them are
//!   neighbours (least recently checked first), so each is judged with its neighbour as context.
//! * [`judge`]: with `p_cur` = probability of the current token and `best` the top non-mask token,
//!   the token is **revised** to `best` when `best ≠ current`, `p_cur < visible_threshold` and
//!   `p_best ≥ p_cur + revise_margin`; it is **confirmed** when `p_cur ≥ stable_threshold`
//!   (`stable_checks` confirmations in a row promote it to Stable); otherwise it stays Visible.
//! * Leaving a block promotes its remaining Visible tokens to Stable, except the last `lookback`
//!   positions before the current block: those stay Visible (and are re-checked, with the
//!   later blocks' tokens as context) until the current block moves past them.
//! * **Final passes** (`final_passes`, default 0): when the run ends, the dense path itself
//!   re-checks the Visible tokens still revisable, up to that many times (one dense forward
//!   each, the checked positions re-masked, the same rule), stopping early after a pass that
//!   revises nothing (with isolated checks: once every Visible token had a check since the last
//!   revision). It spends dense forwards the run saved elsewhere to give every token one
//!   check with the whole answer as context, which the CPU path (a few jobs per run at phone
//!   timing) cannot. With `fresh_final_passes` they forward the whole canvas without the cache
//!   (fresh K/V everywhere, a longer window).
//! * Revised tokens' K/V are recomputed on the CPU path against a snapshot of the prefix cache
//!   and written to a side buffer in the NPU's tiled layout ([`PendingKv`] / `TiledKv`); the
//!   loop merges them into the prefix cache only at the step boundary (delayed merge).

use std::thread::ThreadId;

use serde::{Deserialize, Serialize};

use super::canvas::{Canvas, TokenState};
use super::frame::TokenChange;
use super::sampling::softmax;
use super::tiled_kv::TiledKv;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvCache, KvMode};

/// How the dense path and the CPU path share (simulated) time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CpuPathSchedule {
    /// The dense path never waits: a job starts only when the CPU path is idle, may span several
    /// dense steps, and its verdicts land at the first step boundary after its simulated end.
    #[default]
    Async,
    /// Every step waits for its CPU-path job: a step lasts as long as the longer path.
    Lockstep,
    /// Wall-clock concurrency: the CPU path runs on its own OS thread (one kernel thread) for the
    /// whole run, fed through a one-job queue; the dense loop never waits for it and applies its
    /// verdicts at the first step boundary after they arrive. Not deterministic (which boundary
    /// a verdict lands at depends on real time); the simulated clock is the async one.
    Threaded,
    /// No CPU path: the dense device runs each step's re-check itself, right after its forward
    /// (a step lasts both; the re-check's forwards are the run's). Where the phone's CPU is too
    /// slow for the model, this keeps revision on the NPU.
    Inline,
}

/// What happens to a CPU-path job still running when the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CpuPathEnd {
    /// Its verdicts never land (the run does not wait for it).
    #[default]
    Drop,
    /// The run waits for it and applies its verdicts (validated as at any step boundary).
    Drain,
}

/// Knobs of progressive revision (defaults: see the `ablation` bench and the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RevisionSettings {
    /// A Visible token whose re-checked probability is below this may be revised.
    pub visible_threshold: f64,
    /// Commits at or above this go straight to Stable; re-checks at or above it confirm.
    pub stable_threshold: f64,
    /// How much more probable the replacement must be than the current token.
    pub revise_margin: f64,
    /// Consecutive confirmations that promote a Visible token to Stable.
    pub stable_checks: usize,
    /// Visible positions re-checked per step (the CPU path's budget).
    pub max_checks: usize,
    /// Positions before the current block whose Visible tokens stay revisable (0: a block's
    /// tokens settle when it completes). With a look-back the CPU path re-checks a token once the
    /// blocks right of it have committed, i.e. with the right-hand context its commit lacked.
    pub lookback: usize,
    /// How the CPU path is scheduled against the dense path.
    pub schedule: CpuPathSchedule,
    /// A job still running at the end of the run: dropped or drained.
    pub at_end: CpuPathEnd,
    /// Re-checks of the Visible tokens the dense path runs when the run ends (0: none).
    pub final_passes: usize,
    /// No two positions re-checked in one forward are neighbours (least recently checked first,
    /// so the next check takes the ones skipped). Re-masking two neighbours together asks the
    /// model to fill both from the same context, which is how parallel decoding writes a word
    /// twice; one at a time, each is judged with its neighbour as context.
    pub isolated_checks: bool,
    /// Final passes forward the whole canvas without the cache, so every position's K/V comes
    /// from the finished answer. The prefix cache's K/V of the prompt and of earlier blocks were
    /// computed while later positions were still masked; a check against them judges a token by
    /// a context the answer no longer has (the prefix cache's accuracy cost on arithmetic).
    pub fresh_final_passes: bool,
}

impl Default for RevisionSettings {
    fn default() -> Self {
        RevisionSettings {
            visible_threshold: 0.7,
            stable_threshold: 0.9,
            revise_margin: 0.2,
            stable_checks: 2,
            max_checks: 4,
            lookback: 0,
            schedule: CpuPathSchedule::Async,
            at_end: CpuPathEnd::Drop,
            final_passes: 0,
            isolated_checks: false,
            fresh_final_passes: false,
        }
    }
}

/// Most final passes a run may ask for (each is a dense forward).
pub const MAX_FINAL_PASSES: usize = 64;

impl RevisionSettings {
    /// Checks the knobs on their own.
    pub fn validate(&self) -> Result<()> {
        let unit = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !(unit(self.visible_threshold) && unit(self.stable_threshold) && unit(self.revise_margin)) {
            return Err(EngineError::InvalidRequest("revision thresholds and margin must lie in [0, 1]".into()));
        }
        if self.visible_threshold > self.stable_threshold {
            return Err(EngineError::InvalidRequest(
                "revision visible_threshold must not exceed stable_threshold".into(),
            ));
        }
        if self.stable_checks == 0 {
            return Err(EngineError::InvalidRequest("revision stable_checks must be at least 1".into()));
        }
        if self.final_passes > MAX_FINAL_PASSES {
            return Err(EngineError::InvalidRequest(format!(
                "revision final_passes must be at most {MAX_FINAL_PASSES}, got {}",
                self.final_passes
            )));
        }
        Ok(())
    }
}

/// The CPU path's re-score of one Visible position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// Canvas position.
    pub pos: usize,
    /// Token currently committed there.
    pub current: u32,
    /// Probability of `current` with the position re-masked.
    pub p_current: f64,
    /// Most probable non-mask token.
    pub best: u32,
    /// Its probability.
    pub p_best: f64,
}

/// What to do with a checked Visible token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Replace the token (stays Visible, flagged `revised`).
    Revise {
        /// New token id.
        token: u32,
        /// Its probability.
        confidence: f64,
    },
    /// The model still strongly supports it.
    Confirm,
    /// Neither: keep it Visible.
    Keep,
}

/// The revision rule (see the module docs).
pub fn judge(c: &Check, s: &RevisionSettings) -> Verdict {
    if c.best != c.current && c.p_current < s.visible_threshold && c.p_best >= c.p_current + s.revise_margin {
        Verdict::Revise { token: c.best, confidence: c.p_best }
    } else if c.p_current >= s.stable_threshold {
        Verdict::Confirm
    } else {
        Verdict::Keep
    }
}

/// Work handed to the CPU path: a snapshot taken at the start of a step.
#[derive(Debug, Clone)]
pub struct RevisionJob {
    /// Visible positions to re-score (increasing).
    pub positions: Vec<usize>,
    /// Canvas tokens at step start.
    pub tokens: Vec<u32>,
    /// The mask token id.
    pub mask_id: u32,
    /// First position of the CPU forward window (`[lo, len)`; the cache covers `[0, lo)`).
    pub lo: usize,
    /// Snapshot of the prefix cache (`None` = no cache; the window is then the whole canvas).
    pub cache: Option<KvCache>,
    /// Rule knobs.
    pub settings: RevisionSettings,
    /// Shifted logits (Dream): position p is predicted by row p − 1, which must lie in the window.
    pub shift: bool,
    /// Recompute the K/V of revised positions for the delayed merge (a final pass skips it: the
    /// run ends, and a later pass feeds revised positions through its window instead).
    pub refresh_kv: bool,
}

/// Refreshed K/V of revised positions waiting for the step-boundary merge.
#[derive(Debug, Clone)]
pub struct PendingKv {
    /// `(position, revised token)` per tile row.
    pub slots: Vec<(usize, u32)>,
    /// The rows, in the NPU's 32×32 tile layout.
    pub tiles: TiledKv,
}

impl PendingKv {
    /// Writes the rows whose position is still cached and still holds the revised token into
    /// `cache`; returns the merged positions. Call only between steps.
    pub fn merge_into(&self, cache: &mut KvCache, tokens: &[u32]) -> Result<Vec<usize>> {
        let mut merged = Vec::new();
        for (row, &(pos, token)) in self.slots.iter().enumerate() {
            if cache.is_valid(pos) && tokens.get(pos) == Some(&token) {
                self.tiles.unpack_into(row, cache, pos)?;
                merged.push(pos);
            }
        }
        Ok(merged)
    }
}

/// What the CPU path returns.
#[derive(Debug, Clone)]
pub struct RevisionOutcome {
    /// One re-score per checked position.
    pub checks: Vec<Check>,
    /// The rule's verdict per check.
    pub verdicts: Vec<Verdict>,
    /// K/V of revised positions (prefix cache only).
    pub pending: Option<PendingKv>,
    /// Forwards the CPU path ran.
    pub forwards: usize,
    /// Simulated device seconds of those forwards, when the executor simulates a device.
    pub simulated_s: Option<f64>,
    /// Thread the CPU path ran on.
    pub thread: ThreadId,
}

/// The CPU path: re-scores Visible tokens and refreshes the K/V of revised ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct RevisionWorker;

impl RevisionWorker {
    /// Runs `job` on `backend` (call it from the CPU-path thread).
    pub fn run(backend: &mut dyn Backend, mut job: RevisionJob) -> Result<RevisionOutcome> {
        let len = job.tokens.len();
        let lo = job.lo.min(len);
        let positions: Vec<usize> = (lo..len).collect();
        // (position, window row predicting it) for each check the window can score.
        let src = |p: usize| if job.shift { p.saturating_sub(1) } else { p };
        let scored: Vec<(usize, usize)> =
            job.positions.iter().filter(|&&p| p < len && src(p) >= lo).map(|&p| (p, src(p) - lo)).collect();
        let rows: Vec<usize> = scored.iter().map(|&(_, r)| r).collect();
        let kv = if job.cache.is_some() { KvMode::Read } else { KvMode::Ignore };
        let mut masked = job.tokens[lo..].to_vec();
        for &(p, _) in &scored {
            masked[p - lo] = job.mask_id;
        }
        let req = ForwardRequest { tokens: &masked, positions: &positions, logits_rows: &rows, kv };
        let (out, st) = backend.forward(&req, job.cache.as_mut())?;
        let mut simulated_s = st.simulated_s;
        let logits = super::denoise::to_rows(&out.logits, out.vocab, rows.len(), backend.name())?;
        let checks: Vec<Check> = scored
            .iter()
            .zip(logits)
            .map(|(&(pos, _), mut row)| {
                if let Some(m) = row.get_mut(job.mask_id as usize) {
                    *m = f64::NEG_INFINITY;
                }
                let p = softmax(&row);
                let current = job.tokens[pos];
                let best = super::sampling::argmax(&p);
                Check {
                    pos,
                    current,
                    p_current: p.get(current as usize).copied().unwrap_or(0.0),
                    best: best as u32,
                    p_best: p[best],
                }
            })
            .collect();
        let verdicts: Vec<Verdict> = checks.iter().map(|c| judge(c, &job.settings)).collect();
        let mut forwards = 1;
        let revised: Vec<(usize, u32)> = checks
            .iter()
            .zip(&verdicts)
            .filter_map(|(c, v)| match v {
                Verdict::Revise { token, .. } => Some((c.pos, *token)),
                _ => None,
            })
            .collect();
        let pending = match job.cache.as_mut() {
            Some(cache) if job.refresh_kv && !revised.is_empty() => {
                // Recompute the window with the revised identities against the snapshot; only
                // the revised rows are kept (later positions' staleness is the prefix cache's
                // usual approximation).
                let mut fixed = job.tokens[lo..].to_vec();
                for &(p, t) in &revised {
                    fixed[p - lo] = t;
                }
                let req =
                    ForwardRequest { tokens: &fixed, positions: &positions, logits_rows: &[], kv: KvMode::ReadWrite };
                let (_, st) = backend.forward(&req, Some(cache))?;
                forwards += 1;
                if let Some(s) = st.simulated_s {
                    *simulated_s.get_or_insert(0.0) += s;
                }
                let at: Vec<usize> = revised.iter().map(|&(p, _)| p).collect();
                Some(PendingKv { slots: revised, tiles: TiledKv::pack(cache, &at)? })
            }
            _ => None,
        };
        Ok(RevisionOutcome { checks, verdicts, pending, forwards, simulated_s, thread: std::thread::current().id() })
    }
}

/// Per-position Visible/Stable bookkeeping on the dense path's side.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    settings: RevisionSettings,
    confirms: Vec<usize>,
    /// Per position, the number of the last pick that checked it (0: never).
    last_pick: Vec<usize>,
    picks: usize,
}

impl Lifecycle {
    /// Bookkeeping for a canvas of `len` positions.
    pub fn new(len: usize, settings: RevisionSettings) -> Self {
        Lifecycle { settings, confirms: vec![0; len], last_pick: vec![0; len], picks: 0 }
    }

    /// The knobs.
    pub fn settings(&self) -> &RevisionSettings {
        &self.settings
    }

    /// State a fresh commit with `confidence` gets.
    pub fn commit_state(&self, confidence: f64) -> TokenState {
        if confidence >= self.settings.stable_threshold {
            TokenState::Stable
        } else {
            TokenState::Visible
        }
    }

    /// Visible positions of `[start, end)` to re-check this step: lowest confidence first (with
    /// isolated checks: least recently checked first, never two neighbours), at most
    /// `max_checks`, returned in increasing position order.
    pub fn pick_checks(&mut self, canvas: &Canvas, start: usize, end: usize) -> Vec<usize> {
        let mut vis: Vec<usize> =
            (start..end.min(canvas.len())).filter(|&p| canvas.state(p) == TokenState::Visible).collect();
        let by_confidence =
            |a: &usize, b: &usize| canvas.confidence(*a).total_cmp(&canvas.confidence(*b)).then(a.cmp(b));
        if self.settings.isolated_checks {
            vis.sort_by(|a, b| self.last_pick[*a].cmp(&self.last_pick[*b]).then_with(|| by_confidence(a, b)));
            let mut picked: Vec<usize> = Vec::new();
            for p in vis {
                if picked.len() == self.settings.max_checks {
                    break;
                }
                if !picked.iter().any(|&q| q.abs_diff(p) == 1) {
                    picked.push(p);
                }
            }
            vis = picked;
        } else {
            vis.sort_by(by_confidence);
            vis.truncate(self.settings.max_checks);
        }
        self.picks += 1;
        for &p in &vis {
            self.last_pick[p] = self.picks;
        }
        vis.sort_unstable();
        vis
    }

    /// Whether every Visible position of `[start, end)` was checked by a pick after `pick`.
    pub fn all_checked_since(&self, canvas: &Canvas, start: usize, end: usize, pick: usize) -> bool {
        (start..end.min(canvas.len()))
            .filter(|&p| canvas.state(p) == TokenState::Visible)
            .all(|p| self.last_pick[p] > pick)
    }

    /// Picks made so far.
    pub fn picks(&self) -> usize {
        self.picks
    }

    /// Applies the CPU path's verdicts to `canvas` at `step` and returns the changes.
    pub fn apply(&mut self, canvas: &mut Canvas, outcome: &RevisionOutcome, step: usize) -> Vec<TokenChange> {
        let mut changes = Vec::new();
        for (c, v) in outcome.checks.iter().zip(&outcome.verdicts) {
            // The dense path commits masks only, so a checked position is still Visible unless
            // something else already promoted it.
            if canvas.state(c.pos) != TokenState::Visible || canvas.tokens()[c.pos] != c.current {
                continue;
            }
            match *v {
                Verdict::Revise { token, confidence } => {
                    self.confirms[c.pos] = 0;
                    changes.push(canvas.commit(c.pos, token, confidence as f32, step, TokenState::Visible));
                }
                Verdict::Confirm => {
                    self.confirms[c.pos] += 1;
                    if self.confirms[c.pos] >= self.settings.stable_checks {
                        changes.push(promote(canvas, c.pos, step));
                    }
                }
                Verdict::Keep => self.confirms[c.pos] = 0,
            }
        }
        changes
    }

    /// Promotes every Visible token of `[start, end)` (the block being left) to Stable, except
    /// `waiting` (positions a CPU-path job still in flight is checking: they stay Visible until
    /// its verdicts land).
    pub fn promote_block(
        &mut self,
        canvas: &mut Canvas,
        start: usize,
        end: usize,
        step: usize,
        waiting: &[usize],
    ) -> Vec<TokenChange> {
        let visible: Vec<usize> = (start..end.min(canvas.len()))
            .filter(|&p| canvas.state(p) == TokenState::Visible && !waiting.contains(&p))
            .collect();
        visible.into_iter().map(|p| promote(canvas, p, step)).collect()
    }
}

/// Visible → Stable without changing the token (streamed as a non-revision change).
fn promote(canvas: &mut Canvas, pos: usize, step: usize) -> TokenChange {
    let (token, conf) = (canvas.tokens()[pos], canvas.confidence(pos));
    let mut change = canvas.commit(pos, token, conf, step, TokenState::Stable);
    change.revised = false;
    change
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(current: u32, p_current: f64, best: u32, p_best: f64) -> Check {
        Check { pos: 0, current, p_current, best, p_best }
    }

    #[test]
    fn rule_revises_only_unsupported_tokens_with_a_clear_alternative() {
        let s = RevisionSettings::default();
        assert_eq!(judge(&check(1, 0.1, 2, 0.5), &s), Verdict::Revise { token: 2, confidence: 0.5 });
        assert_eq!(judge(&check(1, 0.35, 2, 0.5), &s), Verdict::Keep, "margin not met");
        assert_eq!(judge(&check(1, 0.95, 1, 0.95), &s), Verdict::Confirm);
        assert_eq!(judge(&check(1, 0.8, 1, 0.8), &s), Verdict::Keep);
    }

    /// Isolated checks never re-mask two neighbours in one forward; the next pick starts with
    /// the positions the last one skipped, so two picks cover a run of Visible tokens.
    #[test]
    fn isolated_checks_skip_neighbours_and_rotate() {
        let mut canvas = Canvas::new(&[7], 6, 9);
        for (p, c) in [(1, 0.5), (2, 0.1), (3, 0.6), (4, 0.2), (5, 0.3)] {
            canvas.commit(p, 4, c, 0, TokenState::Visible);
        }
        let plain = RevisionSettings { max_checks: 8, ..Default::default() };
        assert_eq!(Lifecycle::new(canvas.len(), plain.clone()).pick_checks(&canvas, 0, 7), vec![1, 2, 3, 4, 5]);
        let mut life = Lifecycle::new(canvas.len(), RevisionSettings { isolated_checks: true, ..plain });
        // Lowest confidence first: 2 (0.1), 4 (0.2); 5, 1 and 3 touch a pick.
        assert_eq!(life.pick_checks(&canvas, 0, 7), vec![2, 4]);
        assert!(!life.all_checked_since(&canvas, 0, 7, 0));
        // Never checked first: 5 (0.3), then 1 (0.5) and 3 (0.6) - 3 is no neighbour of 1 or 5.
        assert_eq!(life.pick_checks(&canvas, 0, 7), vec![1, 3, 5]);
        assert!(life.all_checked_since(&canvas, 0, 7, 0));
        assert!(!life.all_checked_since(&canvas, 0, 7, 1), "2 and 4 were checked by pick 1, not after");
        // The budget caps a pick as before.
        life.settings.max_checks = 1;
        assert_eq!(life.pick_checks(&canvas, 0, 7), vec![2]);
    }

    #[test]
    fn confirmations_promote_and_block_exit_promotes() {
        let s = RevisionSettings { stable_checks: 2, ..Default::default() };
        let mut canvas = Canvas::new(&[7], 3, 9);
        canvas.commit(1, 4, 0.5, 0, TokenState::Visible);
        canvas.commit(2, 5, 0.5, 0, TokenState::Visible);
        let mut life = Lifecycle::new(canvas.len(), s);
        assert_eq!(life.pick_checks(&canvas, 0, 4), vec![1, 2]);
        let out = RevisionOutcome {
            checks: vec![check(4, 0.95, 4, 0.95)].into_iter().map(|c| Check { pos: 1, ..c }).collect(),
            verdicts: vec![Verdict::Confirm],
            pending: None,
            forwards: 1,
            simulated_s: None,
            thread: std::thread::current().id(),
        };
        assert!(life.apply(&mut canvas, &out, 1).is_empty());
        let ch = life.apply(&mut canvas, &out, 2);
        assert_eq!(ch.len(), 1);
        assert!(ch[0].state == TokenState::Stable && !ch[0].revised);
        assert!(life.promote_block(&mut canvas, 1, 4, 3, &[2]).is_empty(), "a position still being checked waits");
        let rest = life.promote_block(&mut canvas, 1, 4, 3, &[]);
        assert_eq!(rest.iter().map(|c| c.pos).collect::<Vec<_>>(), vec![2]);
    }
}
