//! dLLM and AR decoding: the denoising loop and its policies.
//!
//! Decoding reaches models only through [`crate::backend::Backend`]. One call runs a whole
//! generation and streams a [`StepFrame`] of deltas per step:
//!
//! ```no_run
//! # use std::ops::ControlFlow;
//! # use unmask_engine::backend::Backend;
//! # use unmask_engine::decode::{generate, CancelFlag, DecodeSettings};
//! # fn demo(backend: &mut Box<dyn Backend>, prompt: &[u32]) -> unmask_engine::Result<()> {
//! let settings = DecodeSettings { gen_length: 64, block_length: 32, steps: 64, ..Default::default() };
//! let cancel = CancelFlag::new(); // clone it to another thread and call `cancel()` to stop
//! let out = generate(backend.as_mut(), prompt, &settings, &cancel, |frame| {
//!     for c in &frame.changes {
//!         println!("step {} pos {} -> {}", frame.step, c.pos, c.token);
//!     }
//!     ControlFlow::Continue(())
//! })?;
//! println!("{:?} in {} forwards", out.tokens, out.forwards);
//! # Ok(()) }
//! ```
//!
//! Which decoder runs follows the model: LLaDA / LLaDA-MoE use [`llada`]'s scorer, Dream
//! (shifted logits) [`dream`]'s, causal models [`ar`]. `settings.threshold` switches the transfer
//! rule to [`threshold`]; `settings.cache` picks the [`cache`] mode.
//!
//! NPU-aware decoding: `settings.speculative` / `settings.revision` route LLaDA-style
//! models to [`dual_path`] (sliding bucket-padded window, [`speculative`] drafts, [`revision`]
//! on a concurrent CPU path; see [`window`] and [`tiled_kv`]).

pub mod ar;
pub mod cache;
pub(crate) mod canvas;
pub(crate) mod chat;
pub(crate) mod denoise;
pub(crate) mod dream;
pub mod dual_path;
pub(crate) mod frame;
pub(crate) mod llada;
pub(crate) mod output;
pub(crate) mod policy;
pub mod revision;
pub(crate) mod revision_thread;
pub(crate) mod sampling;
pub(crate) mod settings;
pub mod spec_ar;
pub mod speculative;
pub(crate) mod threshold;
pub(crate) mod tiled_kv;
pub(crate) mod window;
pub(crate) mod working_set;

use std::ops::ControlFlow;

pub use canvas::{Canvas, TokenState};
pub use chat::{ChatReply, ChatSession};
pub use frame::{channel_sink, discard_frames, CancelFlag, StepFrame, TokenChange};
pub use output::{trim_at_stop, DecodeOutput, StopReason};
pub use policy::{Candidate, Scorer, TransferPolicy};
pub use settings::{CacheMode, DecodeSettings, DreamAlg, Remasking};
pub use working_set::WorkingSetRates;

use crate::backend::Backend;
use crate::error::Result;

/// Runs a full generation of `prompt` with the decoder that fits the backend's model, calling
/// `on_frame` after every step. Errors: `InvalidRequest` / `ContextOverflow` for bad settings,
/// `Cancelled` when `cancel` is set.
pub fn generate(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    cancel: &CancelFlag,
    mut on_frame: impl FnMut(&StepFrame) -> ControlFlow<()>,
) -> Result<DecodeOutput> {
    generate_dyn(backend, prompt, settings, cancel, &mut on_frame)
}

/// Checks a request against the model before anything is allocated for it (the decoders call
/// it too; front ends call it first so their own buffers are never sized by a bad request).
pub fn check_request(cfg: &crate::model::ModelConfig, prompt: &[u32], settings: &DecodeSettings) -> Result<()> {
    if cfg.arch.is_diffusion() {
        settings.validate_for(cfg, prompt)
    } else {
        ar::check_ar_request(cfg, prompt, settings)
    }
}

/// [`generate`] with a trait-object callback.
pub fn generate_dyn(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    cancel: &CancelFlag,
    on_frame: &mut denoise::FrameSink<'_>,
) -> Result<DecodeOutput> {
    let cfg = backend.config().clone();
    if !cfg.arch.is_diffusion() {
        return ar::generate_ar(backend, prompt, settings, cancel, on_frame);
    }
    settings.validate_for(&cfg, prompt)?;
    // NPU-aware decoding: speculative windows / progressive revision.
    if dual_path::is_enabled(settings) {
        return dual_path::run(backend, prompt, settings, cancel, on_frame).map(|(out, _)| out);
    }
    let (mut scorer, mut policy) = scorer_and_policy(&cfg, settings);
    denoise::run(backend, prompt, settings, scorer.as_mut(), policy.as_mut(), cancel, on_frame)
}

/// The scorer and transfer policy that fit `cfg` and `settings`.
pub(crate) fn scorer_and_policy(cfg: &crate::model::ModelConfig, settings: &DecodeSettings) -> (Box<dyn Scorer>, Box<dyn TransferPolicy>) {
    // The family picks scorer and schedule; which rows predict which positions is the
    // config's `shift_logits` (read by the loops), so a shifted LLaDA decodes as LLaDA.
    let dream = cfg.arch == crate::model::Architecture::Dream;
    let scorer: Box<dyn Scorer> = if dream {
        Box::new(dream::DreamScorer::new(settings))
    } else {
        Box::new(llada::LladaScorer::new(settings, settings.eos_id(&cfg), settings.eot_id(&cfg)))
    };
    let policy: Box<dyn TransferPolicy> = match settings.threshold {
        Some(t) => Box::new(threshold::ThresholdPolicy::new(t)),
        None if dream => Box::new(dream::DreamSchedule::new(settings, settings.steps_per_block())),
        None => Box::new(llada::ScheduledTopK::new(settings.steps_per_block())),
    };
    (scorer, policy)
}
