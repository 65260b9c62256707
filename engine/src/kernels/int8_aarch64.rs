//! aarch64 int8 GEMM microkernels: NEON dot product (`sdot`, FEAT_DotProd) and i8mm (`smmla`,
//! FEAT_I8MM), both over the *oct* panel layout below, signed activations × signed weights.
//!
//! This file depends on `core`/`std::arch` only: `tests/aarch64-kernels/` includes it with
//! `#[path]` and runs its randomized tests under `qemu-aarch64`, so the source tested there is
//! exactly the source the engine compiles on aarch64 (`scripts/test-aarch64.sh`).
//!
//! Oct layout (one panel = [`PANEL`] output rows, zero-padded in n and in k up to `kp`, a multiple
//! of 32): `data[panel][kp/8][row 0..16][8]` i8. Each 16-byte register loaded from a k-oct holds
//! rows (2c, 2c+1) × 8 k, which is
//! - the second operand of `smmla` (an 8×2 matrix stored as its two columns), and
//! - for `sdot` against `[x k0..8, x k0..8]`, four partial sums (row 2c k0-3, row 2c k4-7, row
//!   2c+1 k0-3, row 2c+1 k4-7) that one `addp` folds into per-row sums.
//!
//! The x86 kernels use a k-quad layout instead (`[kp/4][16][4]`, the `vpdpbusd` operand); smmla
//! needs 8 consecutive k per row, and a quad layout would cost a shuffle per load here.
//! Scales are `[panel][group][row 0..16]` f32 as on x86; no compensation term is needed because
//! both operands are signed.
//!
//! `sdot`/`smmla` are emitted with `asm!`: the stdarch intrinsics are not stable on the Rust
//! versions we build with (i8mm's `vmmlaq_s32` is unstable, dotprod's `vdotq_s32` is too new).

/// Output rows per packed panel (same as the x86 kernels).
pub const PANEL: usize = 16;

/// Offset of (row `r` of a panel, k index `t`) inside that panel in the oct layout.
#[inline]
pub fn oct_offset(r: usize, t: usize) -> usize {
    (t / 8) * PANEL * 8 + r * 8 + t % 8
}

/// Packed weights as the kernels read them.
#[derive(Clone, Copy)]
pub struct Panels<'a> {
    /// `[n_panels][kp/8][16][8]` codes (oct layout).
    pub data: &'a [i8],
    /// `[n_panels][kp/group][16]` scales.
    pub scales: &'a [f32],
    /// Output rows (the row stride of `y`).
    pub n: usize,
    /// Padded k (a multiple of 32).
    pub kp: usize,
    /// k values per scale group (32, or `kp`); a multiple of 8 dividing `kp`.
    pub group: usize,
}

/// Quantised activations `[m][kp]` (i8 codes as bytes) with one scale per row.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [u8],
    pub scales: &'a [f32],
    pub kp: usize,
}

/// Whether the dot-product kernel can run on this CPU.
pub fn dot_available() -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("dotprod")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
}

/// Whether the i8mm kernel can run on this CPU.
pub fn i8mm_available() -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("i8mm")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
}

/// Checks that `w`, `x`, `m`, panels `p0..p1` and an output of `y_len` floats fit together
/// (what the kernels' pointer arithmetic relies on).
pub fn shapes_ok(w: &Panels, x: &Rows, m: usize, p0: usize, p1: usize, y_len: usize) -> bool {
    let np = w.n.div_ceil(PANEL);
    w.kp % 32 == 0
        && w.kp > 0
        && w.group % 8 == 0
        && w.group > 0
        && w.kp % w.group == 0
        && x.kp == w.kp
        && w.data.len() >= np * w.kp * PANEL
        && w.scales.len() >= np * (w.kp / w.group) * PANEL
        && x.data.len() >= m * w.kp
        && x.scales.len() >= m
        && p0 <= p1
        && p1 <= np
        && y_len >= m * w.n
}

