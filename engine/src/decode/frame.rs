//! Streaming: one [`StepFrame`] of deltas per denoising step, delivered to a callback, plus
//! cancellation.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::canvas::TokenState;
use crate::error::{EngineError, Result};

/// One position that changed in a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenChange {
    /// Absolute canvas position.
    pub pos: usize,
    /// New token id (the mask id when `state` is `Masked`).
    pub token: u32,
    /// Confidence the policy assigned when committing.
    pub confidence: f32,
    /// State after the change.
    pub state: TokenState,
    /// A draft for a future block (never set by the reference policies).
    pub speculative: bool,
    /// The position already held a committed token (a revision).
    pub revised: bool,
    /// Speculative AR decoding: the draft model proposed this token here and the target
    /// refused it (`token` is the target's own choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_draft: Option<u32>,
}

/// What one denoising step did: deltas only, never the whole canvas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFrame {
    /// Global step index (0-based, counts steps that ran a forward).
    pub step: usize,
    /// The current block, `[start, end)` in canvas positions.
    pub block: (usize, usize),
    /// Tokens in the forward window of this step (excluding a CFG second pass).
    pub forward_tokens: usize,
    /// Positions changed by this step.
    pub changes: Vec<TokenChange>,
    /// Wall time of the step (forwards plus policy), seconds.
    pub step_wall_s: f64,
    /// Simulated device time of the step's forwards, if the backend simulates one.
    pub simulated_s: Option<f64>,
    /// Committed generated positions after this step.
    pub committed_total: usize,
}

/// A cancellation flag shared with another thread.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// A fresh, unset flag.
    pub fn new() -> Self {
        CancelFlag::default()
    }
    /// Wraps an existing flag.
    pub fn from_arc(flag: Arc<AtomicBool>) -> Self {
        CancelFlag(flag)
    }
    /// Requests cancellation; the decoder stops before its next forward.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// `Err(Cancelled)` once cancellation was requested.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(EngineError::Cancelled)
        } else {
            Ok(())
        }
    }
    /// The shared flag itself.
    pub fn as_arc(&self) -> &Arc<AtomicBool> {
        &self.0
    }
}

/// A frame callback that sends clones of each frame down a channel; it asks the decoder to stop
/// when the receiver is gone.
pub fn channel_sink(tx: Sender<StepFrame>) -> impl FnMut(&StepFrame) -> ControlFlow<()> {
    move |frame| match tx.send(frame.clone()) {
        Ok(()) => ControlFlow::Continue(()),
        Err(_) => ControlFlow::Break(()),
    }
}

/// A frame callback that ignores every frame.
pub fn discard_frames(_: &StepFrame) -> ControlFlow<()> {
    ControlFlow::Continue(())
}
