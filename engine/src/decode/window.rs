//! Execution-window sizing for static-shape accelerators: a window starts at the first position
//! not yet in the KV cache, covers the rest of the current block, grows by a lookahead when the
//! block is nearly done, and is padded up to the next compiled token bucket (the padding is
//! paid for anyway, so it is filled with real future positions instead of pad tokens).
//!
//! With a cost profile the buckets come from the backend: drafts then fill the padding at every
//! step for free, and the settings' `trigger` only decides when to pay for a larger bucket
//! (`max_lookahead` more positions). Without one (CPU), `token_buckets` from the settings apply
//! (empty = exact windows, lookahead only when triggered).

use super::cache::{DecodeCache, ForwardPlan};
use super::settings::{CacheMode, DecodeSettings};
use super::speculative::SpeculativeSettings;
use crate::backend::{Backend, CostProfile};
use crate::model::{KvCache, KvMode};

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

/// The forward of one step: window `[start, end)` of the canvas and how it uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepWindow {
    pub start: usize,
    pub end: usize,
    pub kv: KvMode,
    /// The block-start forward that (re)builds the cache.
    pub refresh: bool,
    /// Tokens after bucket padding.
    pub padded: usize,
    /// Whether the speculative lookahead extended it.
    pub lookahead: bool,
    /// Where drafts of later blocks may come from (the planner's span, within the window).
    pub draft_end: usize,
    /// First position without fresh cached K/V (0 without a cache).
    pub cached_to: usize,
}

/// Chooses each step's window and keeps the K/V cache valid: the one seam between the denoising
/// loop and its caches.
pub trait WindowPolicy {
    /// The window of step `step_in_block` (0 = block start) of `block` on a canvas of `len`
    /// positions whose block still has `masked` positions.
    fn plan(&mut self, step_in_block: usize, block: (usize, usize), len: usize, masked: &[usize]) -> StepWindow;
    /// Updates validity after the forward of `w` (`first_masked`: the block's first mask then).
    fn after_forward(&mut self, w: &StepWindow, block: (usize, usize), first_masked: usize);
    fn kv(&self) -> Option<&KvCache>;
    fn kv_mut(&mut self) -> Option<&mut KvCache>;
    /// Token buckets windows are padded to (empty = exact windows).
    fn buckets(&self) -> &[usize] {
        &[]
    }
}

/// The reference windows: the whole canvas, or Fast-dLLM's prefix / dual cache windows.
pub struct BlockWindows(DecodeCache);

impl BlockWindows {
    pub fn new(backend: &dyn Backend, mode: CacheMode, len: usize) -> Self {
        BlockWindows(DecodeCache::new(backend, mode, len))
    }
}

impl WindowPolicy for BlockWindows {
    fn plan(&mut self, step_in_block: usize, block: (usize, usize), len: usize, _masked: &[usize]) -> StepWindow {
        let p = self.0.plan(step_in_block, block, len);
        StepWindow {
            start: p.start,
            end: p.end,
            kv: p.kv,
            refresh: p.refresh,
            padded: p.end - p.start,
            lookahead: false,
            draft_end: p.end,
            cached_to: 0,
        }
    }
    fn after_forward(&mut self, w: &StepWindow, block: (usize, usize), _first_masked: usize) {
        let plan = ForwardPlan { start: w.start, end: w.end, kv: w.kv, refresh: w.refresh };
        self.0.after_forward(&plan, block);
    }
    fn kv(&self) -> Option<&KvCache> {
        self.0.kv()
    }
    fn kv_mut(&mut self) -> Option<&mut KvCache> {
        self.0.kv_mut()
    }
}

/// The NPU-aware windows. Without a cache the whole canvas. With the prefix cache the block's
/// first step is Fast-dLLM's full refresh; later steps forward `[frontier, end)` with
/// `ReadWrite`, `frontier` being the first position not in the cache (the window slides right as
/// tokens commit) and `end` the planner's (block remainder, plus lookahead when the trigger
/// fires, padded to the token bucket); after the forward the cache keeps exactly
/// `[0, first masked position)`. The dual cache slides the same way but keeps every slot valid,
/// so the window also attends to the stale K/V right of it. Shifted-logit models (Dream) start
/// the window one position earlier.
pub struct SlidingWindows {
    planner: WindowPlanner,
    kv: Option<KvCache>,
    dual: bool,
    shift: bool,
    /// First position whose cached K/V is not fresh (dual cache).
    fresh_to: usize,
}

impl SlidingWindows {
    pub fn new(backend: &dyn Backend, settings: &DecodeSettings, len: usize) -> Self {
        let no_lookahead = SpeculativeSettings { trigger: 0, max_lookahead: 0, ..Default::default() };
        let spec = settings.speculative.as_ref().unwrap_or(&no_lookahead);
        SlidingWindows {
            planner: WindowPlanner::new(backend.cost_profile().as_ref(), spec),
            kv: (settings.cache != CacheMode::None).then(|| backend.new_cache(len)),
            dual: settings.cache == CacheMode::Dual,
            shift: backend.config().shift_logits,
            fresh_to: 0,
        }
    }
}

impl WindowPolicy for SlidingWindows {
    fn plan(&mut self, step_in_block: usize, block: (usize, usize), len: usize, masked: &[usize]) -> StepWindow {
        let first_masked = masked.first().copied().unwrap_or(block.1);
        let cached = self.kv.is_some();
        let refresh = cached && step_in_block == 0;
        let cached_to = match self.kv.as_ref() {
            Some(_) if self.dual => self.fresh_to,
            Some(k) => k.valid_prefix_end(len),
            None => 0,
        };
        let frontier = if cached && !refresh { cached_to.min(first_masked) } else { first_masked };
        let span = self.planner.plan(frontier, block.1, len, masked.len());
        let src = if self.shift { frontier.saturating_sub(1) } else { frontier };
        let (start, end, kv) = match (cached, refresh) {
            (false, _) => (0, len, KvMode::Ignore),
            (true, true) => (0, len, KvMode::ReadWrite),
            (true, false) => (src, span.end, KvMode::ReadWrite),
        };
        StepWindow {
            start,
            end,
            kv,
            refresh,
            padded: self.planner.pad(end - start),
            lookahead: span.lookahead,
            draft_end: span.end.min(end),
            cached_to,
        }
    }
    fn after_forward(&mut self, _w: &StepWindow, _block: (usize, usize), first_masked: usize) {
        // The window's K/V up to the first mask were computed from real tokens.
        match self.kv.as_mut() {
            Some(_) if self.dual => self.fresh_to = first_masked,
            Some(k) => k.invalidate_from(first_masked),
            None => {}
        }
    }
    fn kv(&self) -> Option<&KvCache> {
        self.kv.as_ref()
    }
    fn kv_mut(&mut self) -> Option<&mut KvCache> {
        self.kv.as_mut()
    }
    fn buckets(&self) -> &[usize] {
        self.planner.buckets()
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
