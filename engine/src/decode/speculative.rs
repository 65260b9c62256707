//! Multi-block speculative decoding (MBSD, llada.cpp §7): when the current block is nearly
//! done, masked positions of the next block(s) ride along in the same forward and their
//! predictions are kept as *drafts*.
//!
//! Rules (enforced by `dual_path.rs`, tested in `tests/decode_speculative.rs`):
//! * Drafts are never committed while their block is not current; they live here, not on the
//!   canvas, and are streamed as `TokenChange { state: Masked, speculative: true }` whose `token`
//!   is the draft id.
//! * The current block's commits at a step are exactly the base policy's `select` over the
//!   current block's candidates; speculation adds LM-head rows, never candidates.
//! * Acceptance (the re-implementation's rule; the paper publishes none): on the first step a
//!   block is current its masks are re-predicted from the fresh forward; a draft is accepted
//!   (committed in addition to the base policy's choice) only if its position is in the
//!   top-`accept_top_k` fresh-confidence set of the block **and** the fresh token equals the
//!   draft token. All drafts of the block are consumed by that check (accepted or dropped).

use serde::{Deserialize, Serialize};

use super::canvas::TokenState;
use super::frame::TokenChange;
use super::policy::Candidate;
use super::sampling::order_by_score;

/// Knobs of multi-block speculative decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpeculativeSettings {
    /// Look ahead when fewer than this many masks remain in the current block (fork default 4).
    pub trigger: usize,
    /// Future positions added when the trigger fires (before bucket padding; fork default 32).
    pub max_lookahead: usize,
    /// Apply the acceptance rule (off = drafts are only shown, never used).
    pub accept_drafts: bool,
    /// Size of the top-credit confidence set a draft must fall in to be accepted.
    pub accept_top_k: usize,
    /// Aggressive acceptance: when set, a draft whose own confidence (when it was drafted) is at
    /// least this is committed as drafted on its block's first step, whether or not the block's
    /// fresh forward agrees (fewer steps; drafts made early may be wrong, which is what revision
    /// is for). `None`: the top-k rule above, which only takes drafts the fresh forward confirms.
    pub accept_confidence: Option<f64>,
    /// Token buckets to pad windows to when the backend has no cost profile (empty = exact).
    pub token_buckets: Vec<usize>,
}

impl Default for SpeculativeSettings {
    fn default() -> Self {
        SpeculativeSettings {
            trigger: 4,
            max_lookahead: 32,
            accept_drafts: true,
            accept_top_k: 2,
            accept_confidence: None,
            token_buckets: Vec::new(),
        }
    }
}

/// A speculative prediction for a position of a future block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draft {
    /// Predicted token id.
    pub token: u32,
    /// Scorer confidence of the prediction.
    pub confidence: f64,
    /// Step that produced it.
    pub step: usize,
}

/// Drafts per canvas position (the latest prediction wins).
#[derive(Debug, Clone, Default)]
pub struct DraftBook {
    drafts: Vec<Option<Draft>>,
    recorded: usize,
}

impl DraftBook {
    /// An empty book for a canvas of `len` positions.
    pub fn new(len: usize) -> Self {
        DraftBook { drafts: vec![None; len], recorded: 0 }
    }

    /// Records a draft and returns the change to stream (state stays `Masked`).
    pub fn record(&mut self, pos: usize, token: u32, confidence: f64, step: usize) -> TokenChange {
        if let Some(slot) = self.drafts.get_mut(pos) {
            *slot = Some(Draft { token, confidence, step });
            self.recorded += 1;
        }
        TokenChange {
            pos,
            token,
            confidence: confidence as f32,
            state: TokenState::Masked,
            speculative: true,
            revised: false,
            rejected_draft: None,
        }
    }

    /// The draft at `pos`, if any.
    pub fn get(&self, pos: usize) -> Option<Draft> {
        self.drafts.get(pos).copied().flatten()
    }

    /// Drafts recorded so far (re-recordings included).
    pub fn recorded(&self) -> usize {
        self.recorded
    }

