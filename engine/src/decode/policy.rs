//! The two pluggable halves of a denoising step.
//!
//! * A [`Scorer`] (per model family: `llada.rs`, `dream.rs`) turns the logits row of one masked
//!   position into a proposed token and a confidence.
//! * A [`TransferPolicy`] (`llada.rs` fixed schedule, `dream.rs` timestep schedule,
//!   `threshold.rs` confidence threshold) decides which proposals are committed this step.
//!
//! The loop in `denoise.rs` owns the canvas, the forwards and the cache and calls both.

use rand_chacha::ChaCha8Rng;

/// A proposal for one masked position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Absolute canvas position.
    pub pos: usize,
    /// Proposed token id.
    pub token: u32,
    /// Score used to rank positions (higher = commit first); may be −inf.
    pub confidence: f64,
}

/// Turns a logits row into (token, confidence).
pub trait Scorer {
    /// Scores one masked position. `logits` is the row predicting that position (after CFG and
    /// Dream's shift) and may be modified in place.
    fn score(&mut self, logits: &mut [f64], rng: &mut ChaCha8Rng) -> (u32, f64);
}

/// Decides, step by step, which masked positions of the current block get committed.
pub trait TransferPolicy {
    /// Short name for traces.
    fn name(&self) -> &'static str;
    /// A new block starts with `n_masked` masked positions.
    fn begin_block(&mut self, n_masked: usize);
    /// Called before each step's forward with the block's current mask count; `false` means the
    /// step would commit nothing, so the loop skips its forward (and its RNG draws).
    fn next_step(&mut self, n_masked: usize) -> bool;
    /// Indices into `candidates` (one per masked block position, increasing position) to commit.
    fn select(&mut self, candidates: &[Candidate], rng: &mut ChaCha8Rng) -> Vec<usize>;
}
