//! The canvas: prompt ‖ generated region, with a life-cycle state per position.

use serde::{Deserialize, Serialize};

use super::frame::TokenChange;

/// Where a position is in its life cycle.
///
/// The reference decoders (LLaDA, Dream, threshold, AR) never revise a committed token, so they
/// commit straight to `Stable`. `Visible` is for committed-but-revisable tokens of later
/// policies (progressive revision); prompt positions are `Stable` from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenState {
    /// Still the mask token.
    Masked,
    /// Committed, may still be revised.
    Visible,
    /// Final.
    Stable,
}

/// Token ids plus per-position state, commit step and confidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Canvas {
    tokens: Vec<u32>,
    states: Vec<TokenState>,
    commit_step: Vec<Option<usize>>,
    confidence: Vec<f32>,
    prompt_len: usize,
    mask_id: u32,
}

impl Canvas {
    /// `prompt` followed by `gen_length` masks.
    pub fn new(prompt: &[u32], gen_length: usize, mask_id: u32) -> Self {
        let n = prompt.len() + gen_length;
        let mut tokens = prompt.to_vec();
        tokens.resize(n, mask_id);
        let mut states = vec![TokenState::Stable; prompt.len()];
        states.resize(n, TokenState::Masked);
        Canvas {
            tokens,
            states,
            commit_step: vec![None; n],
            confidence: vec![f32::NAN; n],
            prompt_len: prompt.len(),
            mask_id,
        }
    }

    /// Total positions (prompt + generated).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    /// True when there are no positions at all.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
    /// Length of the prompt.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    /// The mask token id.
    pub fn mask_id(&self) -> u32 {
        self.mask_id
    }
    /// All token ids (masks included).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// Token ids of the generated region.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }
    /// State of position `p`.
    pub fn state(&self, p: usize) -> TokenState {
        self.states[p]
    }
    /// Step at which position `p` was last committed.
    pub fn commit_step(&self, p: usize) -> Option<usize> {
        self.commit_step[p]
    }
    /// Confidence recorded when position `p` was committed (NaN if never).
    pub fn confidence(&self, p: usize) -> f32 {
        self.confidence[p]
    }
    /// Whether position `p` is still masked.
    pub fn is_masked(&self, p: usize) -> bool {
        self.states[p] == TokenState::Masked
    }
    /// Masked positions in `[start, end)`, increasing.
    pub fn masked_in(&self, start: usize, end: usize) -> Vec<usize> {
        (start..end.min(self.len())).filter(|&p| self.is_masked(p)).collect()
    }
    /// Number of committed generated positions.
    pub fn committed_total(&self) -> usize {
        (self.prompt_len..self.len()).filter(|&p| !self.is_masked(p)).count()
    }

    /// Commits `token` at `pos` and returns the change to stream.
    pub fn commit(&mut self, pos: usize, token: u32, confidence: f32, step: usize, state: TokenState) -> TokenChange {
        let revised = !self.is_masked(pos);
        self.tokens[pos] = token;
        self.states[pos] = state;
        self.commit_step[pos] = Some(step);
        self.confidence[pos] = confidence;
        TokenChange { pos, token, confidence, state, speculative: false, revised, rejected_draft: None }
    }

    /// Applies a streamed change (replaying frames rebuilds the canvas).
    pub fn apply(&mut self, change: &TokenChange, step: usize) {
        if change.pos >= self.len() {
            return;
        }
        self.tokens[change.pos] = if change.state == TokenState::Masked { self.mask_id } else { change.token };
        self.states[change.pos] = change.state;
        self.commit_step[change.pos] = Some(step);
        self.confidence[change.pos] = change.confidence;
    }
}
