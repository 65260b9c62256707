//! The asynchronous schedule: drafter and verifier as independent tasks on two threads.
//!
//! ```text
//!   drafter thread ──(bounded queue: drafts)──▶ verifier (calling thread)
//!         ▲                                          │
//!         └───────────(queue: verdicts)──────────────┘
//! ```
//! The drafter drafts ahead of verification while its controls allow; every draft carries the
//! hash of the sequence it continues, so the verifier recognises drafts a rejection made stale
//! and skips them. Verdicts carry the newly committed tokens; the drafter keeps the drafts that
//! agree with them and rolls back its K/V past the first that does not. Each side runs its
//! kernels in a thread pool of its own: the drafter one thread, the verifier every thread by
//! default (work-conserving: a cheap drafter waits for verdicts most of the time, and its core
//! would otherwise idle), or all but the drafter's (`verifier_shares_cores: false`).

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::control::{acceptance_bound, EntropyHistoryControl, PreVerifyControl};
use super::state::{Draft, Drafter, PrefixHashes, Verifier};
use super::trace::{SpecTask, SpecTrace};
use super::{RunState, SpecArSettings, SpecArStats};
use crate::decode::denoise::FrameSink;
use crate::decode::frame::{CancelFlag, StepFrame};
use crate::decode::settings::DecodeSettings;
use crate::error::{EngineError, Result};

/// A verdict sent back to the drafter.
enum Verdict {
    /// `tokens` were committed at positions `from..`; `full` = every judged draft was accepted.
    Committed { from: usize, tokens: Vec<u32>, full: bool, verify_s: f64, verify_tokens: usize },
    /// Generation is over.
    Stop,
}

/// What each side publishes for the other's time-aware decisions.
#[derive(Default)]
struct Clocks {
    /// The verifier's running call: (tokens, start).
    verifier: Mutex<Option<(usize, Instant)>>,
    /// The drafter is blocked waiting for a verdict (it will draft nothing more until one).
    drafter_waiting: AtomicBool,
    /// The drafter's mean seconds per draft token (f64 bits; 0 = not known yet).
    draft_s: AtomicU64,
}

type VerifierClock = Arc<Clocks>;

/// What the drafter thread reports when it ends.
#[derive(Default)]
struct DrafterReport {
    drafted: usize,
    rolled_back: usize,
    pre_dropped: usize,
    wait_s: f64,
    /// The drafter's spans.
    trace: SpecTrace,
}

