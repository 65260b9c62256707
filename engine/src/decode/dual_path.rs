//! NPU-aware decoding as step hooks of the one denoising loop ([`super::denoise`]): a sliding
//! execution window ([`super::window::SlidingWindows`]) with multi-block speculative lookahead
//! ([`Speculation`], [`super::speculative`]) on the dense path, and progressive revision
//! ([`CpuPath`], [`super::revision`]) on a concurrent CPU path.
//!
//! Per step:
//! 1. **Window.** Without a cache the forward is the whole canvas. With the prefix cache the
//!    block's first step is Fast-dLLM's full refresh forward; later steps forward
//!    `[frontier, end)` with `ReadWrite`, where `frontier` is the first position not in the
//!    cache (the window slides right as tokens commit) and `end` comes from the planner (block
//!    remainder, plus lookahead when the trigger fires, padded to the token bucket). After the
//!    forward the cache keeps exactly `[0, first masked position)`: those positions held their
//!    real tokens during the forward, so their K/V are fresh; positions committed by this step
//!    enter the cache in the next step's window. The dual cache slides the window the same way
//!    (tracking the fresh prefix itself) but keeps every slot valid, so the window also attends
//!    to the stale K/V of the positions right of it (Fast-dLLM's dual cache, windowed).
//!    Shifted-logit models (Dream: row p − 1 predicts p) start the window one position earlier.
//! 2. **Rows.** LM-head rows only for masked positions of the current block and (speculation)
//!    masked future positions inside the window. Visible tokens get rows only on the CPU path,
//!    Stable tokens never (selective logit skipping).
//! 3. **CPU path.** While the dense forward runs, a scoped thread runs [`RevisionWorker`] on the
//!    backend's CPU-path executor ([`crate::backend::CpuPathHost`]; inline after the dense forward
//!    when there is none).
//!    Schedule ([`CpuPathSchedule`], on the simulated device clock the backends report): *async*
//!    (default) launches a job only when the CPU path is idle; the job may outlast its dense
//!    step, the dense path never waits for it, and its verdicts are held until the first step
//!    boundary after its simulated end (validated then: a verdict applies only to a position
//!    still Visible with the token it checked; its K/V merge only where the cache still holds
//!    that token). Positions a job is still checking stay Visible when their block completes,
//!    until its verdicts land; a job still running when the run ends is dropped. *Lockstep*
//!    gives every step a job and waits for it (step = the longer path). On this machine the
//!    worker thread is joined at its own step's boundary either way, so which verdict lands when
//!    depends only on the simulated times (runs are deterministic); without simulated times
//!    (CPU backends) a job takes no device time and lands at once.
//!    *Inline* has no CPU path: the dense backend runs the job right after its forward (a step
//!    lasts both; the job's forwards count as the run's, as do those of the *final passes*, the
//!    re-checks the dense backend runs when the run ends).
//! 4. **Commit.** The base policy selects from the current block's candidates only (plus
//!    accepted drafts on the block's first step); future-block predictions become drafts.
//! 5. **Step boundary.** Revisions are applied, their K/V (side buffer in the NPU's 32×32 tile
//!    layout; on the virtual NPU the cache itself is tiled and is read and written in place)
//!    merged into the cache, and the block's Visible tokens promoted when the block completes
//!    (all but the revision look-back before the next block, which settles as the window moves
//!    past it). A revised token behind the cache frontier gets its K/V merged in place; the
//!    cached positions after it keep the K/V they had (the prefix cache's usual staleness).
//!
//! Invariants (tested in `tests/decode_speculative.rs`):
//! * No commit ever lands outside the current block; drafts are never committed while their
//!   block is not current.
//! * With acceptance off, the current block's commits at every step are exactly the base
//!   policy's `select` over the current block's candidates *of that step's forward*.
//! * Speculation touches the forward's token inputs only through the trigger extension of a
//!   windowed (prefix-cache) forward. Drafts inside the window the planner would run anyway
//!   (the whole canvas without a cache; the bucket padding with one) only add LM-head rows,
//!   which are computed row-independently, so with acceptance off those runs are token-for-token
//!   identical to speculation off — and, without a cache, to the reference loop (`denoise.rs`).
//! * Not guaranteed: when the trigger extends a windowed forward, the extra future mask tokens
//!   are attended to by the current block (bidirectional model), so its logits — and possibly
//!   its commits — differ from a run without the extension. Likewise the bucket padding itself
//!   (with speculation on or off) differs from Fast-dLLM's block-plus-whole-suffix window.

