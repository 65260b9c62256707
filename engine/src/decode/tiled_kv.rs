//! The CPU revision path's side buffer: K/V rows of revised positions in the NPU's tiled layout —
//! per layer, the `rows × kv_dim` K (and V) matrix in 32×32 tiles, tile-major (tile row, then tile
//! column), row-major inside a tile, edges zero-padded — the same geometry as a
//! [`KvLayout::Tiled`](crate::model::KvLayout) cache. Filling it from, and merging it into, a tiled
//! cache copies 32-element tile rows in place: the cache is never converted to another layout.
//! Values are kept as f32 (as the cache holds them) so a merge is exact.

use crate::error::{EngineError, Result};
use crate::model::kv_cache::KV_TILE;
use crate::model::KvCache;

/// Tile edge length (elements).
pub const TILE: usize = KV_TILE;

/// K and V of `rows` positions for every layer, in 32×32 tiles.
#[derive(Debug, Clone, PartialEq)]
pub struct TiledKv {
    n_layers: usize,
    rows: usize,
    kv_dim: usize,
    col_tiles: usize,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl TiledKv {
    /// A zeroed buffer for `rows` positions of `n_layers` layers with rows of `kv_dim`.
    pub fn new(n_layers: usize, rows: usize, kv_dim: usize) -> Self {
        let col_tiles = kv_dim.div_ceil(TILE);
        let size = rows.div_ceil(TILE) * col_tiles * TILE * TILE;
        TiledKv { n_layers, rows, kv_dim, col_tiles, k: vec![vec![0.0; size]; n_layers], v: vec![vec![0.0; size]; n_layers] }
    }

    /// Copies the given cache positions (in order) into a side buffer, tile row by tile row.
    pub fn pack(cache: &KvCache, positions: &[usize]) -> Result<Self> {
        let mut t = TiledKv::new(cache.n_layers(), positions.len(), cache.kv_dim());
        for (row, &p) in positions.iter().enumerate() {
            if p >= cache.capacity() {
                return Err(EngineError::InvalidRequest(format!("position {p} outside a KV cache of {}", cache.capacity())));
            }
            for layer in 0..cache.n_layers() {
                let (kb, vb) = (cache.k_buffer(layer), cache.v_buffer(layer));
                for seg in cache.segments(p) {
                    t.put(layer, row, seg.col, &kb[seg.offset..seg.offset + seg.len], &vb[seg.offset..seg.offset + seg.len]);
                }
            }
        }
        Ok(t)
    }

    /// Number of positions held.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Number of layers held.
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }
    /// Elements per layer buffer, padding included (what a device would allocate).
    pub fn padded_len(&self) -> usize {
        self.k.first().map_or(0, Vec::len)
    }

    /// Offset of element (`row`, `col`) inside one layer's buffer.
    fn offset(&self, row: usize, col: usize) -> usize {
        ((row / TILE) * self.col_tiles + col / TILE) * TILE * TILE + (row % TILE) * TILE + col % TILE
    }

    fn check(&self, layer: usize, row: usize, len: usize) -> Result<()> {
        if layer >= self.n_layers || row >= self.rows || len != self.kv_dim {
            return Err(EngineError::InvalidRequest(format!(
                "tiled KV access layer {layer} row {row} width {len} outside {}×{}×{}",
                self.n_layers, self.rows, self.kv_dim
            )));
        }
        Ok(())
    }

    /// Pieces of columns `col..col + len` of a row that are contiguous here: (column, offset, n).
    fn pieces(&self, row: usize, col: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let end = col + len;
        let mut c = col;
        std::iter::from_fn(move || {
            if c >= end {
                return None;
            }
            let n = (TILE - c % TILE).min(end - c);
            let piece = (c, self.offset(row, c), n);
            c += n;
            Some(piece)
        })
    }

    /// Writes columns `col..` of one row of `layer` (k and v of equal length).
    fn put(&mut self, layer: usize, row: usize, col: usize, k: &[f32], v: &[f32]) {
        let pieces: Vec<(usize, usize, usize)> = self.pieces(row, col, k.len()).collect();
        for (c, at, n) in pieces {
            self.k[layer][at..at + n].copy_from_slice(&k[c - col..c - col + n]);
            self.v[layer][at..at + n].copy_from_slice(&v[c - col..c - col + n]);
        }
    }

    /// Updates one position's K and V rows of `layer` inside their tiles.
    pub fn write_row(&mut self, layer: usize, row: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.check(layer, row, k.len())?;
        self.check(layer, row, v.len())?;
        self.put(layer, row, 0, k, v);
        Ok(())
    }

