//! K/V in the NPU's tiled layout: per layer, the `rows × kv_dim` K (and V) matrix stored as
//! 32×32 fp16 tiles, tile-major (tile row, then tile column), each tile row-major. Edges are
//! zero-padded to whole tiles. The CPU revision path writes refreshed rows here (its side
//! buffer) so a device could take the tiles as-is; the step-boundary merge reads them back.

use half::f16;

use crate::error::{EngineError, Result};
use crate::model::KvCache;

/// Tile edge length (elements).
pub const TILE: usize = 32;

/// K and V of `rows` positions for every layer, in 32×32 fp16 tiles.
#[derive(Debug, Clone, PartialEq)]
pub struct TiledKv {
    n_layers: usize,
    rows: usize,
    kv_dim: usize,
    col_tiles: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
}

impl TiledKv {
    /// A zeroed buffer for `rows` positions of `n_layers` layers with rows of `kv_dim`.
    pub fn new(n_layers: usize, rows: usize, kv_dim: usize) -> Self {
        let col_tiles = kv_dim.div_ceil(TILE);
        let size = rows.div_ceil(TILE) * col_tiles * TILE * TILE;
        TiledKv {
            n_layers,
            rows,
            kv_dim,
            col_tiles,
            k: vec![vec![f16::ZERO; size]; n_layers],
            v: vec![vec![f16::ZERO; size]; n_layers],
        }
    }

    /// Packs the given cache positions (in order) into a tiled buffer.
    pub fn pack(cache: &KvCache, positions: &[usize]) -> Result<Self> {
        let mut t = TiledKv::new(cache.n_layers(), positions.len(), cache.kv_dim());
        for (row, &p) in positions.iter().enumerate() {
            if p >= cache.capacity() {
                return Err(EngineError::InvalidRequest(format!("position {p} outside a KV cache of {}", cache.capacity())));
            }
            for layer in 0..cache.n_layers() {
                t.write_row(layer, row, cache.k_row(layer, p), cache.v_row(layer, p))?;
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

    /// Updates one position's K and V rows of `layer` inside their tiles (f32 → f16).
    pub fn write_row(&mut self, layer: usize, row: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.check(layer, row, k.len())?;
        self.check(layer, row, v.len())?;
        // A row spans `col_tiles` tiles; within a tile its 32 elements are contiguous.
        for col0 in (0..self.kv_dim).step_by(TILE) {
            let n = TILE.min(self.kv_dim - col0);
            let at = self.offset(row, col0);
            for (dst, &src) in self.k[layer][at..at + n].iter_mut().zip(&k[col0..col0 + n]) {
                *dst = f16::from_f32(src);
            }
            for (dst, &src) in self.v[layer][at..at + n].iter_mut().zip(&v[col0..col0 + n]) {
                *dst = f16::from_f32(src);
            }
        }
        Ok(())
    }

    /// Reads one position's K and V rows of `layer` back into f32 slices.
    pub fn read_row(&self, layer: usize, row: usize, k: &mut [f32], v: &mut [f32]) -> Result<()> {
        self.check(layer, row, k.len())?;
        self.check(layer, row, v.len())?;
        for col0 in (0..self.kv_dim).step_by(TILE) {
            let n = TILE.min(self.kv_dim - col0);
            let at = self.offset(row, col0);
            for (dst, src) in k[col0..col0 + n].iter_mut().zip(&self.k[layer][at..at + n]) {
                *dst = src.to_f32();
            }
            for (dst, src) in v[col0..col0 + n].iter_mut().zip(&self.v[layer][at..at + n]) {
                *dst = src.to_f32();
            }
        }
        Ok(())
    }

    /// Writes row `row` of every layer into `cache` at position `pos` (validity unchanged).
    pub fn unpack_into(&self, row: usize, cache: &mut KvCache, pos: usize) -> Result<()> {
        if pos >= cache.capacity() || cache.kv_dim() != self.kv_dim || cache.n_layers() != self.n_layers {
            return Err(EngineError::InvalidRequest(format!("tiled KV row cannot go to cache position {pos}")));
        }
        let (mut k, mut v) = (vec![0.0f32; self.kv_dim], vec![0.0f32; self.kv_dim]);
        for layer in 0..self.n_layers {
            self.read_row(layer, row, &mut k, &mut v)?;
            cache.write(layer, pos, &k, &v);
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
    fn out_of_range_is_an_error() {
        let mut t = TiledKv::new(1, 4, 8);
        assert!(t.write_row(0, 4, &[0.0; 8], &[0.0; 8]).is_err());
        assert!(t.write_row(1, 0, &[0.0; 8], &[0.0; 8]).is_err());
        assert!(t.write_row(0, 0, &[0.0; 7], &[0.0; 7]).is_err());
    }
}
