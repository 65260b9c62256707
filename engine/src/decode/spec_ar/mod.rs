//! Speculative decoding for autoregressive (causal) models: a small draft model proposes tokens,
//! the target verifies several in one forward, and the output is the target's own: identical
//! greedy tokens, and under sampling the same distribution ([`accept`]).
//!
//! Three schedules, same outputs:
//! - [`SpecSchedule::Sync`]: draft a fixed number of tokens, verify, repeat (the baseline).
//! - [`SpecSchedule::Adaptive`]: the same loop, drafting stops early by the draft's entropy
//!   (AdaEDL's bound) and the entropy-history control ([`control::EntropyHistoryControl`]).
//! - [`SpecSchedule::Async`]: drafter and verifier are independent tasks on two threads with
//!   bounded queues between them ([`pipelined`]): the drafter keeps drafting beyond the block
//!   under verification, verdicts flow back and invalidate what a rejection made stale, and the
//!   time-aware control ([`control::PreVerifyControl`]) decides how far ahead to draft.
//!
//! The target's K/V is rolled back exactly on rejection (entries past the last accepted token
//! are invalidated); the drafter keeps its own K/V and its own view of the sequence.

pub(crate) mod accept;
pub mod control;
mod pipelined;
pub(crate) mod state;
pub mod trace;

use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use self::control::{acceptance_bound, EntropyHistoryControl};
use self::state::{Drafter, Verified, Verifier};
use self::trace::{SpecTask, SpecTrace};
use super::ar::{check_ar_request, ArPrefixCache};
use super::canvas::{Canvas, TokenState};
use super::denoise::FrameSink;
use super::frame::{CancelFlag, StepFrame};
use super::output::{DecodeOutput, StopReason};
use super::settings::DecodeSettings;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::model::{KernelChoice, Transformer};

/// How drafting and verification are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SpecSchedule {
    /// Fixed-length drafts, then verification, in turn on one thread.
    Sync,
    /// Drafts that stop by entropy and history, in turn on one thread.
    Adaptive,
    /// Drafter and verifier on two threads with queues between them.
    #[default]
    Async,
}

impl std::fmt::Display for SpecSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SpecSchedule::Sync => "sync",
            SpecSchedule::Adaptive => "adaptive",
            SpecSchedule::Async => "async",
        })
    }
}

/// The knobs of speculative AR decoding. The `specar` benchmark sweeps them (draft length per
/// schedule, each control on and off); the defaults are the asynchronous design with AHASD's
/// controls, which the sweep has not yet shown to be fastest on a 2-core CPU with the embedded
/// pair (there the synchronous schedule with short drafts measures best; docs/benchmarks.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpecArSettings {
    pub schedule: SpecSchedule,
    /// Drafts per verification: the fixed length of `sync`, the most `adaptive` drafts and the
    /// most one asynchronous verification takes.
    pub draft_len: usize,
    /// Drafts per entropy-history batch (the unit the history control decides on).
    pub batch: usize,
    /// `async`: most drafts ahead of verification (the draft queue's bound).
    pub max_ahead: usize,
    /// Entropy range of the history control's 8 bins, nats.
    pub h_max: f64,
    /// AdaEDL's γ in the acceptance bound `1 − √(γ·H)`.
    pub gamma: f64,
    /// Drafting stops after a draft whose acceptance bound is below this (0 = never).
    pub stop_bound: f64,
    /// `async` pre-verification: drop drafts once the estimated probability that all unverified
    /// drafts are accepted falls below this (0 = off).
    pub pre_verify_floor: f64,
    /// Use the entropy-history control (`adaptive`, `async`).
    pub history_control: bool,
    /// Use the time-aware control (`async`).
    pub time_control: bool,
    /// `async`: the verifier's thread pool spans every kernel thread, so while the drafter waits
    /// for a verdict (most of the time with a cheap draft) its core verifies too; while both
    /// work, the OS shares that core between them. `false`: the verifier gets the threads but
    /// one and the drafter's core stays its own.
    pub verifier_shares_cores: bool,
}