/// Scalar kernel over the oct layout: the lane-by-lane meaning of the SIMD kernels, the reference
/// the aarch64 kernel tests (`tests/aarch64-kernels`, which include this file) check NEON against.
#[allow(dead_code)]
pub fn scalar_panels(w: &Panels, x: &Rows, m: usize, p0: usize, p1: usize, y: &mut [f32]) {
    let (kp, g) = (w.kp, w.group);
    let ng = kp / g;
    for p in p0..p1 {
        let d = &w.data[p * kp * PANEL..(p + 1) * kp * PANEL];
        let s = &w.scales[p * ng * PANEL..(p + 1) * ng * PANEL];
        for r in 0..PANEL.min(w.n - p * PANEL) {
            for i in 0..m {
                let xr = &x.data[i * kp..(i + 1) * kp];
                let mut acc = 0.0f32;
                for gi in 0..ng {
                    let mut sum = 0i32;
                    for t in gi * g..(gi + 1) * g {
                        sum += (xr[t] as i8) as i32 * d[oct_offset(r, t)] as i32;
                    }
                    acc += sum as f32 * s[gi * PANEL + r];
                }
                y[i * w.n + p * PANEL + r] = acc * x.scales[i];
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub use neon::{dot_panels, i8mm_panels};

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;
    use std::arch::asm;

    use super::{Panels, Rows, PANEL};

    /// `acc.4s += dot4(a.16b, b.16b)` per 32-bit lane (FEAT_DotProd `sdot`, vector form).
    macro_rules! sdot {
        ($acc:expr, $a:expr, $b:expr) => {{
            let mut acc: int32x4_t = $acc;
            // SAFETY: register-only instruction; the enclosing function enables `dotprod`.
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) $a,
                b = in(vreg) $b,
                options(pure, nomem, nostack, preserves_flags)
            );
            acc
        }};
    }

    /// `acc.4s += A(2×8) · B(8×2)` as a row-major 2×2 (FEAT_I8MM `smmla`): `a` holds two
    /// activation rows of 8, `b` two weight rows of 8.
    macro_rules! smmla {
        ($acc:expr, $a:expr, $b:expr) => {{
            let mut acc: int32x4_t = $acc;
            // SAFETY: register-only instruction; the enclosing function enables `i8mm`.
            asm!(
                "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) $a,
                b = in(vreg) $b,
                options(pure, nomem, nostack, preserves_flags)
            );
            acc
        }};
    }

    /// Activation rows per dot-product tile: 4 rows × 8 columns = 16 i32 + 8 f32 accumulators,
    /// 4 weight and 4 activation registers (all 32 NEON registers).
    const MR_DOT: usize = 4;
    /// Activation row pairs per i8mm tile: 3 pairs × 8 columns = 12 i32 + 12 f32 accumulators.
    const PAIRS_MM: usize = 3;

    /// Stores `v[0..8]` (columns `col0..col0+8` of row `row`) into `y`, only the columns `< n`.
    #[inline(always)]
    unsafe fn store8(y: *mut f32, n: usize, row: usize, col0: usize, v0: float32x4_t, v1: float32x4_t) {
        let valid = n.saturating_sub(col0).min(8);
        let dst = y.add(row * n + col0);
        if valid == 8 {
            vst1q_f32(dst, v0);
            vst1q_f32(dst.add(4), v1);
        } else {
            let mut tmp = [0.0f32; 8];
            vst1q_f32(tmp.as_mut_ptr(), v0);
            vst1q_f32(tmp.as_mut_ptr().add(4), v1);
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, valid);
        }
    }

    /// Dot-product kernel: writes columns of panels `p0..p1` for rows `0..m` of `y[m][n]`.
    ///
    /// # Safety
    /// The CPU must have NEON and dotprod, [`super::shapes_ok`] must hold for `y`'s length, and
    /// no other thread may write these columns of `y` meanwhile.
    #[target_feature(enable = "neon,dotprod")]
    pub unsafe fn dot_panels(w: &Panels, x: &Rows, m: usize, p0: usize, p1: usize, y: *mut f32) {
        for p in p0..p1 {
            for half in 0..2 {
                if p * PANEL + half * 8 >= w.n {
                    continue;
                }
                let mut i = 0;
                while i < m {
                    let mr = (m - i).min(MR_DOT);
                    match mr {
                        1 => dot_tile::<1>(w, x, i, p, half, y),
                        2 => dot_tile::<2>(w, x, i, p, half, y),
                        3 => dot_tile::<3>(w, x, i, p, half, y),
                        _ => dot_tile::<4>(w, x, i, p, half, y),
                    }
                    i += mr;
                }
            }
        }
    }

    /// One MR×8 tile (rows `i0..i0+MR`, columns of half-panel `half` of panel `p`), all of k.
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn dot_tile<const MR: usize>(w: &Panels, x: &Rows, i0: usize, p: usize, half: usize, y: *mut f32) {
        let kp = w.kp;
        let ng = kp / w.group;
        let octs = w.group / 8;
        // Rows 0..8 of a k-oct are its first 64 bytes, rows 8..16 the next 64.
        let mut wp = w.data.as_ptr().add(p * kp * PANEL + half * 64);
        let sp = w.scales.as_ptr().add(p * ng * PANEL + half * 8);
        let mut xr = [x.data.as_ptr() as *const i8; MR];
        for (r, xp) in xr.iter_mut().enumerate() {
            *xp = xp.add((i0 + r) * kp);
        }
        let mut facc = [[vdupq_n_f32(0.0); 2]; MR];
        for g in 0..ng {
            let mut iacc = [[vdupq_n_s32(0); 4]; MR];
            for _ in 0..octs {
                // SAFETY (all loads): panel p < n_panels and the current oct < kp/8 lie inside
                // `data`; row i0+r < m and the oct < kp/8 lie inside the activations.
                let wv = [vld1q_s8(wp), vld1q_s8(wp.add(16)), vld1q_s8(wp.add(32)), vld1q_s8(wp.add(48))];
                wp = wp.add(PANEL * 8);
                for (acc, xp) in iacc.iter_mut().zip(xr.iter_mut()) {
                    let xv = vreinterpretq_s8_s64(vld1q_dup_s64(*xp as *const i64));
                    *xp = xp.add(8);
                    for c in 0..4 {
                        acc[c] = sdot!(acc[c], wv[c], xv);
                    }
                }
            }
            let s0 = vld1q_f32(sp.add(g * PANEL));
            let s1 = vld1q_f32(sp.add(g * PANEL + 4));
            for r in 0..MR {
                // addp folds (k0-3, k4-7) partial sums into one i32 per output column.
                let a = vpaddq_s32(iacc[r][0], iacc[r][1]);
                let b = vpaddq_s32(iacc[r][2], iacc[r][3]);
                facc[r][0] = vfmaq_f32(facc[r][0], vcvtq_f32_s32(a), s0);
                facc[r][1] = vfmaq_f32(facc[r][1], vcvtq_f32_s32(b), s1);
            }
        }
        let col0 = p * PANEL + half * 8;
        for r in 0..MR {
            let sx = *x.scales.get_unchecked(i0 + r);
            store8(y, w.n, i0 + r, col0, vmulq_n_f32(facc[r][0], sx), vmulq_n_f32(facc[r][1], sx));
        }
    }

    /// i8mm kernel: writes columns of panels `p0..p1` for rows `0..m` of `y[m][n]`.
    ///
    /// # Safety
    /// The CPU must have NEON and i8mm, [`super::shapes_ok`] must hold for `y`'s length, and no
    /// other thread may write these columns of `y` meanwhile.
    #[target_feature(enable = "neon,i8mm")]
    pub unsafe fn i8mm_panels(w: &Panels, x: &Rows, m: usize, p0: usize, p1: usize, y: *mut f32) {
        for p in p0..p1 {
            for half in 0..2 {
                if p * PANEL + half * 8 >= w.n {
                    continue;
                }
                let mut i = 0;
                while i < m {
                    let rows = (m - i).min(2 * PAIRS_MM);
                    match rows.div_ceil(2) {
                        1 => mm_tile::<1>(w, x, i, rows, p, half, y),
                        2 => mm_tile::<2>(w, x, i, rows, p, half, y),
                        _ => mm_tile::<3>(w, x, i, rows, p, half, y),
                    }
                    i += rows;
                }
            }
        }
    }

    /// One (2·P)×8 tile: `rows` (2P−1 or 2P) activation rows from `i0`; a missing last row of an
    /// odd count re-reads the row before it and its results are not stored.
    #[target_feature(enable = "neon,i8mm")]
    unsafe fn mm_tile<const P: usize>(
        w: &Panels,
        x: &Rows,
        i0: usize,
        rows: usize,
        p: usize,
        half: usize,
        y: *mut f32,
    ) {
        let kp = w.kp;
        let ng = kp / w.group;
        let octs = w.group / 8;
        let mut wp = w.data.as_ptr().add(p * kp * PANEL + half * 64);
        let sp = w.scales.as_ptr().add(p * ng * PANEL + half * 8);
        let base = x.data.as_ptr() as *const i8;
        let mut xr = [[base; 2]; P];
        for (q, pair) in xr.iter_mut().enumerate() {
            let a = i0 + 2 * q;
            let b = if 2 * q + 1 < rows { a + 1 } else { a };
            *pair = [base.add(a * kp), base.add(b * kp)];
        }
        // facc[q][h][c]: row 2q+h of the pair, columns 4c..4c+4 of the half panel.
        let mut facc = [[[vdupq_n_f32(0.0); 2]; 2]; P];
        for g in 0..ng {
            // iacc[q][c]: 2×2 block (rows 2q, 2q+1) × (columns 2c, 2c+1).
            let mut iacc = [[vdupq_n_s32(0); 4]; P];
            for _ in 0..octs {
                // SAFETY (all loads): as in `dot_tile`; both row pointers of a pair are < m.
                let wv = [vld1q_s8(wp), vld1q_s8(wp.add(16)), vld1q_s8(wp.add(32)), vld1q_s8(wp.add(48))];
                wp = wp.add(PANEL * 8);
                for (acc, pair) in iacc.iter_mut().zip(xr.iter_mut()) {
                    let xv = vcombine_s8(vld1_s8(pair[0]), vld1_s8(pair[1]));
                    pair[0] = pair[0].add(8);
                    pair[1] = pair[1].add(8);
                    for c in 0..4 {
                        acc[c] = smmla!(acc[c], xv, wv[c]);
                    }
                }
            }
            let s = [vld1q_f32(sp.add(g * PANEL)), vld1q_f32(sp.add(g * PANEL + 4))];
            for q in 0..P {
                for c in 0..2 {
                    // [r0·c0, r0·c1, r1·c0, r1·c1] ⊕ [r0·c2, ...]: zip the 64-bit halves into rows.
                    let lo = vreinterpretq_s64_s32(iacc[q][2 * c]);
                    let hi = vreinterpretq_s64_s32(iacc[q][2 * c + 1]);
                    let r0 = vreinterpretq_s32_s64(vzip1q_s64(lo, hi));
                    let r1 = vreinterpretq_s32_s64(vzip2q_s64(lo, hi));
                    facc[q][0][c] = vfmaq_f32(facc[q][0][c], vcvtq_f32_s32(r0), s[c]);
                    facc[q][1][c] = vfmaq_f32(facc[q][1][c], vcvtq_f32_s32(r1), s[c]);
                }
            }
        }
        let col0 = p * PANEL + half * 8;
        for q in 0..P {
            for h in 0..2 {
                let r = 2 * q + h;
                if r >= rows {
                    continue;
                }
                let sx = *x.scales.get_unchecked(i0 + r);
                store8(y, w.n, i0 + r, col0, vmulq_n_f32(facc[q][h][0], sx), vmulq_n_f32(facc[q][h][1], sx));
            }
        }
    }
}
