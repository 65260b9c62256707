//! Execution-window sizing for static-shape accelerators: a window starts at the first position
//! not yet in the KV cache, covers the rest of the current block, grows by a lookahead when the
//! block is nearly done, and is padded up to the next compiled token bucket (the padding is
//! paid for anyway, so it is filled with real future positions instead of pad tokens).
//!
//! With a cost profile the buckets come from the backend: drafts then fill the padding at every
//! step for free, and the settings' `trigger` only decides when to pay for a larger bucket
//! (`max_lookahead` more positions). Without one (CPU), `token_buckets` from the settings apply
//! (empty = exact windows, lookahead only when triggered).

use crate::backend::CostProfile;

use super::speculative::SpeculativeSettings;

/// The span `[start, end)` one dense forward covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpan {
    /// First canvas position of the window.
    pub start: usize,
    /// One past the last position (clipped to the canvas).
    pub end: usize,
    /// Token count the device pays for (`end − start` padded to the bucket).
    pub padded: usize,
    /// Whether the trigger fired and the window was extended beyond the current block.
    pub lookahead: bool,
}

/// Picks window spans from token buckets (backend profile, else settings) and the trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowPlanner {
    buckets: Vec<usize>,
    trigger: usize,
    max_lookahead: usize,
}

impl WindowPlanner {
    /// Buckets come from `profile` when it has any (a static-shape backend), else from the
    /// settings (CPU: empty = exact windows); trigger and lookahead come from the settings.
    pub fn new(profile: Option<&CostProfile>, spec: &SpeculativeSettings) -> Self {
        let mut buckets = match profile {
            Some(p) if !p.token_buckets.is_empty() => p.token_buckets.clone(),
            _ => spec.token_buckets.clone(),
        };
        buckets.retain(|&b| b > 0);
        buckets.sort_unstable();
        buckets.dedup();
        WindowPlanner { buckets, trigger: spec.trigger, max_lookahead: spec.max_lookahead }
    }

    /// The bucket sizes in use (ascending; empty = dynamic shapes).
    pub fn buckets(&self) -> &[usize] {
        &self.buckets
    }

    /// Smallest bucket holding `n` tokens; `n` itself when no bucket is large enough (the
    /// backend then runs an unpadded or split call, which it accounts for itself).
    pub fn pad(&self, n: usize) -> usize {
        self.buckets.iter().copied().find(|&b| b >= n).unwrap_or(n)
    }

    /// The window for a step whose first uncached position is `start`, current block ending at
    /// `block_end`, `masked_in_block` masks left in the block, canvas of `len` positions.
    pub fn plan(&self, start: usize, block_end: usize, len: usize, masked_in_block: usize) -> WindowSpan {
        let needed = block_end.saturating_sub(start).max(1);
        let lookahead = masked_in_block < self.trigger && block_end < len && self.max_lookahead > 0;
        let want = if lookahead { needed + self.max_lookahead } else { needed };
        // Never let the lookahead push the window into a bucket larger than the biggest one that
        // exists: fall back to the bucket of the block remainder alone.
        let padded = match self.buckets.last() {
            Some(&largest) if want > largest && needed <= largest => self.pad(needed),
            _ => self.pad(want),
        };
        let end = (start + padded).min(len);
        WindowSpan { start, end, padded, lookahead }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planner(buckets: Vec<usize>) -> WindowPlanner {
        let spec = SpeculativeSettings { trigger: 4, max_lookahead: 8, ..Default::default() };
        WindowPlanner::new(Some(&CostProfile { token_buckets: buckets, launch_overhead_s: 1e-3 }), &spec)
    }

    #[test]
    fn pads_to_next_bucket() {
        let p = planner(vec![32, 8, 16]);
        assert_eq!(p.buckets(), &[8, 16, 32]);
        assert_eq!(p.pad(5), 8);
        assert_eq!(p.pad(9), 16);
        assert_eq!(p.pad(40), 40);
    }

    #[test]
    fn trigger_extends_then_pads() {
        let p = planner(vec![8, 16, 32]);
        // 6 masks left (>= trigger): window = block remainder padded.
        assert_eq!(p.plan(10, 16, 100, 6), WindowSpan { start: 10, end: 18, padded: 8, lookahead: false });
        // 2 masks left: remainder 6 + lookahead 8 = 14 -> bucket 16.
        assert_eq!(p.plan(10, 16, 100, 2), WindowSpan { start: 10, end: 26, padded: 16, lookahead: true });
        // Clipped at the canvas end.
        assert_eq!(p.plan(10, 16, 20, 2).end, 20);
    }

    #[test]
    fn no_profile_uses_settings_buckets() {
        let spec = SpeculativeSettings { token_buckets: vec![4], ..Default::default() };
        assert_eq!(WindowPlanner::new(None, &spec).pad(3), 4);
        let empty = CostProfile { token_buckets: vec![], launch_overhead_s: 0.0 };
        assert_eq!(WindowPlanner::new(Some(&empty), &spec).pad(3), 4);
    }
}
