//! Per-row activation quantisation for the int8 kernels: absmax scale, round half away from zero
//! (as [`super::quantize_into`], the reference), clamp to ±127, plus the VNNI kernel's +128
//! offset and tile layout and zero padding to `kp`, in one pass per row; vectorised per
//! instruction set ([`crate::kernels::simd::Simd`]). Buffers are reused across calls
//! ([`QuantizedRows::fill`]).

use rayon::prelude::*;

use crate::kernels::simd::{multiversion, Simd};

use super::{quantize_into, Isa};

/// Rows per tile of the VNNI activation layout (and per VNNI tile with per-row scales).
pub const VNNI_TILE_ROWS: usize = 12;

/// Quantised activations in the encoding and layout a kernel wants, plus one scale per row.
///
/// Layout: row-major `[m][kp]` for every kernel but VNNI's, which reads a tile of up to
/// [`VNNI_TILE_ROWS`] rows in step: there each tile of `mr` rows is stored `[kp/4][mr][4]` (the
/// 4-byte quads of its rows side by side), so one pointer walks a tile's activations. A tile of
/// one row is plain row-major.
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    /// VNNI: `qx + 128` as u8; other kernels: `qx` as i8 bits.
    pub data: Vec<u8>,
    pub scales: Vec<f32>,
    pub kp: usize,
    pub isa: Isa,
    /// Row-major staging for the VNNI interleave (grown, never shrunk).
    rows: Vec<u8>,
}

/// Rows below which quantisation stays on the calling thread (the fork costs more).
const PAR_MIN_ELEMS: usize = 1 << 16;

/// One VNNI tile's buffers in [`QuantizedRows::fill`]: codes, staging rows, scales, input rows.
type TileBufs<'a> = (((&'a mut [u8], &'a mut [u8]), &'a mut [f32]), &'a [f32]);

impl QuantizedRows {
    /// An empty buffer (grows on the first [`QuantizedRows::fill`]).
    pub fn empty() -> Self {
        QuantizedRows { data: Vec::new(), scales: Vec::new(), kp: 0, isa: Isa::Scalar, rows: Vec::new() }
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
        let simd = Simd::detect();
        let (data, scales) = (&mut self.data[..m * kp], &mut self.scales[..m]);
        let par = m * k >= PAR_MIN_ELEMS;
        if isa != Isa::Avx512Vnni || m == 1 {
            let offset = if isa == Isa::Avx512Vnni { 128u8 } else { 0 };
            if par {
                data.par_chunks_mut(kp).zip(scales.par_iter_mut()).zip(x.par_chunks(k)).for_each(|((d, s), xr)| {
                    *s = quantize_row_with(simd, xr, d, offset);
                });
            } else {
                for ((d, s), xr) in data.chunks_mut(kp).zip(scales.iter_mut()).zip(x.chunks(k)) {
                    *s = quantize_row_with(simd, xr, d, offset);
                }
            }
            return;
        }
        // VNNI: per tile of rows, quantise row-major into the staging rows, then interleave.
        if self.rows.len() < m * kp {
            self.rows.resize(m * kp, 0);
        }
        let t = VNNI_TILE_ROWS;
        let rows = &mut self.rows[..m * kp];
        let one = |(((d, st), s), xt): TileBufs| {
            for ((stage, sc), xr) in st.chunks_exact_mut(kp).zip(s.iter_mut()).zip(xt.chunks_exact(k)) {
                *sc = quantize_row_with(simd, xr, stage, 128);
            }
            interleave_tile(st, d, kp);
        };
        if par {
            data.par_chunks_mut(t * kp)
                .zip(rows.par_chunks_mut(t * kp))
                .zip(scales.par_chunks_mut(t))
                .zip(x[..m * k].par_chunks(t * k))
                .for_each(one);
        } else {
            data.chunks_mut(t * kp)
                .zip(rows.chunks_mut(t * kp))
                .zip(scales.chunks_mut(t))
                .zip(x[..m * k].chunks(t * k))
                .for_each(one);
        }
    }

    /// Wraps codes `qx[m][kp]` (±127) and scales as given (tests).
    pub fn from_codes(qx: &[i8], scales: &[f32], kp: usize, isa: Isa) -> Self {
        let offset = if isa == Isa::Avx512Vnni { 128u8 } else { 0 };
        let rows: Vec<u8> = qx.iter().map(|&v| (v.max(-127) as u8).wrapping_add(offset)).collect();
        let mut data = rows.clone();
        if isa == Isa::Avx512Vnni {
            let t = VNNI_TILE_ROWS;
            for (st, d) in rows.chunks(t * kp).zip(data.chunks_mut(t * kp)) {
                interleave_tile(st, d, kp);
            }
        }
        QuantizedRows { data, scales: scales.to_vec(), kp, isa, rows: Vec::new() }
    }
}

/// Offset of row `i`, byte `t` in the VNNI layout of `m` rows (see [`QuantizedRows`]).
pub fn vnni_offset(i: usize, t: usize, m: usize, kp: usize) -> usize {
    let tile = i / VNNI_TILE_ROWS;
    let mr = (m - tile * VNNI_TILE_ROWS).min(VNNI_TILE_ROWS);
    tile * VNNI_TILE_ROWS * kp + (t / 4) * mr * 4 + (i % VNNI_TILE_ROWS) * 4 + t % 4
}

/// One tile's row-major codes `rows[mr][kp]` into its interleaved layout `[kp/4][mr][4]`.
fn interleave_tile(rows: &[u8], tile: &mut [u8], kp: usize) {
    let mr = rows.len() / kp;
    assert!(tile.len() >= mr * kp && kp % 4 == 0 && mr <= VNNI_TILE_ROWS);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F detected; the lengths were asserted above.
        unsafe { super::x86::interleave_tile(rows, tile, kp) };
        return;
    }
    for (q, quads) in tile[..mr * kp].chunks_exact_mut(4 * mr).enumerate() {
        for (r, quad) in quads.chunks_exact_mut(4).enumerate() {
            quad.copy_from_slice(&rows[r * kp + 4 * q..r * kp + 4 * q + 4]);
        }
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
    fn vnni_layout_holds_every_code_where_vnni_offset_says() {
        for (m, k) in [(1usize, 40usize), (5, 64), (12, 33), (13, 96), (30, 32), (300, 320)] {
            let kp = k.div_ceil(32) * 32;
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            let plain = QuantizedRows::from_f32(&x, m, k, kp, Isa::Scalar);
            let vnni = QuantizedRows::from_f32(&x, m, k, kp, Isa::Avx512Vnni);
            assert_eq!(plain.scales, vnni.scales);
            for i in 0..m {
                for t in 0..kp {
                    let want = plain.data[i * kp + t].wrapping_add(128);
                    assert_eq!(vnni.data[vnni_offset(i, t, m, kp)], want, "m {m} row {i} k {t}");
                }
            }
        }
    }

    #[test]
    fn every_variant_matches_reference_bit_for_bit() {
        for k in [1usize, 15, 32, 100, 4096] {
            let kp = k.div_ceil(32) * 32;
            for (seed, scale) in [(1u64, 1.0f32), (2, 1e-3), (3, 0.0)] {
                let mut x: Vec<f32> = (0..k).map(|i| (((i as u64 * 2654435761 + seed) % 2001) as f32 / 1000.0 - 1.0) * scale).collect();
                if k > 3 {
                    x[3] = 0.5 * 127.0 / 127.0 * x.iter().fold(0.0f32, |a, v| a.max(v.abs())); // a tie
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
