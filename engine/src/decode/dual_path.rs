//! The NPU-aware decoding loop: a sliding execution window with multi-block
//! speculative lookahead ([`super::speculative`], sized by [`super::window`]) on the dense path,
//! and progressive revision ([`super::revision`]) on a concurrent CPU path.
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
//!    backend's `revision_backend()` (inline after the dense forward when there is none).
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
//! 4. **Commit.** The base policy selects from the current block's candidates only (plus
//!    accepted drafts on the block's first step); future-block predictions become drafts.
//! 5. **Step boundary.** Revisions are applied, their K/V (side buffer in the NPU's 32×32 tile
//!    layout; on the virtual NPU the cache itself is tiled and is read and written in place)
//!    merged into the cache, and the block's Visible tokens promoted when the block completes.
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
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::canvas::{Canvas, TokenState};
use super::denoise::{to_rows, FrameSink};
use super::frame::{CancelFlag, StepFrame};
use super::output::{DecodeOutput, StopReason};
use super::policy::Candidate;
use super::revision::{CpuPathSchedule, Lifecycle, RevisionJob, RevisionOutcome, RevisionWorker};
use super::settings::{CacheMode, DecodeSettings};
use super::speculative::{accept_drafts, DraftBook, SpeculativeSettings};
use super::window::WindowPlanner;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvMode};

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
    /// Forwards run by the CPU path.
    pub cpu_forwards: usize,
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
    /// Whether the two paths ran in lockstep (each step waited for its CPU-path job).
    pub lockstep: bool,
    /// Every dense window.
    pub windows: Vec<WindowRecord>,
    /// Token buckets in use (empty = dynamic).
    pub buckets: Vec<usize>,
}