use std::thread::ThreadId;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::canvas::{Canvas, TokenState};
use super::denoise::FrameSink;
use super::frame::{CancelFlag, TokenChange};
use super::output::DecodeOutput;
use super::policy::{Candidate, Scorer};
use super::revision::{
    CpuPathEnd, CpuPathSchedule, Lifecycle, RevisionJob, RevisionOutcome, RevisionSettings, RevisionWorker,
};
use super::revision_thread::RevisionThread;
use super::settings::DecodeSettings;
use super::speculative::{accept_confident_drafts, accept_drafts, Draft, DraftBook, SpeculativeSettings};
use super::window::StepWindow;
use crate::backend::{Backend, CpuPathExecutor, ForwardStats};
use crate::error::{EngineError, Result};
use crate::model::{ForwardOutput, KvCache};

/// Seed offset of the RNG drafts are scored with, so speculation never shifts the main RNG.
const DRAFT_SEED_XOR: u64 = 0x5eed_d7af_0000_0001;

/// Whether `settings` asks for this loop.
pub fn is_enabled(settings: &DecodeSettings) -> bool {
    settings.speculative.is_some() || settings.revision.is_some()
}

/// Checks the speculative / revision knobs and the combinations this loop supports.
pub fn validate(settings: &DecodeSettings) -> Result<()> {
    if !is_enabled(settings) {
        return Ok(());
    }
    let bad = |m: &str| Err(EngineError::InvalidRequest(m.into()));
    if settings.cfg_scale > 0.0 {
        return bad("speculative decoding / revision do not support classifier-free guidance");
    }
    if let Some(r) = &settings.revision {
        r.validate()?;
    }
    Ok(())
}

/// One dense forward's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRecord {
    /// Step index.
    pub step: usize,
    /// Window `[start, end)`.
    pub start: usize,
    /// One past the window's last position.
    pub end: usize,
    /// Token count after bucket padding.
    pub padded: usize,
    /// Whether the lookahead trigger fired.
    pub lookahead: bool,
}

/// A delayed K/V merge at the end of `step`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeEvent {
    /// Step whose boundary the merge happened at.
    pub step: usize,
    /// Cache positions overwritten.
    pub positions: Vec<usize>,
}

/// A CPU-path outcome waiting for the step boundary after its simulated end (async schedule).
struct InFlight {
    outcome: RevisionOutcome,
    /// Simulated time (dense-path clock) the job ends at.
    done_at: f64,
    /// Step the job was launched at.
    step: usize,
}

impl InFlight {
    fn positions(&self) -> Vec<usize> {
        self.outcome.checks.iter().map(|c| c.pos).collect()
    }
}