impl Default for SpecArSettings {
    fn default() -> Self {
        SpecArSettings {
            schedule: SpecSchedule::Async,
            draft_len: 4,
            batch: 2,
            max_ahead: 16,
            h_max: 8.0,
            gamma: 0.2,
            stop_bound: 0.0,
            pre_verify_floor: 0.0,
            history_control: true,
            time_control: true,
            verifier_shares_cores: true,
        }
    }
}

impl SpecArSettings {
    /// Checks the settings are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if self.draft_len == 0 || self.draft_len > 64 {
            return bad(format!("draft_len must be 1..=64, got {}", self.draft_len));
        }
        if self.batch == 0 || self.batch > self.draft_len.max(self.max_ahead) {
            return bad(format!("batch must be 1..=max(draft_len, max_ahead), got {}", self.batch));
        }
        if self.max_ahead == 0 || self.max_ahead > 256 {
            return bad(format!("max_ahead must be 1..=256, got {}", self.max_ahead));
        }
        for (name, v) in [("gamma", self.gamma), ("stop_bound", self.stop_bound), ("pre_verify_floor", self.pre_verify_floor)] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} must be in [0, 1], got {v}"));
            }
        }
        if !(self.h_max.is_finite() && self.h_max > 0.0) {
            return bad(format!("h_max must be positive, got {}", self.h_max));
        }
        Ok(())
    }
}

/// What speculation did in one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecArStats {
    pub schedule: Option<SpecSchedule>,
    /// Target forwards (verifications).
    pub verify_forwards: usize,
    /// Draft model forwards.
    pub draft_forwards: usize,
    /// Tokens the drafter produced.
    pub drafted: usize,
    /// Drafts the verifier judged.
    pub offered: usize,
    /// Drafts the verifier accepted.
    pub accepted: usize,
    /// Verifications that rejected a draft.
    pub rejections: usize,
    /// Drafts produced but never judged (made stale by a rejection, dropped by
    /// pre-verification, or left over at the end).
    pub discarded: usize,
    /// Drafts the drafter removed from its view because a verdict contradicted them (judged
    /// or not).
    pub rolled_back: usize,
    /// Drafts dropped by pre-verification.
    pub pre_dropped: usize,
    /// `async`: seconds the verifier waited for drafts.
    pub verifier_wait_s: f64,
    /// `async`: seconds the drafter waited for verdicts.
    pub drafter_wait_s: f64,
    /// When each draft and verification ran (measured), for the profiler; not stored with the
    /// counters (the run's timeline holds it).
    #[serde(skip)]
    pub trace: SpecTrace,
}

impl SpecArStats {
    /// Accepted drafts over judged drafts.
    pub fn acceptance_rate(&self) -> f64 {
        if self.offered == 0 {
            0.0
        } else {
            self.accepted as f64 / self.offered as f64
        }
    }
    /// Drafted tokens that were not accepted (rejected or never judged).
    pub fn wasted(&self) -> usize {
        self.drafted.saturating_sub(self.accepted)
    }
}

/// K/V kept between calls for the target and the draft (AR chat: a later turn forwards only
/// its new suffix on both models).
#[derive(Debug, Clone, Default)]
pub struct SpecArCaches {
    pub target: ArPrefixCache,
    pub draft: ArPrefixCache,
}

impl SpecArCaches {
    pub fn clear(&mut self) {
        self.target.clear();
        self.draft.clear();
    }
}

/// Generates up to `settings.gen_length` tokens after `prompt` with `target`, speculating with
/// `draft`, stopping after EOS/EOT. One frame per verification.
#[allow(clippy::too_many_arguments)]
pub fn generate_speculative(
    target: &mut dyn Backend,
    draft: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    spec: &SpecArSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
    reuse: &mut SpecArCaches,
) -> Result<(DecodeOutput, SpecArStats)> {
    let cfg = target.config().clone();
    check_ar_request(&cfg, prompt, settings)?;
    spec.validate()?;
    check_pair(target.config(), draft.config())?;
    super::settings::check_fits(draft.config(), prompt.len(), settings)?;
    let capacity = prompt.len() + settings.gen_length + 1;
    let mut run = RunState::new(&cfg, prompt, settings);
    let mut verifier = Verifier::new(target, prompt, capacity, &mut reuse.target);
    let mut drafter = Drafter::new(draft, prompt, capacity, &mut reuse.draft);
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut stats = SpecArStats { schedule: Some(spec.schedule), ..Default::default() };
    match spec.schedule {
        SpecSchedule::Sync | SpecSchedule::Adaptive => {
            run_in_turn(&mut verifier, &mut drafter, settings, spec, cancel, on_frame, &mut run, &mut stats, &mut rng)?
        }
        SpecSchedule::Async => {
            pipelined::run(&mut verifier, &mut drafter, settings, spec, cancel, on_frame, &mut run, &mut stats, &mut rng)?
        }
    }
    stats.discarded = stats.drafted.saturating_sub(stats.offered + stats.pre_dropped);
    stats.verify_forwards = verifier.forwards;
    stats.draft_forwards = drafter.forwards;
    let (draft_cache, draft_fed, draft_seq) = drafter.into_cache();
    reuse.draft.store(draft_cache, &draft_seq[..draft_fed]);
    let (cache, fed, seq) = verifier.into_cache();
    reuse.target.store(cache, &seq[..fed]);
    Ok((run.finish(stats.verify_forwards), stats))
}