/// Runs a generation with speculative windows and/or progressive revision (LLaDA-style models).
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
    // Dream predicts position p from row p − 1: windows reach one position further left.
    let shift = cfg.shift_logits;
    let src = |p: usize| if shift { p.saturating_sub(1) } else { p };
    settings.validate_for(&cfg, prompt)?;
    let mask = cfg
        .mask_token_id
        .ok_or_else(|| EngineError::InvalidRequest("diffusion decoding needs a mask token id".into()))?;
    let (mut scorer, mut policy) = super::scorer_and_policy(&cfg, settings);
    let stop_ids: Vec<u32> = [settings.eos_id(&cfg), settings.eot_id(&cfg)].into_iter().flatten().collect();
    let no_lookahead = SpeculativeSettings { trigger: 0, max_lookahead: 0, ..Default::default() };
    let spec = settings.speculative.clone();
    let planner = WindowPlanner::new(backend.cost_profile().as_ref(), spec.as_ref().unwrap_or(&no_lookahead));

    let t0 = Instant::now();
    let mut canvas = Canvas::new(prompt, settings.gen_length, mask);
    let len = canvas.len();
    let positions: Vec<usize> = (0..len).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut draft_rng = ChaCha8Rng::seed_from_u64(settings.seed ^ DRAFT_SEED_XOR);
    // Both caches slide the window's left edge to the first position without fresh K/V; the dual
    // cache also keeps the (stale) K/V of everything right of the window valid.
    let cached = settings.cache != CacheMode::None;
    let dual = settings.cache == CacheMode::Dual;
    let mut kv = cached.then(|| backend.new_cache(len));
    // First position whose cached K/V is not fresh (dual cache; the prefix cache keeps exactly
    // its fresh prefix valid, so it reads this from validity).
    let mut fresh_to = 0usize;
    let mut rev_backend = settings.revision.as_ref().and_then(|_| backend.revision_backend());
    let mut life = settings.revision.clone().map(|r| Lifecycle::new(len, r));
    let mut book = DraftBook::new(len);
    let mut stats = DualPathStats {
        dense_thread: Some(std::thread::current().id()),
        concurrent: rev_backend.is_some(),
        buckets: planner.buckets().to_vec(),
        ..Default::default()
    };
    let (mut steps, mut forwards, mut frames) = (0usize, 0usize, 0usize);
    let mut simulated: Option<f64> = None;
    let mut stop_reason = StopReason::Completed;
    // Lockstep when asked, or when the CPU path runs inline (it then cannot overlap anything).
    let lockstep = rev_backend.is_none() || settings.revision.as_ref().is_some_and(|r| r.schedule == CpuPathSchedule::Lockstep);
    stats.lockstep = lockstep;
    let mut in_flight: Option<InFlight> = None;
    // Simulated time of the dense path (the device clock the async schedule runs on).
    let mut clock = 0.0f64;
    let max_skips = settings.steps.max(1) + 1;

    'blocks: for b in 0..settings.num_blocks() {
        let block = (prompt.len() + b * settings.block_length, prompt.len() + (b + 1) * settings.block_length);
        let mut masked = canvas.masked_in(block.0, block.1);
        policy.begin_block(masked.len());
        // Drafts for this block are checked once, against its first fresh forward.
        let mut block_drafts = book.take_range(block.0, block.1);
        let (mut step_in_block, mut skips) = (0usize, 0usize);
        while let Some(&first_masked) = masked.first() {
            cancel.check()?;
            if !policy.next_step(masked.len()) {
                skips += 1;
                if skips > max_skips {
                    return Err(EngineError::InvalidRequest(format!("policy {} made no progress", policy.name())));
                }
                continue;
            }
            let step_t0 = Instant::now();
            let step = steps;
            let refresh = cached && step_in_block == 0;
            // First position without fresh K/V (for the prefix cache: the first invalid one, the
            // cache always being a contiguous prefix).
            let cached_to = match kv.as_ref() {
                Some(_) if dual => fresh_to,
                Some(k) => (0..len).find(|&p| !k.is_valid(p)).unwrap_or(len),
                None => 0,
            };
            let frontier = if cached && !refresh { cached_to.min(first_masked) } else { first_masked };
            let span = planner.plan(frontier, block.1, len, masked.len());
            let (win_start, win_end, mode) = match (cached, refresh) {
                (false, _) => (0, len, KvMode::Ignore),
                (true, true) => (0, len, KvMode::ReadWrite),
                (true, false) => (src(frontier), span.end, KvMode::ReadWrite),
            };
            let draft_pos = if spec.is_some() { canvas.masked_in(block.1, span.end.min(win_end)) } else { Vec::new() };
            let rows: Vec<usize> = masked.iter().chain(&draft_pos).map(|&p| src(p) - win_start).collect();
            // The CPU path takes a job only when idle (async) or every step (lockstep).
            let checks = life.as_ref().map(|l| l.pick_checks(&canvas, block.0, block.1)).unwrap_or_default();
            if !checks.is_empty() && in_flight.is_some() {
                stats.busy_steps += 1;
            }
            let job = (!checks.is_empty() && in_flight.is_none()).then(|| {
                let lo = if cached { checks.first().map_or(cached_to, |&c| src(c).min(cached_to)) } else { 0 };
                RevisionJob {
                    positions: checks,
                    tokens: canvas.tokens().to_vec(),
                    mask_id: mask,
                    lo,
                    cache: kv.clone(),
                    settings: life.as_ref().map(|l| l.settings().clone()).unwrap_or_default(),
                    shift,
                }
            });
            let req = ForwardRequest {
                tokens: &canvas.tokens()[win_start..win_end],
                positions: &positions[win_start..win_end],
                logits_rows: &rows,
                kv: mode,
            };
            // Dense path here, CPU path on a scoped thread; the thread is joined before the step
            // boundary (its verdicts may be held past it: see the schedule in the module docs).
            let (dense, threaded, inline_job) = std::thread::scope(|s| {
                let (handle, inline_job) = match (job, rev_backend.as_mut()) {
                    (Some(j), Some(rb)) => {
                        rb.begin_step();
                        (Some(s.spawn(move || RevisionWorker::run(rb.as_mut(), j))), None)
                    }
                    (j, _) => (None, j),
                };
                let dense = backend.forward(&req, kv.as_mut());
                let threaded = handle.map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(EngineError::Backend { backend: "cpu-path".into(), reason: "revision thread panicked".into() })
                    })
                });
                (dense, threaded, inline_job)
            });
            let (out, fstats) = dense?;
            forwards += 1;
            match kv.as_mut() {
                // The window's K/V up to the first mask were computed from real tokens.
                Some(_) if dual => fresh_to = first_masked,
                Some(k) => k.invalidate_from(first_masked),
                None => {}
            }
            let was_threaded = threaded.is_some();
            let outcome: Option<RevisionOutcome> = match (threaded, inline_job) {
                (Some(r), _) => Some(r?),
                (None, Some(j)) => Some(RevisionWorker::run(backend, j)?),
                (None, None) => None,
            };
            let cpu_s = outcome.as_ref().and_then(|o| o.simulated_s);
            let step_sim = match (fstats.simulated_s, cpu_s) {
                // Async: the dense path never waits for the CPU path.
                (Some(d), _) if !lockstep => Some(d),
                // Lockstep: the CPU path runs beside the dense forward, the step lasts as long as
                // the longer of the two (inline revision adds to the dense path's time instead).
                (Some(d), Some(c)) if stats.concurrent => Some(d.max(c)),
                (Some(d), Some(c)) => Some(d + c),
                (d, c) => d.or(c),
            };
            if let Some(o) = outcome {
                stats.cpu_forwards += o.forwards;
                if !stats.cpu_threads.contains(&o.thread) {
                    stats.cpu_threads.push(o.thread);
                }
                stats.checks.push((step, o.checks.iter().map(|c| c.pos).collect()));
                let done_at = if lockstep { clock } else { clock + o.simulated_s.unwrap_or(0.0) };
                in_flight = Some(InFlight { outcome: o, done_at, step });
            }
            if let Some(s) = step_sim {
                *simulated.get_or_insert(0.0) += s;
                clock += s;
            }
            if lockstep && was_threaded {
                backend.sync_cpu_path();
            }

            let mut logits = to_rows(&out.logits, out.vocab, rows.len(), backend.name())?.into_iter();
            let candidates: Vec<Candidate> = masked
                .iter()
                .zip(&mut logits)
                .map(|(&pos, mut row)| {
                    let (token, confidence) = scorer.score(&mut row, &mut rng);
                    Candidate { pos, token, confidence }
                })
                .collect();
            let mut changes = Vec::new();
            for (&pos, mut row) in draft_pos.iter().zip(logits) {
                let (token, confidence) = scorer.score(&mut row, &mut draft_rng);
                changes.push(book.record(pos, token, confidence, step));
                stats.drafts += 1;
            }
            let mut chosen: Vec<usize> = policy.select(&candidates, &mut rng).into_iter().filter(|&i| i < candidates.len()).collect();
            if let Some(sp) = spec.as_ref().filter(|sp| sp.accept_drafts && !block_drafts.is_empty()) {
                let accepted = accept_drafts(&candidates, &chosen, &block_drafts, sp.accept_top_k);
                stats.accepted += accepted.len();
                chosen.extend(accepted);
            }
            block_drafts.clear();
            chosen.sort_by_key(|&i| candidates[i].pos);
            chosen.dedup();
            for c in chosen.iter().map(|&i| candidates[i]) {
                let state = life.as_ref().map_or(TokenState::Stable, |l| l.commit_state(c.confidence));
                changes.push(canvas.commit(c.pos, c.token, c.confidence as f32, step, state));
            }

            // Step boundary: the CPU-path verdicts whose job has ended, then the delayed K/V merge.
            let ready = in_flight.take_if(|f| f.done_at <= clock + 1e-12);
            if let (Some(l), Some(f)) = (life.as_mut(), ready.as_ref()) {
                let o = &f.outcome;
                stats.deferred += usize::from(f.step != step);
                let applied = l.apply(&mut canvas, o, step);
                stats.revisions += applied.iter().filter(|c| c.revised).count();
                stats.promotions += applied.iter().filter(|c| c.state == TokenState::Stable).count();
                changes.extend(applied);
                if let (Some(p), Some(k)) = (o.pending.as_ref(), kv.as_mut()) {
                    let merged = p.merge_into(k, canvas.tokens())?;
                    if !merged.is_empty() {
                        stats.merges.push(MergeEvent { step, positions: merged });
                    }
                }
                // Tokens of finished blocks that waited for these verdicts are done now.
                let late = l.promote_block(&mut canvas, prompt.len(), block.0, step, &[]);
                stats.promotions += late.len();
                changes.extend(late);
            }
            masked = canvas.masked_in(block.0, block.1);
            if masked.is_empty() {
                if let Some(l) = life.as_mut() {
                    // Leaving the block: positions an in-flight job checks wait for its verdicts,
                    // unless the run ends here (the job is then dropped).
                    let ends_run = b + 1 == settings.num_blocks()
                        || (settings.early_stop_eos && block.1 > block.0 && stop_ids.contains(&canvas.tokens()[block.1 - 1]));
                    if ends_run && in_flight.take().is_some() {
                        stats.dropped_jobs += 1;
                    }
                    let waiting = in_flight.as_ref().map(InFlight::positions).unwrap_or_default();
                    let promoted = l.promote_block(&mut canvas, prompt.len(), block.1, step, &waiting);
                    stats.promotions += promoted.len();
                    changes.extend(promoted);
                }
            }
            stats.windows.push(WindowRecord { step, start: win_start, end: win_end, padded: planner.pad(win_end - win_start), lookahead: span.lookahead });
            let frame = StepFrame {
                step,
                block,
                forward_tokens: win_end - win_start,
                changes,
                step_wall_s: step_t0.elapsed().as_secs_f64(),
                simulated_s: step_sim,
                committed_total: canvas.committed_total(),
            };
            steps += 1;
            frames += 1;
            step_in_block += 1;
            if on_frame(&frame).is_break() {
                stop_reason = StopReason::CallerStopped;
                break 'blocks;
            }
        }
        if settings.early_stop_eos && block.1 > block.0 && stop_ids.contains(&canvas.tokens()[block.1 - 1]) {
            stop_reason = StopReason::Eos;
            break;
        }
    }

    if in_flight.take().is_some() {
        stats.dropped_jobs += 1;
    }
    let fill = settings.eos_id(&cfg).unwrap_or(mask);
    let tokens: Vec<u32> = (prompt.len()..len).map(|p| if canvas.is_masked(p) { fill } else { canvas.tokens()[p] }).collect();
    let committed = canvas.committed_total();
    let out = DecodeOutput {
        tokens,
        steps,
        forwards,
        tokens_per_forward: if forwards > 0 { committed as f64 / forwards as f64 } else { 0.0 },
        wall_s: t0.elapsed().as_secs_f64(),
        simulated_s: simulated,
        frames,
        stop_reason,
        canvas,
    };
    Ok((out, stats))
}