/// Counters of the speculative and revision machinery (the frames carry the per-token story).
#[derive(Debug, Clone, Default)]
pub struct DualPathStats {
    /// Draft predictions recorded.
    pub drafts: usize,
    /// Drafts accepted by the acceptance rule.
    pub accepted: usize,
    /// Forwards of the revision jobs (the CPU path's work, wherever it ran).
    pub cpu_forwards: usize,
    /// Those of them that ran inline on the dense backend (no CPU-path executor, or the inline
    /// schedule): they are dense forwards too, counted in the run's forwards.
    pub inline_forwards: usize,
    /// Thread of the dense path.
    pub dense_thread: Option<ThreadId>,
    /// Threads the CPU path ran on (deduplicated).
    pub cpu_threads: Vec<ThreadId>,
    /// Whether the CPU path ran concurrently (a revision backend existed).
    pub concurrent: bool,
    /// Tokens revised.
    pub revisions: usize,
    /// Visible → Stable promotions.
    pub promotions: usize,
    /// Positions the CPU path checked, per step.
    pub checks: Vec<(usize, Vec<usize>)>,
    /// Delayed merges.
    pub merges: Vec<MergeEvent>,
    /// CPU-path outcomes applied at a later step boundary than the one of the step they were
    /// launched at (async schedule: the job outlasted its dense step).
    pub deferred: usize,
    /// Steps with Visible tokens to check that launched no job because the CPU path was busy.
    pub busy_steps: usize,
    /// Jobs still in flight when the run ended (their verdicts never landed).
    pub dropped_jobs: usize,
    /// Jobs the run waited for at its end and applied (`at_end: drain`).
    pub drained_jobs: usize,
    /// Dense forwards of the final passes (re-checks when the run ends; counted in the run's
    /// forwards too).
    pub final_pass_forwards: usize,
    /// Tokens the final passes revised (counted in `revisions` too).
    pub final_pass_revisions: usize,
    /// LM-head rows of the final passes (the Visible positions they checked).
    pub lm_head_rows_final_passes: usize,
    /// Whether the CPU path ran on its own thread for the whole run (wall-clock concurrency).
    pub threaded: bool,
    /// Whether the two paths ran in lockstep (each step waited for its CPU-path job).
    pub lockstep: bool,
    /// LM-head rows the dense forwards computed (masked positions of the current block, plus
    /// drafts' future positions): Visible and Stable tokens get none.
    pub lm_head_rows: usize,
    /// LM-head rows a forward computing logits for every position of its window would have (the
    /// difference to `lm_head_rows` is what selective logit skipping saved).
    pub lm_head_window_rows: usize,
    /// LM-head rows of the CPU path (the Visible positions its landed jobs checked).
    pub lm_head_rows_cpu_path: usize,
    /// Every dense window.
    pub windows: Vec<WindowRecord>,
    /// Token buckets in use (empty = dynamic).
    pub buckets: Vec<usize>,
}

/// Runs a generation with speculative windows and/or progressive revision (LLaDA-style models)
/// through the one denoising loop, returning the hooks' counters too.
pub fn run(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
) -> Result<(DecodeOutput, DualPathStats)> {
    let cfg = backend.config().clone();
    if !cfg.arch.is_diffusion() {
        return Err(EngineError::InvalidRequest("speculative decoding / revision need a diffusion model".into()));
    }
    settings.validate_for(&cfg, prompt)?;
    let (mut scorer, mut policy) = super::scorer_and_policy(&cfg, settings);
    super::denoise::run_loop(backend, prompt, settings, true, scorer.as_mut(), policy.as_mut(), cancel, on_frame)
}

/// Speculative decoding's step hook: drafts for masked positions of later blocks inside the
/// window, recorded with their own RNG, accepted when their block becomes current.
pub(crate) struct Speculation {
    settings: SpeculativeSettings,
    book: DraftBook,
    rng: ChaCha8Rng,
    /// Drafts of the current block, checked once against its first fresh forward.
    block_drafts: Vec<(usize, Draft)>,
}

impl Speculation {
    pub(crate) fn new(settings: SpeculativeSettings, seed: u64, len: usize) -> Self {
        Speculation {
            settings,
            book: DraftBook::new(len),
            rng: ChaCha8Rng::seed_from_u64(seed ^ DRAFT_SEED_XOR),
            block_drafts: Vec::new(),
        }
    }
    pub(crate) fn begin_block(&mut self, block: (usize, usize)) {
        self.block_drafts = self.book.take_range(block.0, block.1);
    }
    /// Masked positions of later blocks this step's forward predicts too.
    pub(crate) fn positions(&self, canvas: &Canvas, block: (usize, usize), w: &StepWindow) -> Vec<usize> {
        canvas.masked_in(block.1, w.draft_end)
    }
    /// Scores a draft row and records the prediction.
    pub(crate) fn record(
        &mut self,
        pos: usize,
        row: &mut [f64],
        scorer: &mut dyn Scorer,
        step: usize,
        stats: &mut DualPathStats,
    ) -> TokenChange {
        let (token, confidence) = scorer.score(row, &mut self.rng);
        stats.drafts += 1;
        self.book.record(pos, token, confidence, step)
    }
    /// Candidates (indices) whose drafts the acceptance rule takes this step, beside `chosen`.
    /// Aggressive acceptance rewrites those candidates to the drafted token and confidence.
    pub(crate) fn accept(
        &mut self,
        candidates: &mut [Candidate],
        chosen: &[usize],
        stats: &mut DualPathStats,
    ) -> Vec<usize> {
        let drafts = std::mem::take(&mut self.block_drafts);
        if !self.settings.accept_drafts || drafts.is_empty() {
            return Vec::new();
        }
        let accepted: Vec<usize> = match self.settings.accept_confidence {
            Some(min) => accept_confident_drafts(candidates, chosen, &drafts, min)
                .into_iter()
                .map(|(i, d)| {
                    candidates[i].token = d.token;
                    candidates[i].confidence = d.confidence;
                    i
                })
                .collect(),
            None => accept_drafts(candidates, chosen, &drafts, self.settings.accept_top_k),
        };
        stats.accepted += accepted.len();
        accepted
    }
}

