//! Per-row activation quantisation for the int8 kernels: absmax scale, round half away from zero
//! (as [`super::quantize_into`], the reference), clamp to ±127 and zero padding to `kp`, in one
//! pass per row; vectorised per instruction set ([`crate::kernels::simd::Simd`]). For the VNNI
//! kernel, also the tile layout and the code sums per 32 k. Buffers are reused across calls
//! ([`QuantizedRows::fill`]).

use rayon::prelude::*;

use crate::kernels::simd::{multiversion, Simd};

use super::{quantize_into, Isa};

/// Rows per VNNI tile, and per interleaved tile of the VNNI activation layout.
pub const VNNI_TILE_ROWS: usize = 12;

/// Quantised activations in the encoding and layout a kernel wants, plus one scale per row.
///
/// Layout: row-major `[m][kp]` for every kernel but VNNI's, which reads a tile of up to
/// [`VNNI_TILE_ROWS`] rows in step: there each tile of `mr` rows is stored `[kp/4][mr][4]` (the
/// 4-byte quads of its rows side by side), so one pointer walks a tile's activations. A tile of
/// one row is plain row-major.
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    /// Codes `qx` as i8 bits.
    pub data: Vec<u8>,
    pub scales: Vec<f32>,
    pub kp: usize,
    pub isa: Isa,
    /// VNNI only: `-128·Σ qx` per row and 32-k group, `[m][kp/32]`: where the kernel's accumulators
    /// start, cancelling the +128 its unsigned weight operand adds to every code.
    pub group_offsets: Vec<i32>,
    /// VNNI only: `-128·Σ qx` per row over all of k.
    pub row_offsets: Vec<i32>,
    /// Row-major staging for the VNNI interleave (grown, never shrunk).
    rows: Vec<u8>,
}

/// Rows below which quantisation stays on the calling thread (the fork costs more).
const PAR_MIN_ELEMS: usize = 1 << 16;

