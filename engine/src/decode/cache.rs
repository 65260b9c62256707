//! Block-wise approximate KV caching between denoising steps (Fast-dLLM), as an engine object
//! that decides each step's forward window and KV mode and maintains the cache.
//!
//! * `None`: every step forwards the whole canvas, no cache.
//! * `Prefix`: the first step of a block forwards the whole canvas with `ReadWrite`, then the
//!   cache is truncated to `[0, block_start)`; later steps forward `[block_start, len)` (block plus
//!   all later masks) with `Read`. The prefix K/V are stale until the next block.
//! * `Dual`: the block-start forward caches everything; later steps forward only
//!   `[block_start, block_end)` with `ReadWrite`, overwriting the block's slots; prefix and suffix
//!   K/V are stale until the next block.
//!
//! Shifted-logit models (Dream) need row `block_start − 1` to predict the block's first token, so
//! their windows start one position earlier; that position's K/V are recomputed in the window
//! (overriding, and for `Dual` overwriting, the cached slot).
//!
//! Extension points for later work: [`DecodeCache::plan`] is the only place that picks windows,
//! and [`DecodeCache::after_forward`] the only place that edits validity after a forward
//! (delayed merges, partial refreshes belong there).

use crate::backend::Backend;
use crate::model::{KvCache, KvMode};

use super::settings::CacheMode;

/// The forward one step runs: window `[start, end)` of the canvas and how it uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardPlan {
    /// First canvas position of the window.
    pub start: usize,
    /// One past the last position of the window.
    pub end: usize,
    /// KV mode of the forward.
    pub kv: KvMode,
    /// Whether this is the block-start forward that (re)builds the cache.
    pub refresh: bool,
}

/// Cache state of one decoding run.
#[derive(Debug)]
pub struct DecodeCache {
    mode: CacheMode,
    shift: bool,
    kv: Option<KvCache>,
}

impl DecodeCache {
    /// A cache for a canvas of `len` positions (none allocated for `CacheMode::None`).
    pub fn new(backend: &dyn Backend, mode: CacheMode, len: usize) -> Self {
        let kv = (mode != CacheMode::None).then(|| backend.new_cache(len));
        DecodeCache { mode, shift: backend.config().shift_logits, kv }
    }

    /// The cache mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// The KV cache, when one is kept.
    pub fn kv(&self) -> Option<&KvCache> {
        self.kv.as_ref()
    }

    /// The KV cache, when one is kept.
    pub fn kv_mut(&mut self) -> Option<&mut KvCache> {
        self.kv.as_mut()
    }

    /// The window and mode for step `step_in_block` (0 = block start) of block `[bs, be)` on a
    /// canvas of `len` positions.
    pub fn plan(&self, step_in_block: usize, block: (usize, usize), len: usize) -> ForwardPlan {
        let (bs, be) = block;
        let start = if self.shift { bs.saturating_sub(1) } else { bs };
        match self.mode {
            CacheMode::None => ForwardPlan { start: 0, end: len, kv: KvMode::Ignore, refresh: false },
            _ if step_in_block == 0 => ForwardPlan { start: 0, end: len, kv: KvMode::ReadWrite, refresh: true },
            CacheMode::Prefix => ForwardPlan { start, end: len, kv: KvMode::Read, refresh: false },
            CacheMode::Dual => ForwardPlan { start, end: be, kv: KvMode::ReadWrite, refresh: false },
        }
    }

    /// Updates validity after a forward ran with `plan` in block `[bs, be)`.
    pub fn after_forward(&mut self, plan: &ForwardPlan, block: (usize, usize)) {
        if let (Some(kv), true, CacheMode::Prefix) = (self.kv.as_mut(), plan.refresh, self.mode) {
            kv.invalidate_from(block.0);
        }
    }
}