/// The draft as speculative decoding runs it: every matrix on the int8 kernels (one scale per
/// output row). A draft only proposes tokens and the target decides every one, so the draft's
/// precision changes how often it is accepted, never the output; what speculation needs is a
/// cheap draft token. Measured on the 2-core dev machine: the SmolLM2 draft
/// (`models/smollm2-draft`, its 49,152 x 128 head dominating) costs 0.78 ms per token on f32
/// panels and 0.21 ms on int8, against SmolLM2's ~8 ms.
pub fn draft_on_int8(draft: &Transformer) -> Result<Transformer> {
    let weights = draft.weights.clone().repack(KernelChoice::Int8PerRow)?;
    Ok(Transformer::new(draft.config.clone(), weights))
}

/// A target/draft pair speculative decoding can run: both causal, one vocabulary.
pub fn check_pair(target: &crate::model::ModelConfig, draft: &crate::model::ModelConfig) -> Result<()> {
    if target.arch.is_diffusion() {
        return Err(EngineError::InvalidRequest(
            "speculative decoding with a draft model is for autoregressive models; this model is a diffusion model".into(),
        ));
    }
    if draft.arch.is_diffusion() {
        return Err(EngineError::InvalidRequest("the draft model must be autoregressive (causal), not a diffusion model".into()));
    }
    if target.vocab != draft.vocab {
        return Err(EngineError::InvalidRequest(format!(
            "the draft model's vocabulary ({} tokens) differs from the target's ({} tokens); speculative decoding needs the same tokenizer",
            draft.vocab, target.vocab
        )));
    }
    Ok(())
}

/// The generated region as it is committed: canvas, tokens, frames and the stop rule.
pub(crate) struct RunState {
    canvas: Canvas,
    tokens: Vec<u32>,
    stop_ids: Vec<u32>,
    gen_length: usize,
    prompt_len: usize,
    frames: usize,
    steps: usize,
    simulated: Option<f64>,
    stop: Option<StopReason>,
    t0: Instant,
}

impl RunState {
    fn new(cfg: &crate::model::ModelConfig, prompt: &[u32], settings: &DecodeSettings) -> Self {
        let placeholder = cfg.pad_token_id.or(cfg.eos_token_id).unwrap_or(0);
        RunState {
            canvas: Canvas::new(prompt, settings.gen_length, placeholder),
            tokens: Vec::new(),
            stop_ids: [settings.eos_id(cfg), settings.eot_id(cfg)].into_iter().flatten().collect(),
            gen_length: settings.gen_length,
            prompt_len: prompt.len(),
            frames: 0,
            steps: 0,
            simulated: None,
            stop: None,
            t0: Instant::now(),
        }
    }

    fn done(&self) -> bool {
        self.stop.is_some()
    }

    /// Generated tokens still to come.
    fn remaining(&self) -> usize {
        self.gen_length - self.tokens.len()
    }