    /// Reads one position's K and V rows of `layer` back into slices.
    pub fn read_row(&self, layer: usize, row: usize, k: &mut [f32], v: &mut [f32]) -> Result<()> {
        self.check(layer, row, k.len())?;
        self.check(layer, row, v.len())?;
        for (c, at, n) in self.pieces(row, 0, self.kv_dim) {
            k[c..c + n].copy_from_slice(&self.k[layer][at..at + n]);
            v[c..c + n].copy_from_slice(&self.v[layer][at..at + n]);
        }
        Ok(())
    }

    /// Writes row `row` of every layer into `cache` at position `pos` (validity unchanged), tile
    /// row by tile row into the cache's own layout.
    pub fn unpack_into(&self, row: usize, cache: &mut KvCache, pos: usize) -> Result<()> {
        if pos >= cache.capacity() || cache.kv_dim() != self.kv_dim || cache.n_layers() != self.n_layers || row >= self.rows
        {
            return Err(EngineError::InvalidRequest(format!("tiled KV row {row} cannot go to cache position {pos}")));
        }
        let segs: Vec<_> = cache.segments(pos).collect();
        for layer in 0..self.n_layers {
            let (kb, vb) = cache.kv_buffers_mut(layer);
            for seg in &segs {
                for (c, at, n) in self.pieces(row, seg.col, seg.len) {
                    let dst = seg.offset + (c - seg.col);
                    kb[dst..dst + n].copy_from_slice(&self.k[layer][at..at + n]);
                    vb[dst..dst + n].copy_from_slice(&self.v[layer][at..at + n]);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_tile_major_row_major_inside() {
        let t = TiledKv::new(1, 40, 70);
        assert_eq!(t.col_tiles, 3);
        assert_eq!(t.padded_len(), 2 * 3 * 1024);
        assert_eq!(t.offset(0, 0), 0);
        assert_eq!(t.offset(0, 31), 31);
        assert_eq!(t.offset(1, 0), 32);
        assert_eq!(t.offset(0, 32), 1024);
        assert_eq!(t.offset(33, 65), (3 + 2) * 1024 + 32 + 1);
    }

    #[test]
    fn write_read_roundtrip_and_neighbours_untouched() {
        let mut t = TiledKv::new(2, 40, 70);
        let k: Vec<f32> = (0..70).map(|i| i as f32 * 0.5).collect();
        let v: Vec<f32> = (0..70).map(|i| -(i as f32)).collect();
        t.write_row(1, 33, &k, &v).unwrap();
        let (mut k2, mut v2) = (vec![0.0; 70], vec![0.0; 70]);
        t.read_row(1, 33, &mut k2, &mut v2).unwrap();
        assert_eq!((&k2, &v2), (&k, &v));
        t.read_row(1, 32, &mut k2, &mut v2).unwrap();
        assert!(k2.iter().chain(&v2).all(|&x| x == 0.0));
        t.read_row(0, 33, &mut k2, &mut v2).unwrap();
        assert!(k2.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn pack_and_unpack_are_exact_for_both_cache_layouts() {
        use crate::model::KvLayout;
        let mut cfg = crate::memory::plan_test_config();
        cfg.n_layers = 2;
        cfg.n_kv_heads = 1;
        cfg.head_dim = 70;
        for layout in [KvLayout::RowMajor, KvLayout::Tiled] {
            let mut cache = KvCache::with_layout(&cfg, 50, layout);
            for p in 0..50 {
                for l in 0..2 {
                    let k: Vec<f32> = (0..70).map(|i| (p * 7 + l * 3 + i) as f32 * 0.25).collect();
                    cache.write(l, p, &k, &k.iter().map(|x| x + 1.0).collect::<Vec<_>>());
                }
            }
            let t = TiledKv::pack(&cache, &[3, 33, 49]).unwrap();
            let mut other = KvCache::with_layout(&cfg, 50, layout);
            for (row, p) in [3usize, 33, 49].into_iter().enumerate() {
                t.unpack_into(row, &mut other, p).unwrap();
                for l in 0..2 {
                    assert_eq!(other.k_row(l, p), cache.k_row(l, p));
                    assert_eq!(other.v_row(l, p), cache.v_row(l, p));
                }
            }
            assert!(other.k_row(0, 4).iter().all(|&x| x == 0.0), "neighbours untouched");
        }
    }

    #[test]
    fn out_of_range_is_an_error() {
        let mut t = TiledKv::new(1, 4, 8);
        assert!(t.write_row(0, 4, &[0.0; 8], &[0.0; 8]).is_err());
        assert!(t.write_row(1, 0, &[0.0; 8], &[0.0; 8]).is_err());
        assert!(t.write_row(0, 0, &[0.0; 7], &[0.0; 7]).is_err());
    }
}
