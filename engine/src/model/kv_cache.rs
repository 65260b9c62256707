//! Position-indexed key/value cache shared by AR decoding and dLLM prefix/dual caching.
//!
//! Every position of the canvas has a slot per layer; a validity flag says whether the slot holds
//! K/V the next forward may attend to. Prefix caching keeps `[0, block_start)` valid; dual caching
//! keeps everything valid and overwrites the block's slots each step; revision (later) rewrites
//! single slots. A forward's own block always overrides the cached slots of its positions.
//!
//! Two memory layouts hold the same values: row-major (the CPU's: one contiguous row per
//! position) and the NPU's tiled layout ([`KvLayout::Tiled`]: per layer, the `positions × kv_dim`
//! matrix in 32×32 tiles, tile-major, each tile row-major, edges zero-padded), which the virtual
//! NPU keeps and the CPU revision path reads and writes in place.

use std::borrow::Cow;

use super::config::ModelConfig;

/// Tile edge (elements) of [`KvLayout::Tiled`].
pub const KV_TILE: usize = 32;

/// How a cache lays out its rows in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvLayout {
    /// One contiguous `kv_dim` row per position.
    #[default]
    RowMajor,
    /// 32×32 tiles, tile-major (tile row, then tile column), row-major inside a tile.
    Tiled,
}

/// Keys and values for `capacity` positions of every layer.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    n_layers: usize,
    kv_dim: usize,
    capacity: usize,
    layout: KvLayout,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    valid: Vec<bool>,
}

/// One piece of a row that is contiguous in memory: columns `col..col + len` at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSegment {
    /// First column.
    pub col: usize,
    /// Offset of that column's element in the layer buffer.
    pub offset: usize,
    /// Contiguous elements.
    pub len: usize,
}

impl KvCache {
    /// An empty row-major cache for `capacity` positions.
    pub fn new(cfg: &ModelConfig, capacity: usize) -> Self {
        Self::with_layout(cfg, capacity, KvLayout::RowMajor)
    }
    /// An empty cache for `capacity` positions in `layout`.
    pub fn with_layout(cfg: &ModelConfig, capacity: usize, layout: KvLayout) -> Self {
        let kv_dim = cfg.kv_dim();
        let len = layer_len(layout, capacity, kv_dim);
        KvCache {
            n_layers: cfg.n_layers,
            kv_dim,
            capacity,
            layout,
            // Written through (not calloc'd zero pages), so decoding takes no page faults on them.
            k: (0..cfg.n_layers).map(|_| prefaulted(len)).collect(),
            v: (0..cfg.n_layers).map(|_| prefaulted(len)).collect(),
            valid: vec![false; capacity],
        }
    }
    /// The memory layout.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }
    /// The contiguous pieces of position `pos`'s row, in column order (one for row-major, one
    /// per tile column for tiled).
    pub fn segments(&self, pos: usize) -> impl Iterator<Item = RowSegment> + '_ {
        let (d, layout) = (self.kv_dim, self.layout);
        let step = if layout == KvLayout::Tiled { KV_TILE } else { d.max(1) };
        (0..d).step_by(step).map(move |col| RowSegment { col, offset: self.offset(pos, col), len: step.min(d - col) })
    }
    fn offset(&self, pos: usize, col: usize) -> usize {
        match self.layout {
            KvLayout::RowMajor => pos * self.kv_dim + col,
            KvLayout::Tiled => {
                let col_tiles = self.kv_dim.div_ceil(KV_TILE);
                ((pos / KV_TILE) * col_tiles + col / KV_TILE) * KV_TILE * KV_TILE + (pos % KV_TILE) * KV_TILE + col % KV_TILE
            }
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
        // Both layouts are position-major (rows, or rows of tiles), so growing appends.
        let len = layer_len(self.layout, capacity, self.kv_dim);
        for l in 0..self.n_layers {
            self.k[l].resize(len, 0.0);
            self.v[l].resize(len, 0.0);
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
    /// First position of `[0, len)` without usable K/V (`len` if every one has them): where the
    /// valid prefix ends.
    pub fn valid_prefix_end(&self, len: usize) -> usize {
        (0..len).find(|&p| !self.is_valid(p)).unwrap_or(len)
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
    /// K row of `layer` at `pos` (borrowed when row-major, gathered from its tiles when tiled).
    pub fn k_row(&self, layer: usize, pos: usize) -> Cow<'_, [f32]> {
        self.row(&self.k[layer], pos)
    }
    /// V row of `layer` at `pos`.
    pub fn v_row(&self, layer: usize, pos: usize) -> Cow<'_, [f32]> {
        self.row(&self.v[layer], pos)
    }
    fn row<'a>(&self, buf: &'a [f32], pos: usize) -> Cow<'a, [f32]> {
        match self.layout {
            KvLayout::RowMajor => Cow::Borrowed(&buf[pos * self.kv_dim..(pos + 1) * self.kv_dim]),
            KvLayout::Tiled => {
                let mut out = Vec::with_capacity(self.kv_dim);
                for s in self.segments(pos) {
                    out.extend_from_slice(&buf[s.offset..s.offset + s.len]);
                }
                Cow::Owned(out)
            }
        }
    }
    /// Appends the K and V rows of `layer` at `pos` to `k_out` / `v_out` (attention's context
    /// gather; reads tiles in place for the tiled layout).
    pub fn append_rows(&self, layer: usize, pos: usize, k_out: &mut Vec<f32>, v_out: &mut Vec<f32>) {
        for s in self.segments(pos) {
            k_out.extend_from_slice(&self.k[layer][s.offset..s.offset + s.len]);
            v_out.extend_from_slice(&self.v[layer][s.offset..s.offset + s.len]);
        }
    }
    /// Copies the K and V rows of `layer` at `pos` into `k_out` / `v_out` (`kv_dim` each; the
    /// forward's gather into its reused context buffers).
    pub fn copy_rows(&self, layer: usize, pos: usize, k_out: &mut [f32], v_out: &mut [f32]) {
        for s in self.segments(pos) {
            k_out[s.col..s.col + s.len].copy_from_slice(&self.k[layer][s.offset..s.offset + s.len]);
            v_out[s.col..s.col + s.len].copy_from_slice(&self.v[layer][s.offset..s.offset + s.len]);
        }
    }
    /// Stores K/V rows of `layer` at `pos` (does not change validity; see [`KvCache::mark_valid`]).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        let step = if self.layout == KvLayout::Tiled { KV_TILE } else { d.max(1) };
        let mut col = 0;
        while col < d {
            let (off, len) = (self.offset(pos, col), step.min(d - col));
            self.k[layer][off..off + len].copy_from_slice(&k[col..col + len]);
            self.v[layer][off..off + len].copy_from_slice(&v[col..col + len]);
            col += step;
        }
    }
    /// The raw K buffer of `layer` (layout-dependent), for kernels written for the layout.
    pub fn k_buffer(&self, layer: usize) -> &[f32] {
        &self.k[layer]
    }
    /// The raw V buffer of `layer`.
    pub fn v_buffer(&self, layer: usize) -> &[f32] {
        &self.v[layer]
    }
    /// Mutable raw K and V buffers of `layer`.
    pub fn kv_buffers_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        (&mut self.k[layer], &mut self.v[layer])
    }
    /// Marks positions valid after all layers were written.
    pub fn mark_valid(&mut self, positions: impl IntoIterator<Item = usize>) {
        for p in positions {
            if p < self.capacity {
                self.valid[p] = true;
            }
        }
    }
    /// Bytes held by K and V (tile padding included).
    pub fn bytes(&self) -> usize {
        2 * self.n_layers * layer_len(self.layout, self.capacity, self.kv_dim) * 4
    }
}