impl QuantizedRows {
    /// An empty buffer (grows on the first [`QuantizedRows::fill`]).
    pub fn empty() -> Self {
        QuantizedRows {
            data: Vec::new(),
            scales: Vec::new(),
            kp: 0,
            isa: Isa::Scalar,
            group_offsets: Vec::new(),
            row_offsets: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Quantises `m` rows of `x[m][k]` per row for kernel `isa`, zero-padding to `kp`.
    pub fn from_f32(x: &[f32], m: usize, k: usize, kp: usize, isa: Isa) -> Self {
        let mut q = Self::empty();
        q.fill(x, m, k, kp, isa);
        q
    }

    /// As [`QuantizedRows::from_f32`] into this buffer (grown, never shrunk; no allocation once
    /// it is large enough).
    pub fn fill(&mut self, x: &[f32], m: usize, k: usize, kp: usize, isa: Isa) {
        assert!(x.len() >= m * k && kp >= k);
        if self.data.len() < m * kp {
            self.data.resize(m * kp, 0);
        }
        if self.scales.len() < m {
            self.scales.resize(m, 0.0);
        }
        self.kp = kp;
        self.isa = isa;
        let vnni = isa == Isa::Avx512Vnni;
        let offset = 0;
        let simd = Simd::detect();
        if vnni && m > 1 && self.rows.len() < m * kp {
            self.rows.resize(m * kp, 0);
        }
        let data = if vnni && m > 1 { &mut self.rows[..m * kp] } else { &mut self.data[..m * kp] };
        let scales = &mut self.scales[..m];
        if m * k >= PAR_MIN_ELEMS {
            data.par_chunks_mut(kp).zip(scales.par_iter_mut()).zip(x.par_chunks(k)).for_each(|((d, s), xr)| {
                *s = quantize_row_with(simd, xr, d, offset);
            });
        } else {
            for ((d, s), xr) in data.chunks_mut(kp).zip(scales.iter_mut()).zip(x.chunks(k)) {
                *s = quantize_row_with(simd, xr, d, offset);
            }
        }
        if vnni {
            let codes = if m > 1 { &self.rows[..m * kp] } else { &self.data[..m * kp] };
            code_offsets(codes, kp, &mut self.group_offsets, &mut self.row_offsets);
            if m > 1 {
                interleave_tiles(&self.rows[..m * kp], &mut self.data[..m * kp], m, kp);
            }
        }
    }

    /// Wraps codes `qx[m][kp]` (±127) and scales as given (tests).
    pub fn from_codes(qx: &[i8], scales: &[f32], kp: usize, isa: Isa) -> Self {
        let rows: Vec<u8> = qx.iter().map(|&v| v.max(-127) as u8).collect();
        let mut data = rows.clone();
        let (mut group_offsets, mut row_offsets) = (Vec::new(), Vec::new());
        if isa == Isa::Avx512Vnni {
            code_offsets(&rows, kp, &mut group_offsets, &mut row_offsets);
            interleave_tiles(&rows, &mut data, rows.len() / kp.max(1), kp);
        }
        QuantizedRows { data, scales: scales.to_vec(), kp, isa, group_offsets, row_offsets, rows: Vec::new() }
    }
}

/// `-128·Σ` of the i8 codes of row-major `codes[m][kp]` per row and 32-k group, and per row
/// (exact while 128·127·kp < 2³¹, i.e. kp < 132,000).
fn code_offsets(codes: &[u8], kp: usize, group_offsets: &mut Vec<i32>, row_offsets: &mut Vec<i32>) {
    group_offsets.clear();
    row_offsets.clear();
    for row in codes.chunks_exact(kp) {
        let mut total = 0i32;
        for g in row.chunks_exact(32) {
            let s: i32 = g.iter().map(|&b| b as i8 as i32).sum();
            group_offsets.push(s.wrapping_mul(-128));
            total = total.wrapping_add(s);
        }
        row_offsets.push(total.wrapping_mul(-128));
    }
}

/// Offset of row `i`, byte `t` in the VNNI layout of `m` rows (see [`QuantizedRows`]).
pub fn vnni_offset(i: usize, t: usize, m: usize, kp: usize) -> usize {
    let tile = i / VNNI_TILE_ROWS;
    let mr = (m - tile * VNNI_TILE_ROWS).min(VNNI_TILE_ROWS);
    tile * VNNI_TILE_ROWS * kp + (t / 4) * mr * 4 + (i % VNNI_TILE_ROWS) * 4 + t % 4
}

/// Row-major `rows[m][kp]` into the VNNI tile layout.
fn interleave_tiles(rows: &[u8], data: &mut [u8], m: usize, kp: usize) {
    let tile_bytes = VNNI_TILE_ROWS * kp;
    let one = |(src, dst): (&[u8], &mut [u8])| {
        let mr = src.len() / kp;
        for (r, row) in src.chunks_exact(kp).enumerate() {
            for (q, quad) in row.chunks_exact(4).enumerate() {
                let o = (q * mr + r) * 4;
                dst[o..o + 4].copy_from_slice(quad);
            }
        }
    };
    let (rows, data) = (&rows[..m * kp], &mut data[..m * kp]);
    if m * kp >= PAR_MIN_ELEMS {
        rows.par_chunks(tile_bytes).zip(data.par_chunks_mut(tile_bytes)).for_each(one);
    } else {
        rows.chunks(tile_bytes).zip(data.chunks_mut(tile_bytes)).for_each(one);
    }
}

/// Reference of one row's quantisation (what [`quantize_row_with`] computes).
pub fn quantize_row_reference(x: &[f32], out: &mut [u8], offset: u8) -> f32 {
    let mut q = vec![0i8; x.len()];
    let s = quantize_into(x, &mut q);
    for (o, &v) in out.iter_mut().zip(&q) {
        *o = (v as u8).wrapping_add(offset);
    }
    out[x.len()..].iter_mut().for_each(|o| *o = offset);
    s
}

multiversion! {
    /// Quantises `x` into `out[..x.len()]` (codes + `offset`), pads `out` with `offset`, returns
    /// the scale (0 for an all-zero or non-finite row, whose codes are then all `offset`).
    pub fn quantize_row_with(x: &[f32], out: &mut [u8], offset: u8) -> f32 {
        let mut mx = [0.0f32; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                mx[i] = mx[i].max(c[i].abs());
            }
        }
        let amax = chunks.remainder().iter().fold(mx.iter().fold(0.0f32, |a, &b| a.max(b)), |a, v| a.max(v.abs()));
        let (codes, pad) = out.split_at_mut(x.len());
        pad.iter_mut().for_each(|o| *o = offset);
        if amax == 0.0 || !amax.is_finite() {
            codes.iter_mut().for_each(|o| *o = offset);
            return 0.0;
        }
        let inv = 127.0 / amax;
        for (o, &v) in codes.iter_mut().zip(x) {
            let y = (v * inv).round().clamp(-127.0, 127.0);
            // 1.5·2^23 + y holds y's two's complement in its low mantissa byte (y is integral).
            let b = (y + 12_582_912.0).to_bits() as u8;
            *o = b.wrapping_add(offset);
        }
        amax / 127.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnni_layout_holds_every_code_where_vnni_offset_says_and_the_offsets_cancel_128() {
        for (m, k) in [(1usize, 40usize), (5, 64), (12, 33), (13, 96), (30, 32)] {
            let kp = k.div_ceil(32) * 32;
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            let plain = QuantizedRows::from_f32(&x, m, k, kp, Isa::Scalar);
            let vnni = QuantizedRows::from_f32(&x, m, k, kp, Isa::Avx512Vnni);
            assert_eq!(plain.scales, vnni.scales);
            for i in 0..m {
                for t in 0..kp {
                    assert_eq!(vnni.data[vnni_offset(i, t, m, kp)], plain.data[i * kp + t], "m {m} row {i} k {t}");
                }
                let codes = |r: std::ops::Range<usize>| -> i32 { plain.data[r].iter().map(|&b| b as i8 as i32).sum() };
                assert_eq!(vnni.row_offsets[i], -128 * codes(i * kp..(i + 1) * kp));
                for g in 0..kp / 32 {
                    assert_eq!(
                        vnni.group_offsets[i * kp / 32 + g],
                        -128 * codes(i * kp + 32 * g..i * kp + 32 * (g + 1))
                    );
                }
            }
        }
    }

    #[test]
    fn every_variant_matches_reference_bit_for_bit() {
        for k in [1usize, 15, 32, 100, 4096] {
            let kp = k.div_ceil(32) * 32;
            for (seed, scale) in [(1u64, 1.0f32), (2, 1e-3), (3, 0.0)] {
                let mut x: Vec<f32> =
                    (0..k).map(|i| (((i as u64 * 2654435761 + seed) % 2001) as f32 / 1000.0 - 1.0) * scale).collect();
                if k > 3 {
                    x[3] = 0.5 * 127.0 / 127.0 * x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                    // a tie
                }
                for offset in [0u8, 128] {
                    let mut want = vec![7u8; kp];
                    let sw = quantize_row_reference(&x, &mut want, offset);
                    for simd in Simd::all_available() {
                        let mut got = vec![9u8; kp];
                        let sg = quantize_row_with(simd, &x, &mut got, offset);
                        assert_eq!((sg, &got), (sw, &want), "{simd:?} k {k}");
                    }
                }
            }
        }
        let mut out = vec![0u8; 32];
        assert_eq!(quantize_row_with(Simd::detect(), &[f32::INFINITY, 1.0], &mut out, 128), 0.0);
        assert!(out.iter().all(|&b| b == 128));
    }
}