/// Progressive revision's step hook: the lifecycle of committed tokens and the CPU path that
/// re-checks Visible ones beside the dense forward (see the module docs for the schedules).
pub(crate) struct CpuPath {
    life: Lifecycle,
    /// A second executor on the same weights (`None`: the CPU path runs inline after the dense
    /// forward, or on `thread`).
    executor: Option<Box<dyn CpuPathExecutor>>,
    /// The threaded schedule's worker, which owns the executor for the run.
    thread: Option<RevisionThread>,
    lockstep: bool,
    at_end: CpuPathEnd,
    in_flight: Option<InFlight>,
    /// Simulated time of the dense path (the device clock the async schedule runs on).
    clock: f64,
    /// Simulated seconds the run's end cost the dense path (waiting for a drained job, final
    /// passes).
    end_s: f64,
    /// Revision forwards the dense backend ran and the loop has not counted yet (inline jobs,
    /// final passes).
    dense_forwards: usize,
    mask: u32,
    shift: bool,
}

impl CpuPath {
    pub(crate) fn new(settings: RevisionSettings, backend: &dyn Backend, len: usize) -> Self {
        let mut executor = match settings.schedule {
            CpuPathSchedule::Inline => None,
            _ => backend.cpu_path_host().and_then(|h| h.cpu_path_executor()),
        };
        // Lockstep when asked, or when the CPU path runs inline (it then cannot overlap anything).
        let lockstep = executor.is_none() || settings.schedule == CpuPathSchedule::Lockstep;
        let mut thread = None;
        if settings.schedule == CpuPathSchedule::Threaded {
            if let Some(e) = executor.take() {
                match RevisionThread::spawn(e) {
                    Ok(t) => thread = Some(t),
                    // Without a thread the CPU path runs inline, in lockstep.
                    Err(err) => tracing::warn!("{err}; revision runs inline"),
                }
            }
        }
        let lockstep = lockstep || (settings.schedule == CpuPathSchedule::Threaded && thread.is_none());
        let at_end = settings.at_end;
        let cfg = backend.config();
        CpuPath {
            life: Lifecycle::new(len, settings),
            executor,
            thread,
            lockstep,
            at_end,
            in_flight: None,
            clock: 0.0,
            end_s: 0.0,
            dense_forwards: 0,
            mask: cfg.mask_token_id.unwrap_or(0),
            shift: cfg.shift_logits,
        }
    }
    pub(crate) fn concurrent(&self) -> bool {
        self.executor.is_some() || self.thread.is_some()
    }
    pub(crate) fn threaded(&self) -> bool {
        self.thread.is_some()
    }
    pub(crate) fn lockstep(&self) -> bool {
        self.lockstep
    }
    pub(crate) fn commit_state(&self, confidence: f64) -> TokenState {
        self.life.commit_state(confidence)
    }
    /// First position whose Visible tokens are still revisable while `block` is current.
    fn revisable_from(&self, block: (usize, usize)) -> usize {
        block.0.saturating_sub(self.life.settings().lookback)
    }

    /// The job of this step: only when the CPU path is idle (async) or every step (lockstep).
    pub(crate) fn job(
        &mut self,
        canvas: &Canvas,
        block: (usize, usize),
        kv: Option<&KvCache>,
        w: &StepWindow,
        stats: &mut DualPathStats,
    ) -> Option<RevisionJob> {
        let checks = self.life.pick_checks(canvas, self.revisable_from(block), block.1);
        if checks.is_empty() {
            return None;
        }
        if self.in_flight.is_some() || self.thread.as_ref().is_some_and(RevisionThread::busy) {
            stats.busy_steps += 1;
            return None;
        }
        Some(self.revision_job(canvas, checks, kv, w.cached_to, true))
    }

