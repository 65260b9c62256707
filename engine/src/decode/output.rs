//! What a decoding run returns.

use serde::{Deserialize, Serialize};

use super::canvas::Canvas;

/// Why decoding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every generated position was decoded (dLLM) or `gen_length` tokens were produced (AR).
    Completed,
    /// A block ended in EOS/EOT with `early_stop_eos` (dLLM), or EOS/EOT was produced (AR).
    Eos,
    /// The frame callback returned `ControlFlow::Break`.
    CallerStopped,
}

/// Result of one decoding run.
#[derive(Debug, Clone)]
pub struct DecodeOutput {
    /// Generated token ids (the whole generated region; after an early stop, positions never
    /// decoded are filled with EOS). Text is the caller's business (the tokenizer is outside).
    pub tokens: Vec<u32>,
    /// Denoising steps that ran (AR: tokens produced).
    pub steps: usize,
    /// Model forwards, counting a CFG pass as a separate forward.
    pub forwards: usize,
    /// Committed generated tokens per forward.
    pub tokens_per_forward: f64,
    /// Wall time of the whole run, seconds.
    pub wall_s: f64,
    /// Simulated device time summed over forwards, if the backend simulates one.
    pub simulated_s: Option<f64>,
    /// Frames delivered to the callback.
    pub frames: usize,
    /// Why decoding ended.
    pub stop_reason: StopReason,
    /// The final canvas (prompt ‖ generated, with per-position state).
    pub canvas: Canvas,
}

/// The prefix of `tokens` before the first of `stop_ids`.
pub fn trim_at_stop<'a>(tokens: &'a [u32], stop_ids: &[u32]) -> &'a [u32] {
    let end = tokens.iter().position(|t| stop_ids.contains(t)).unwrap_or(tokens.len());
    &tokens[..end]
}