/// `len` zeros, every page written now.
fn prefaulted(len: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    // black_box: a constant zero fill right after the allocation may be folded into a lazily
    // zeroed (calloc) allocation, which is exactly what this avoids.
    v.resize(len, std::hint::black_box(0.0));
    v
}

fn layer_len(layout: KvLayout, capacity: usize, kv_dim: usize) -> usize {
    match layout {
        KvLayout::RowMajor => capacity * kv_dim,
        KvLayout::Tiled => capacity.div_ceil(KV_TILE) * kv_dim.div_ceil(KV_TILE) * KV_TILE * KV_TILE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ModelConfig {
        let mut c = crate::memory::plan_test_config();
        c.n_layers = 2;
        c.n_kv_heads = 1;
        c.head_dim = 70; // kv_dim 70: three tile columns, the last one partial
        c
    }

    #[test]
    fn tiled_offsets_are_tile_major_row_major_inside() {
        let c = KvCache::with_layout(&cfg(), 40, KvLayout::Tiled);
        let offs: Vec<(usize, usize, usize)> = c.segments(33).map(|s| (s.col, s.offset, s.len)).collect();
        // Tile row 1 (positions 32..64), row 1 inside the tile; 3 tile columns of 1024.
        assert_eq!(offs, vec![(0, 3 * 1024 + 32, 32), (32, 4 * 1024 + 32, 32), (64, 5 * 1024 + 32, 6)]);
        assert_eq!(c.k_buffer(0).len(), 2 * 3 * 1024);
    }

    #[test]
    fn layouts_hold_the_same_values_and_grow_keeps_them() {
        let mut a = KvCache::with_layout(&cfg(), 40, KvLayout::RowMajor);
        let mut b = KvCache::with_layout(&cfg(), 40, KvLayout::Tiled);
        for p in [0usize, 1, 31, 32, 33, 39] {
            for l in 0..2 {
                let k: Vec<f32> = (0..70).map(|i| (p * 1000 + l * 100 + i) as f32).collect();
                let v: Vec<f32> = k.iter().map(|x| -x).collect();
                a.write(l, p, &k, &v);
                b.write(l, p, &k, &v);
            }
        }
        b.grow(100);
        for p in 0..40 {
            for l in 0..2 {
                assert_eq!(a.k_row(l, p), b.k_row(l, p), "k l{l} p{p}");
                assert_eq!(a.v_row(l, p), b.v_row(l, p));
                let (mut k1, mut v1, mut k2, mut v2) = (vec![], vec![], vec![], vec![]);
                a.append_rows(l, p, &mut k1, &mut v1);
                b.append_rows(l, p, &mut k2, &mut v2);
                assert_eq!((k1, v1), (k2, v2));
            }
        }
        assert!(b.k_row(0, 99).iter().all(|&x| x == 0.0));
    }
}