    /// Removes and returns the drafts in `[start, end)`.
    pub fn take_range(&mut self, start: usize, end: usize) -> Vec<(usize, Draft)> {
        let end = end.min(self.drafts.len());
        (start.min(end)..end).filter_map(|p| self.drafts[p].take().map(|d| (p, d))).collect()
    }
}

/// The acceptance rule: indices into `candidates` (fresh predictions of the now-current block)
/// of drafts accepted on top of the base policy's `chosen`.
pub fn accept_drafts(
    candidates: &[Candidate],
    chosen: &[usize],
    drafts: &[(usize, Draft)],
    top_k: usize,
) -> Vec<usize> {
    let scores: Vec<f64> = candidates.iter().map(|c| c.confidence).collect();
    let mut accepted: Vec<usize> = order_by_score(&scores)
        .into_iter()
        .take(top_k)
        .filter(|i| !chosen.contains(i))
        .filter(|&i| {
            let c = &candidates[i];
            drafts.iter().any(|(p, d)| *p == c.pos && d.token == c.token)
        })
        .collect();
    accepted.sort_unstable();
    accepted
}

/// Aggressive acceptance: candidates (indices, beside `chosen`) whose position has a draft of
/// confidence ≥ `min_confidence`, each with that draft (to be committed as drafted).
pub fn accept_confident_drafts(
    candidates: &[Candidate],
    chosen: &[usize],
    drafts: &[(usize, Draft)],
    min_confidence: f64,
) -> Vec<(usize, Draft)> {
    candidates
        .iter()
        .enumerate()
        .filter(|(i, _)| !chosen.contains(i))
        .filter_map(|(i, c)| {
            drafts.iter().find(|(p, d)| *p == c.pos && d.confidence >= min_confidence).map(|&(_, d)| (i, d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(pos: usize, token: u32, confidence: f64) -> Candidate {
        Candidate { pos, token, confidence }
    }

    #[test]
    fn confident_drafts_are_accepted_as_drafted() {
        let c = vec![cand(10, 1, 0.9), cand(11, 2, 0.2), cand(12, 3, 0.7), cand(13, 4, 0.1)];
        let d = |t, conf| Draft { token: t, confidence: conf, step: 0 };
        // 10 is the policy's; 11's draft disagrees with the fresh forward but is confident -> taken
        // as drafted; 12's draft is not confident enough; 13 has none.
        let drafts = vec![(10, d(1, 0.99)), (11, d(7, 0.8)), (12, d(3, 0.3))];
        assert_eq!(accept_confident_drafts(&c, &[0], &drafts, 0.5), vec![(1, d(7, 0.8))]);
        assert!(accept_confident_drafts(&c, &[0], &drafts, 0.95).is_empty());
    }

    #[test]
    fn accepts_only_top_credit_matching_drafts() {
        let c = vec![cand(10, 1, 0.9), cand(11, 2, 0.8), cand(12, 3, 0.7), cand(13, 4, 0.1)];
        let d = |t| Draft { token: t, confidence: 0.5, step: 0 };
        // 10 is the policy's; 11 matches and is top-2 -> accepted; 12 matches but outside top-2;
        // 13 mismatches.
        let drafts = vec![(10, d(1)), (11, d(2)), (12, d(3)), (13, d(9))];
        assert_eq!(accept_drafts(&c, &[0], &drafts, 2), vec![1]);
        // A mismatching token is never accepted, whatever its rank.
        assert!(accept_drafts(&c, &[0], &[(11, d(7))], 4).is_empty());
    }

    #[test]
    fn book_records_and_consumes() {
        let mut b = DraftBook::new(8);
        let ch = b.record(5, 42, 0.3, 1);
        assert!(ch.speculative && ch.state == TokenState::Masked && !ch.revised);
        assert_eq!(b.get(5).map(|d| d.token), Some(42));
        assert_eq!(b.take_range(4, 8).len(), 1);
        assert!(b.get(5).is_none());
    }
}
