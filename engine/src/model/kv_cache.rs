//! Position-indexed key/value cache shared by AR decoding and dLLM prefix/dual caching.
//!
//! Every position of the canvas has a slot per layer; a validity flag says whether the slot holds
//! K/V the next forward may attend to. Prefix caching keeps `[0, block_start)` valid; dual caching
//! keeps everything valid and overwrites the block's slots each step; revision (later) rewrites
//! single slots. A forward's own block always overrides the cached slots of its positions.

use super::config::ModelConfig;

/// Keys and values for `capacity` positions of every layer.
#[derive(Debug, Clone)]
pub struct KvCache {
    n_layers: usize,
    kv_dim: usize,
    capacity: usize,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    valid: Vec<bool>,
}

impl KvCache {
    /// An empty cache for `capacity` positions.
    pub fn new(cfg: &ModelConfig, capacity: usize) -> Self {
        let kv_dim = cfg.kv_dim();
        KvCache {
            n_layers: cfg.n_layers,
            kv_dim,
            capacity,
            k: (0..cfg.n_layers).map(|_| vec![0.0; capacity * kv_dim]).collect(),
            v: (0..cfg.n_layers).map(|_| vec![0.0; capacity * kv_dim]).collect(),
            valid: vec![false; capacity],
        }
    }
    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Enlarges the cache to `capacity` positions, keeping every slot and its validity.
    pub fn grow(&mut self, capacity: usize) {
        if capacity <= self.capacity {
            return;
        }
        // Rows are position-major, so growing is a resize of each layer's buffers.
        for l in 0..self.n_layers {
            self.k[l].resize(capacity * self.kv_dim, 0.0);
            self.v[l].resize(capacity * self.kv_dim, 0.0);
        }
        self.valid.resize(capacity, false);
        self.capacity = capacity;
    }
    /// Width of one K (or V) row.
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }
    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }
    /// Whether position `p` holds usable K/V.
    pub fn is_valid(&self, p: usize) -> bool {
        self.valid.get(p).copied().unwrap_or(false)
    }
    /// Valid positions in increasing order.
    pub fn valid_positions(&self) -> Vec<usize> {
        (0..self.capacity).filter(|&p| self.valid[p]).collect()
    }
    /// Number of valid positions.
    pub fn valid_count(&self) -> usize {
        self.valid.iter().filter(|&&v| v).count()
    }
    /// Marks `[from, capacity)` invalid (prefix truncation).
    pub fn invalidate_from(&mut self, from: usize) {
        for v in self.valid.iter_mut().skip(from) {
            *v = false;
        }
    }
    /// Marks the given positions invalid.
    pub fn invalidate(&mut self, positions: impl IntoIterator<Item = usize>) {
        for p in positions {
            if p < self.capacity {
                self.valid[p] = false;
            }
        }
    }
    /// Forgets everything.
    pub fn clear(&mut self) {
        self.valid.iter_mut().for_each(|v| *v = false);
    }
    /// K row of `layer` at `pos`.
    pub fn k_row(&self, layer: usize, pos: usize) -> &[f32] {
        &self.k[layer][pos * self.kv_dim..(pos + 1) * self.kv_dim]
    }
    /// V row of `layer` at `pos`.
    pub fn v_row(&self, layer: usize, pos: usize) -> &[f32] {
        &self.v[layer][pos * self.kv_dim..(pos + 1) * self.kv_dim]
    }
    /// Stores K/V rows of `layer` at `pos` (does not change validity; see [`KvCache::mark_valid`]).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        self.k[layer][pos * d..(pos + 1) * d].copy_from_slice(k);
        self.v[layer][pos * d..(pos + 1) * d].copy_from_slice(v);
    }
    /// Marks positions valid after all layers were written.
    pub fn mark_valid(&mut self, positions: impl IntoIterator<Item = usize>) {
        for p in positions {
            if p < self.capacity {
                self.valid[p] = true;
            }
        }
    }
    /// Bytes held by K and V.
    pub fn bytes(&self) -> usize {
        2 * self.n_layers * self.capacity * self.kv_dim * 4
    }
}