/// The two thread pools of one asynchronous run: one thread for the drafter, every thread or the
/// rest for the verifier (kernels called inside a pool use only its threads). Each run builds its
/// own: both loops block inside their pool while waiting for the other side, so two concurrent
/// runs that shared one-thread pools would each hold the thread the other needs and never finish.
fn task_pools(threads: usize, verifier_shares_cores: bool) -> Result<(rayon::ThreadPool, rayon::ThreadPool)> {
    let pool = |n: usize, name: &'static str| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .map_err(|e| EngineError::Backend { backend: "spec-async".into(), reason: format!("thread pool: {e}") })
    };
    let verifier_threads = if verifier_shares_cores { threads } else { threads.saturating_sub(1) };
    Ok((pool(1, "drafter")?, pool(verifier_threads.max(1), "verifier")?))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    verifier: &mut Verifier<'_>,
    drafter: &mut Drafter<'_>,
    settings: &DecodeSettings,
    spec: &SpecArSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
    run: &mut RunState,
    stats: &mut SpecArStats,
    rng: &mut ChaCha8Rng,
) -> Result<()> {
    let threads = crate::threads::count();
    let (draft_pool, verify_pool) = task_pools(threads, spec.verifier_shares_cores)?;
    let (draft_pool, verify_pool) = (&draft_pool, &verify_pool);
    let (draft_tx, draft_rx) = mpsc::sync_channel::<Draft>(spec.max_ahead);
    let (verdict_tx, verdict_rx) = mpsc::channel::<Verdict>();
    let clock: VerifierClock = Arc::new(Clocks::default());
    let end = run.prompt_len + run.gen_length;
    let committed0 = verifier.seq.clone();
    let draft_seed = settings.seed ^ 0x9e37_79b9_7f4a_7c15;
    let t0 = run.t0;

    let (frame_tx, frame_rx) = mpsc::channel::<StepFrame>();
    let caller_stopped = AtomicBool::new(false);

    let stats_v = &mut *stats;
    let report = std::thread::scope(|s| {
        let drafter_clock = clock.clone();
        let drafter_task = s.spawn(move || {
            let mut draft_rng = ChaCha8Rng::seed_from_u64(draft_seed);
            draft_pool.install(|| {
                draft_loop(drafter, committed0, end, settings, spec, draft_tx, verdict_rx, drafter_clock, cancel, &mut draft_rng, t0)
            })
        });
        let stopped = &caller_stopped;
        let verifier_task = s.spawn(move || {
            verify_pool.install(move || {
                // Frames go to the calling thread, which owns the (not `Send`) frame sink.
                let mut sink = |f: &StepFrame| {
                    let _ = frame_tx.send(f.clone());
                    if stopped.load(Ordering::Relaxed) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                };
                let r = verify_loop(verifier, settings, spec, cancel, &mut sink, run, stats_v, rng, &draft_rx, &verdict_tx, &clock);
                // Ends the drafter whether it waits for a verdict or on a full queue.
                let _ = verdict_tx.send(Verdict::Stop);
                drop(draft_rx);
                r
            })
        });
        for frame in frame_rx {
            if on_frame(&frame).is_break() {
                caller_stopped.store(true, Ordering::Relaxed);
            }
        }
        let panicked = |_| EngineError::Backend { backend: "spec-async".into(), reason: "a speculative decoding thread panicked".into() };
        let verified = verifier_task.join().map_err(panicked)?;
        let report = drafter_task.join().map_err(panicked)?;
        verified?;
        report
    })?;
    let r = report;
    stats.drafted += r.drafted;
    stats.rolled_back += r.rolled_back;
    stats.pre_dropped += r.pre_dropped;
    stats.drafter_wait_s += r.wait_s;
    stats.trace.merge(r.trace);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn verify_loop(
    verifier: &mut Verifier<'_>,
    settings: &DecodeSettings,
    spec: &SpecArSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
    run: &mut RunState,
    stats: &mut SpecArStats,
    rng: &mut ChaCha8Rng,
    draft_rx: &mpsc::Receiver<Draft>,
    verdict_tx: &mpsc::Sender<Verdict>,
    clock: &VerifierClock,
) -> Result<()> {
    let mut held: VecDeque<Draft> = VecDeque::new();
    let mut drafter_gone = false;
    let mut verify_cost = super::control::CostPredictor::default();
    // Running estimate of the per-draft acceptance probability.
    let mut alpha = 0.6;
    while !run.done() {
        cancel.check()?;
        // Wait for a draft that continues the committed sequence.
        let wait0 = Instant::now();
        loop {
            while held.front().is_some_and(|d| !verifier.continues(d)) {
                held.pop_front();
            }
            if !held.is_empty() {
                break;
            }
            if drafter_gone {
                return Err(EngineError::Backend { backend: "spec-async".into(), reason: "the drafter stopped early".into() });
            }
            match draft_rx.recv_timeout(Duration::from_millis(20)) {
                Ok(d) => held.push_back(d),
                Err(RecvTimeoutError::Timeout) => cancel.check()?,
                // The drafter ended (an error it reports when joined).
                Err(RecvTimeoutError::Disconnected) => drafter_gone = true,
            }
        }
        loop {
            match draft_rx.try_recv() {
                Ok(d) => held.push_back(d),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    drafter_gone = true;
                    break;
                }
            }
        }
        // Time-aware batch size: wait for more drafts while the expected tokens per second of
        // the call grow with them (the drafter is still drafting and the gain beats the wait).
        let take = spec.draft_len.min(run.remaining());
        if spec.time_control {
            let target_k = super::control::worthwhile_batch(alpha, verify_cost.per_token(), f64::from_bits(clock.draft_s.load(Ordering::Relaxed)), held.len(), take);
            while held.len() < target_k && !drafter_gone && !clock.drafter_waiting.load(Ordering::Acquire) {
                cancel.check()?;
                match draft_rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(d) => held.push_back(d),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => drafter_gone = true,
                }
            }
        }
        stats.verifier_wait_s += wait0.elapsed().as_secs_f64();
        stats.trace.queue_depth.push((run.t0.elapsed().as_secs_f64(), held.len()));
        // The contiguous run of drafts that continue the committed sequence, one after another.
        let mut batch: Vec<Draft> = Vec::with_capacity(take);
        let mut parent = None::<u64>;
        while batch.len() < take {
            let Some(d) = held.front() else { break };
            let fits = match (batch.last(), parent) {
                (None, _) => verifier.continues(d),
                (Some(prev), Some(h)) => d.pos == prev.pos + 1 && d.parent == PrefixHashes::step(h, prev.token),
                _ => false,
            };
            if !fits {
                break;
            }
            parent = Some(d.parent);
            if let Some(d) = held.pop_front() {
                batch.push(d);
            }
        }
        let from = verifier.seq.len();
        let tokens_in = batch.len() + 1;
        if let Ok(mut c) = clock.verifier.lock() {
            *c = Some((tokens_in, Instant::now()));
        }
        let t = Instant::now();
        let v = verifier.verify(&batch, false, settings, rng)?;
        stats.trace.span(run.t0, t, SpecTask::Verify, v.forward_tokens, v.offered, v.accepted);
        stats.trace.record_verdicts(batch.iter().map(|d| d.entropy), v.offered, v.accepted);
        if let Ok(mut c) = clock.verifier.lock() {
            *c = None;
        }
        verify_cost.record(v.wall_s, 1);
        if v.offered > 0 {
            // Per-draft acceptance, as the i.i.d. model of Leviathan §3 counts it.
            let per_draft = v.accepted as f64 / (v.accepted + usize::from(v.accepted < v.offered)) as f64;
            alpha = 0.8 * alpha + 0.2 * per_draft;
        }
        stats.offered += v.offered;
        stats.accepted += v.accepted;
        let full = v.accepted == v.offered;
        if !full {
            stats.rejections += 1;
        }
        let _ = verdict_tx.send(Verdict::Committed {
            from,
            tokens: v.emitted.clone(),
            full,
            verify_s: v.wall_s,
            verify_tokens: v.forward_tokens,
        });
        run.commit(&v, verifier, on_frame);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn draft_loop(
    drafter: &mut Drafter<'_>,
    committed: Vec<u32>,
    end: usize,
    settings: &DecodeSettings,
    spec: &SpecArSettings,
    draft_tx: mpsc::SyncSender<Draft>,
    verdict_rx: mpsc::Receiver<Verdict>,
    clock: VerifierClock,
    cancel: &CancelFlag,
    rng: &mut ChaCha8Rng,
    t0: Instant,
) -> Result<DrafterReport> {
    let mut side = DrafterSide {
        committed,
        ahead_h: Vec::new(),
        report: DrafterReport::default(),
        history: EntropyHistoryControl::new(spec.h_max),
        timing: PreVerifyControl::default(),
    };
    loop {
        if cancel.is_cancelled() {
            return Ok(side.report);
        }
        // Verdicts that arrived while drafting.
        loop {
            match verdict_rx.try_recv() {
                Ok(v) => {
                    if !side.apply(v, drafter, spec) {
                        return Ok(side.report);
                    }
                }
                Err(TryRecvError::Disconnected) => return Ok(side.report),
                Err(TryRecvError::Empty) => break,
            }
        }
        let ahead = drafter.view_len().saturating_sub(side.committed.len());
        let running = clock.verifier.lock().ok().and_then(|c| c.map(|(n, t)| (n, t.elapsed().as_secs_f64())));
        let mut want = drafter.view_len() < end && ahead < spec.max_ahead;
        if want && ahead > 0 {
            if spec.time_control {
                want = ahead < side.timing.ahead_budget(running, spec.batch, 1, spec.max_ahead);
            }
            if want && spec.stop_bound > 0.0 {
                want = side.ahead_h.last().is_none_or(|&h| acceptance_bound(h, spec.gamma) >= spec.stop_bound);
            }
            if want && spec.history_control && ahead.is_multiple_of(spec.batch) {
                want = side.history.keep_drafting(ahead / spec.batch);
            }
        }
        if !want {
            if !side.wait_for_verdict(drafter, spec, &verdict_rx, &clock) {
                return Ok(side.report);
            }
            continue;
        }
        let start = Instant::now();
        let d = drafter.draft(settings, rng)?;
        side.timing.draft.record(start.elapsed().as_secs_f64(), 1);
        side.report.trace.span(t0, start, SpecTask::Draft, d.pos, 0, 0);
        if let Some(per) = side.timing.draft.per_token() {
            clock.draft_s.store(per.to_bits(), Ordering::Relaxed);
        }
        side.report.drafted += 1;
        side.ahead_h.push(d.entropy);
        if spec.history_control && side.ahead_h.len().is_multiple_of(spec.batch) {
            let b = &side.ahead_h[side.ahead_h.len() - spec.batch..];
            side.history.record_batch(b.iter().sum::<f64>() / spec.batch as f64);
        }
        // Pre-verification, only with slack before the verifier is free: a draft past the
        // point where all unverified drafts are unlikely to be accepted is dropped unsent, and
        // nothing more is worth drafting until a verdict arrives.
        if spec.time_control
            && spec.pre_verify_floor > 0.0
            && side.ahead_h.len() > 1
            && side.timing.slack_s(running).is_some_and(|s| s > 0.0)
            && super::control::pre_verified_len(&side.ahead_h, spec.gamma, spec.pre_verify_floor) < side.ahead_h.len()
        {
            drafter.truncate(d.pos);
            side.ahead_h.pop();
            side.report.pre_dropped += 1;
            if !side.wait_for_verdict(drafter, spec, &verdict_rx, &clock) {
                return Ok(side.report);
            }
            continue;
        }
        if draft_tx.send(d).is_err() {
            return Ok(side.report);
        }
    }
}

/// The drafter thread's view of verification: what is committed, the entropies of the drafts
/// ahead of it, and the controls verdicts train.
struct DrafterSide {
    committed: Vec<u32>,
    ahead_h: Vec<f64>,
    report: DrafterReport,
    history: EntropyHistoryControl,
    timing: PreVerifyControl,
}

impl DrafterSide {
    /// Blocks until a verdict arrives and applies it; false = generation is over.
    fn wait_for_verdict(&mut self, drafter: &mut Drafter<'_>, spec: &SpecArSettings, rx: &mpsc::Receiver<Verdict>, clock: &Clocks) -> bool {
        let w0 = Instant::now();
        clock.drafter_waiting.store(true, Ordering::Release);
        let got = rx.recv();
        clock.drafter_waiting.store(false, Ordering::Release);
        self.report.wait_s += w0.elapsed().as_secs_f64();
        got.is_ok_and(|v| self.apply(v, drafter, spec))
    }

    /// Applies a verdict; false = generation is over.
    fn apply(&mut self, v: Verdict, drafter: &mut Drafter<'_>, spec: &SpecArSettings) -> bool {
        let Verdict::Committed { from, tokens, full, verify_s, verify_tokens } = v else { return false };
        let old_committed = self.committed.len();
        self.committed.truncate(from);
        self.committed.extend_from_slice(&tokens);
        self.report.rolled_back += drafter.sync_to(&self.committed);
        // Entropies of drafts now committed leave the front; those of dropped drafts the back.
        let skip = self.committed.len().saturating_sub(old_committed).min(self.ahead_h.len());
        self.ahead_h.drain(..skip);
        self.ahead_h.truncate(drafter.view_len().saturating_sub(self.committed.len()));
        if spec.history_control {
            self.history.on_verified(full);
        }
        self.timing.verify.record(verify_s, verify_tokens);
        true
    }
}