    /// A job re-checking `checks`: its window starts at the first check (or at `cached_to`, the
    /// first position whose cached K/V may be stale, if earlier); the whole canvas without a cache.
    fn revision_job(
        &self,
        canvas: &Canvas,
        checks: Vec<usize>,
        kv: Option<&KvCache>,
        cached_to: usize,
        refresh_kv: bool,
    ) -> RevisionJob {
        let src = |p: usize| if self.shift { p.saturating_sub(1) } else { p };
        let lo = if kv.is_some() { checks.first().map_or(cached_to, |&c| src(c).min(cached_to)) } else { 0 };
        RevisionJob {
            positions: checks,
            tokens: canvas.tokens().to_vec(),
            mask_id: self.mask,
            lo,
            cache: kv.cloned(),
            settings: self.life.settings().clone(),
            shift: self.shift,
            refresh_kv,
        }
    }

    /// Runs `dense` on `backend` with `job` on the CPU path beside it (a scoped thread joined
    /// before the step boundary; its verdicts may be held past it), or inline after it.
    /// With the threaded schedule the job goes to the worker thread and the dense forward runs
    /// at once; its outcome arrives at a later step boundary ([`Self::step_boundary`]).
    #[allow(clippy::type_complexity)]
    pub(crate) fn forward_beside(
        &mut self,
        job: Option<RevisionJob>,
        step: usize,
        backend: &mut dyn Backend,
        dense: &mut dyn FnMut(&mut dyn Backend) -> Result<(ForwardOutput, ForwardStats)>,
    ) -> (Result<(ForwardOutput, ForwardStats)>, Result<Option<RevisionOutcome>>) {
        if let Some(t) = self.thread.as_mut() {
            let launched = job.map_or(Ok(()), |j| t.launch(j, step));
            return (dense(backend), launched.map(|()| None));
        }
        let (dense_result, threaded, inline_job) = std::thread::scope(|s| {
            let (handle, inline_job) = match (job, self.executor.as_mut()) {
                (Some(j), Some(rb)) => {
                    rb.begin_step();
                    let rb: &mut dyn Backend = rb.as_mut();
                    (Some(s.spawn(move || RevisionWorker::run(rb, j))), None)
                }
                (j, _) => (None, j),
            };
            let d = dense(backend);
            let threaded = handle.map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(EngineError::Backend { backend: "cpu-path".into(), reason: "revision thread panicked".into() })
                })
            });
            (d, threaded, inline_job)
        });
        let outcome = match (threaded, inline_job) {
            (Some(r), _) => r.map(Some),
            (None, Some(j)) if dense_result.is_ok() => RevisionWorker::run(backend, j).map(Some),
            _ => Ok(None),
        };
        (dense_result, outcome)
    }

    /// Books the CPU path's outcome and returns the step's simulated time under the schedule.
    pub(crate) fn after_forward(
        &mut self,
        outcome: Option<RevisionOutcome>,
        dense_s: Option<f64>,
        step: usize,
        backend: &mut dyn Backend,
        stats: &mut DualPathStats,
    ) -> Option<f64> {
        let was_threaded = outcome.is_some() && self.executor.is_some();
        let cpu_s = outcome.as_ref().and_then(|o| o.simulated_s);
        let step_sim = match (dense_s, cpu_s) {
            // Async: the dense path never waits for the CPU path.
            (Some(d), _) if !self.lockstep => Some(d),
            // Lockstep: the CPU path runs beside the dense forward, the step lasts as long as the
            // longer of the two (inline revision adds to the dense path's time instead).
            (Some(d), Some(c)) if self.executor.is_some() => Some(d.max(c)),
            (Some(d), Some(c)) => Some(d + c),
            (d, c) => d.or(c),
        };
        if let Some(o) = outcome {
            book(&o, step, stats);
            if !self.concurrent() {
                stats.inline_forwards += o.forwards;
                self.dense_forwards += o.forwards;
            }
            let done_at = if self.lockstep { self.clock } else { self.clock + o.simulated_s.unwrap_or(0.0) };
            self.in_flight = Some(InFlight { outcome: o, done_at, step });
        }
        if let Some(s) = step_sim {
            self.clock += s;
        }
        if self.lockstep && was_threaded {
            if let Some(h) = backend.cpu_path_host() {
                h.sync_cpu_path();
            }
        }
        step_sim
    }

    /// The step boundary: verdicts of a job that has ended are validated and applied, revised
    /// K/V merged into the cache, and finished blocks' waiting tokens promoted.
    pub(crate) fn step_boundary(
        &mut self,
        canvas: &mut Canvas,
        kv: Option<&mut KvCache>,
        prompt_len: usize,
        block: (usize, usize),
        step: usize,
        stats: &mut DualPathStats,
    ) -> Result<Vec<TokenChange>> {
        // The worker's outcome, if it has arrived since the last boundary, lands now.
        if let Some((launched, r)) = self.thread.as_mut().and_then(RevisionThread::poll) {
            let o = r?;
            book(&o, launched, stats);
            self.in_flight = Some(InFlight { outcome: o, done_at: self.clock, step: launched });
        }
        let clock = self.clock;
        let Some(f) = self.in_flight.take_if(|f| f.done_at <= clock + 1e-12) else { return Ok(Vec::new()) };
        let o = &f.outcome;
        stats.deferred += usize::from(f.step != step);
        let mut changes = self.apply_verdicts(canvas, o, step, stats);
        if let (Some(p), Some(k)) = (o.pending.as_ref(), kv) {
            let merged = p.merge_into(k, canvas.tokens())?;
            if !merged.is_empty() {
                stats.merges.push(MergeEvent { step, positions: merged });
            }
        }
        // Tokens of finished blocks that waited for these verdicts are done now.
        let late = self.life.promote_block(canvas, prompt_len, self.revisable_from(block), step, &[]);
        stats.promotions += late.len();
        changes.extend(late);
        Ok(changes)
    }

    /// Leaving a completed block: positions an in-flight job checks wait for its verdicts,
    /// unless the run ends here (the job is then drained or dropped, as `at_end` says, and the
    /// final passes run on `backend`, the dense path).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn leave_block(
        &mut self,
        canvas: &mut Canvas,
        backend: &mut dyn Backend,
        kv: Option<&KvCache>,
        prompt_len: usize,
        block: (usize, usize),
        step: usize,
        ends_run: bool,
        stats: &mut DualPathStats,
    ) -> Result<Vec<TokenChange>> {
        let mut changes = Vec::new();
        if ends_run {
            changes = self.end_jobs(canvas, step, stats)?;
            changes.extend(self.final_passes(backend, canvas, kv, block, step, stats)?);
        }
        let mut waiting = self.in_flight.as_ref().map(InFlight::positions).unwrap_or_default();
        if let Some(t) = self.thread.as_ref() {
            waiting.extend_from_slice(t.checking());
        }
        // The next block starts at `block.1`: the look-back before it stays revisable, unless the
        // run ends here.
        let settle_to = if ends_run { block.1 } else { block.1.saturating_sub(self.life.settings().lookback) };
        let promoted = self.life.promote_block(canvas, prompt_len, settle_to, step, &waiting);
        stats.promotions += promoted.len();
        changes.extend(promoted);
        Ok(changes)
    }

    /// The run's end on the dense path: up to `final_passes` re-checks of the Visible tokens
    /// still revisable, each one forward on `backend` (inline: the run waits for it), stopping
    /// after a pass that revises nothing. Their forwards and simulated time are the run's.
    fn final_passes(
        &mut self,
        backend: &mut dyn Backend,
        canvas: &mut Canvas,
        kv: Option<&KvCache>,
        block: (usize, usize),
        step: usize,
        stats: &mut DualPathStats,
    ) -> Result<Vec<TokenChange>> {
        let mut changes = Vec::new();
        // First position whose cached K/V may not hold the canvas's token (nothing is written to
        // the cache here: a later pass feeds positions revised by an earlier one through its
        // window instead).
        let mut stale_from = kv.map_or(0, |k| k.valid_prefix_end(canvas.len()));
        let from = self.revisable_from(block);
        // Quiet passes end the re-checks once every Visible token had one since the last
        // revision (one pass unless the checks are isolated).
        let mut revised_at_pick = self.life.picks();
        for _ in 0..self.life.settings().final_passes {
            let checks = self.life.pick_checks(canvas, from, block.1);
            if checks.is_empty() {
                break;
            }
            let cache = if self.life.settings().fresh_final_passes { None } else { kv };
            let job = self.revision_job(canvas, checks, cache, stale_from, false);
            let o = RevisionWorker::run(backend, job)?;
            self.dense_forwards += o.forwards;
            self.end_s += o.simulated_s.unwrap_or(0.0);
            stats.final_pass_forwards += o.forwards;
            stats.lm_head_rows_final_passes += o.checks.len();
            let applied = self.apply_verdicts(canvas, &o, step, stats);
            let revised: Vec<usize> = applied.iter().filter(|c| c.revised).map(|c| c.pos).collect();
            stats.final_pass_revisions += revised.len();
            changes.extend(applied);
            match revised.iter().min() {
                Some(&p) => {
                    stale_from = stale_from.min(p);
                    revised_at_pick = self.life.picks();
                }
                None if !self.life.settings().isolated_checks => break,
                None if self.life.all_checked_since(canvas, from, block.1, revised_at_pick) => break,
                None => {}
            }
        }
        Ok(changes)
    }

    /// The run ends: a job still running is waited for and applied (drain) or dropped.
    fn end_jobs(&mut self, canvas: &mut Canvas, step: usize, stats: &mut DualPathStats) -> Result<Vec<TokenChange>> {
        if self.at_end == CpuPathEnd::Drain {
            if let Some((launched, r)) = self.thread.as_mut().and_then(RevisionThread::wait) {
                let o = r?;
                book(&o, launched, stats);
                self.in_flight = Some(InFlight { outcome: o, done_at: self.clock, step: launched });
            }
            if let Some(f) = self.in_flight.take() {
                // Waiting for the job's simulated end is the dense path's time too.
                let wait = (f.done_at - self.clock).max(0.0);
                self.end_s += wait;
                self.clock += wait;
                stats.drained_jobs += 1;
                stats.deferred += usize::from(f.step != step);
                let changes = self.apply_verdicts(canvas, &f.outcome, step, stats);
                return Ok(changes);
            }
            return Ok(Vec::new());
        }
        stats.dropped_jobs += usize::from(self.in_flight.take().is_some());
        stats.dropped_jobs += usize::from(self.thread.as_mut().is_some_and(RevisionThread::abandon));
        Ok(Vec::new())
    }

    /// Applies a job's verdicts (validated by the lifecycle) and counts its revisions and
    /// promotions.
    fn apply_verdicts(
        &mut self,
        canvas: &mut Canvas,
        outcome: &RevisionOutcome,
        step: usize,
        stats: &mut DualPathStats,
    ) -> Vec<TokenChange> {
        let changes = self.life.apply(canvas, outcome, step);
        stats.revisions += changes.iter().filter(|c| c.revised).count();
        stats.promotions += changes.iter().filter(|c| c.state == TokenState::Stable).count();
        changes
    }

    /// Revision forwards the dense backend ran since the last call (inline jobs, final passes):
    /// the run's too.
    pub(crate) fn take_dense_forwards(&mut self) -> usize {
        std::mem::take(&mut self.dense_forwards)
    }

    /// Simulated seconds the run's end cost the dense path (a drained job's wait, the final
    /// passes), charged to the last step.
    pub(crate) fn take_end_s(&mut self) -> f64 {
        std::mem::take(&mut self.end_s)
    }

    /// A job still in flight when the run ends (stopped early) never lands; the worker thread,
    /// if any, is joined.
    pub(crate) fn finish(&mut self, stats: &mut DualPathStats) {
        stats.dropped_jobs += usize::from(self.in_flight.take().is_some());
        stats.dropped_jobs += usize::from(self.thread.as_mut().is_some_and(RevisionThread::abandon));
        self.thread = None;
    }
}

/// Counts a CPU-path outcome (launched at `step`) in the run's stats.
fn book(o: &RevisionOutcome, step: usize, stats: &mut DualPathStats) {
    stats.cpu_forwards += o.forwards;
    if !stats.cpu_threads.contains(&o.thread) {
        stats.cpu_threads.push(o.thread);
    }
    stats.lm_head_rows_cpu_path += o.checks.len();
    stats.checks.push((step, o.checks.iter().map(|c| c.pos).collect()));
}