    /// Commits a verification's tokens (cut at a stop token or the length limit), sends its
    /// frame, and cuts the verifier's sequence back if the cut dropped some.
    fn commit(&mut self, v: &Verified, verifier: &mut Verifier<'_>, on_frame: &mut FrameSink<'_>) {
        let mut changes = Vec::with_capacity(v.emitted.len());
        let first = self.prompt_len + self.tokens.len();
        for (i, (&t, &conf)) in v.emitted.iter().zip(&v.confidence).enumerate() {
            if self.done() {
                break;
            }
            let pos = self.prompt_len + self.tokens.len();
            let mut change = self.canvas.commit(pos, t, conf, self.steps, TokenState::Stable);
            // Marks a token that came from the draft (accepted) for the live view.
            change.speculative = i < v.accepted;
            // The token written where the draft was refused carries that draft.
            change.rejected_draft = v.rejected_draft.filter(|_| i == v.accepted);
            changes.push(change);
            self.tokens.push(t);
            if self.stop_ids.contains(&t) {
                self.stop = Some(StopReason::Eos);
            } else if self.tokens.len() == self.gen_length {
                self.stop = Some(StopReason::Completed);
            }
        }
        verifier.truncate(self.prompt_len + self.tokens.len());
        if let Some(s) = v.simulated_s {
            *self.simulated.get_or_insert(0.0) += s;
        }
        let frame = StepFrame {
            step: self.steps,
            block: (first, self.prompt_len + self.tokens.len()),
            forward_tokens: v.forward_tokens,
            changes,
            step_wall_s: v.wall_s,
            simulated_s: v.simulated_s,
            committed_total: self.tokens.len(),
        };
        self.steps += 1;
        self.frames += 1;
        if on_frame(&frame).is_break() && self.stop.is_none() {
            self.stop = Some(StopReason::CallerStopped);
        }
    }

    fn finish(self, forwards: usize) -> DecodeOutput {
        let n = self.tokens.len();
        DecodeOutput {
            tokens: self.tokens,
            steps: self.steps,
            forwards,
            tokens_per_forward: if forwards > 0 { n as f64 / forwards as f64 } else { 0.0 },
            wall_s: self.t0.elapsed().as_secs_f64(),
            simulated_s: self.simulated,
            frames: self.frames,
            stop_reason: self.stop.unwrap_or(StopReason::Completed),
            canvas: self.canvas,
        }
    }
}

/// `sync` and `adaptive`: draft, then verify, on the calling thread.
#[allow(clippy::too_many_arguments)]
fn run_in_turn(
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
    let adaptive = spec.schedule == SpecSchedule::Adaptive;
    let mut history = EntropyHistoryControl::new(spec.h_max);
    while !run.done() {
        cancel.check()?;
        stats.rolled_back += drafter.sync_to(&verifier.seq);
        // The bonus token of a fully accepted round still has to fit.
        let k_max = spec.draft_len.min(run.remaining() - 1);
        let mut drafts = Vec::with_capacity(k_max);
        while drafts.len() < k_max {
            let t = Instant::now();
            let d = drafter.draft(settings, rng)?;
            stats.trace.span(run.t0, t, SpecTask::Draft, d.pos, 0, 0);
            let h = d.entropy;
            drafts.push(d);
            if adaptive {
                if spec.stop_bound > 0.0 && acceptance_bound(h, spec.gamma) < spec.stop_bound {
                    break;
                }
                if spec.history_control && drafts.len().is_multiple_of(spec.batch) {
                    let batch = &drafts[drafts.len() - spec.batch..];
                    history.record_batch(batch.iter().map(|d| d.entropy).sum::<f64>() / spec.batch as f64);
                    if !history.keep_drafting(drafts.len() / spec.batch) {
                        break;
                    }
                }
            }
        }
        stats.drafted += drafts.len();
        stats.trace.queue_depth.push((run.t0.elapsed().as_secs_f64(), drafts.len()));
        let t = Instant::now();
        let v = verifier.verify(&drafts, true, settings, rng)?;
        stats.trace.span(run.t0, t, SpecTask::Verify, v.forward_tokens, v.offered, v.accepted);
        stats.trace.record_verdicts(drafts.iter().map(|d| d.entropy), v.offered, v.accepted);
        stats.offered += v.offered;
        stats.accepted += v.accepted;
        if v.accepted < v.offered {
            stats.rejections += 1;
        }
        if adaptive && spec.history_control {
            history.on_verified(v.accepted == v.offered);
        }
        run.commit(&v, verifier, on_frame);
    }
    Ok(())
}
