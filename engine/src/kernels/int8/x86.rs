//! x86_64 int8 kernels: AVX-512 VNNI (`vpdpbusd`) and AVX2 (`vpmaddubsw` + `vpmaddwd`).

use std::arch::x86_64::*;

use super::{Int8Weights, QuantizedRows, PANEL};

/// Activation rows per VNNI tile: 6 rows × 2 panels = 12 i32 + 12 f32 accumulators in zmm.
const MR_VNNI: usize = 6;
/// Activation rows per AVX2 tile (16 ymm registers: 2·MR i32 + 2·MR f32 + operands).
const MR_AVX2: usize = 3;

/// Runs VNNI tiles over panels `p0..p1` (at most 2) for all `m` rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn vnni_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    let np = p1 - p0;
    let mut i = 0;
    while i < m {
        let mr = (m - i).min(MR_VNNI);
        macro_rules! go {
            ($($a:literal, $b:literal);*) => {
                match (mr, np) {
                    $(($a, $b) if w.nibbles => vnni_tile::<$a, $b, true>(w, xq, i, p0, y),
                      ($a, $b) => vnni_tile::<$a, $b, false>(w, xq, i, p0, y),)*
                    _ => unreachable!(),
                }
            };
        }
        go!(1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 1,2; 2,2; 3,2; 4,2; 5,2; 6,2);
        i += mr;
    }
}

/// One MR×(NP·16) tile: rows `i0..i0+MR` of x against panels `p0..p0+NP`, all of k.
///
/// Pointers advance with `wrapping_add` and loads are full-mask masked loads: the dev profile
/// (tests, `bench/run`) keeps debug assertions, and the overflow / `read_unaligned` checks of
/// the plain forms would otherwise outnumber the `vpdpbusd`s in the inner loop.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
///
/// `NIB`: 4-bit codes (+8 biased, quad 2o low / 2o+1 high nibbles of 64-byte oct o), unpacked in
/// registers (`and`, `srli`, `sub`) and then used exactly like the int8 codes.
unsafe fn vnni_tile<const MR: usize, const NP: usize, const NIB: bool>(
    w: &Int8Weights,
    xq: &QuantizedRows,
    i0: usize,
    p0: usize,
    y: *mut f32,
) {
    let (kp, ng) = (w.kp, w.n_groups());
    let quads = w.group / 4;
    let pstride = if NIB { kp * PANEL / 2 } else { kp * PANEL };
    let (low4, eight) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(8));
    let (steps, subs) = if NIB { (quads / 2, 2) } else { (quads, 1) };
    let mut wp = w.data.as_ptr().wrapping_add(p0 * pstride);
    let sb = w.scales.as_ptr().wrapping_add(p0 * ng * PANEL);
    let mut xr = [xq.data.as_ptr(); MR];
    for (r, x) in xr.iter_mut().enumerate() {
        *x = x.wrapping_add((i0 + r) * kp);
    }
    let mut facc = [[_mm512_setzero_ps(); NP]; MR];
    for g in 0..ng {
        let mut iacc = [[_mm512_setzero_si512(); NP]; MR];
        for _ in 0..steps {
            let mut wv = [[_mm512_setzero_si512(); NP]; 2];
            for p in 0..NP {
                // SAFETY: panel p0+p < n_panels and the current quad (int8) or oct (4-bit)
                // < kp/4 or kp/8: 64 bytes inside `data`.
                let raw = _mm512_maskz_loadu_epi32(0xFFFF, wp.wrapping_add(p * pstride) as *const i32);
                if NIB {
                    wv[0][p] = _mm512_sub_epi8(_mm512_and_si512(raw, low4), eight);
                    wv[1][p] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), eight);
                } else {
                    wv[0][p] = raw;
                }
            }
            for wq in wv.iter().take(subs) {
                for (acc, x) in iacc.iter_mut().zip(xr.iter_mut()) {
                    // SAFETY: row i0+r < m and the current quad < kp/4: 4 bytes inside the activations.
                    let xv = _mm512_set1_epi32(i32::from_le_bytes((*x as *const [u8; 4]).read()));
                    *x = x.wrapping_add(4);
                    for p in 0..NP {
                        acc[p] = _mm512_dpbusd_epi32(acc[p], xv, wq[p]);
                    }
                }
            }
            wp = wp.wrapping_add(64);
        }
        for p in 0..NP {
            // SAFETY: group g of panel p0+p is inside `scales`.
            let s = _mm512_maskz_loadu_ps(0xFFFF, sb.wrapping_add(p * ng * PANEL + g * PANEL));
            for r in 0..MR {
                facc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][p]), s, facc[r][p]);
            }
        }
    }
    let n = w.n;
    for p in 0..NP {
        let col0 = (p0 + p) * PANEL;
        let valid = (n - col0).min(PANEL);
        let mask: u16 = if valid == PANEL { 0xFFFF } else { (1u16 << valid) - 1 };
        // SAFETY: `comp` has n_panels·16 entries.
        let c = _mm512_maskz_loadu_ps(0xFFFF, w.comp.as_ptr().wrapping_add(col0));
        for r in 0..MR {
            let v = _mm512_mul_ps(_mm512_sub_ps(facc[r][p], c), _mm512_set1_ps(xq.scales[i0 + r]));
            // SAFETY: masked to the valid columns of row i0+r < m; this task owns these columns.
            _mm512_mask_storeu_ps(y.wrapping_add((i0 + r) * n + col0), mask, v);
        }
    }
}

/// Runs AVX2 tiles over panels `p0..p1`, one panel (two ymm halves) at a time.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn avx2_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    for p in p0..p1 {
        let mut i = 0;
        while i < m {
            let mr = (m - i).min(MR_AVX2);
            match mr {
                1 if w.nibbles => avx2_tile::<1, true>(w, xq, i, p, y),
                2 if w.nibbles => avx2_tile::<2, true>(w, xq, i, p, y),
                _ if w.nibbles => avx2_tile::<3, true>(w, xq, i, p, y),
                1 => avx2_tile::<1, false>(w, xq, i, p, y),
                2 => avx2_tile::<2, false>(w, xq, i, p, y),
                _ => avx2_tile::<3, false>(w, xq, i, p, y),
            }
            i += mr;
        }
    }
}

/// One MR×16 tile with the sign trick: |x| (u8) × (w with x's sign) (i8) stays within i16.
/// Loads use `lddqu` (an LLVM intrinsic, free of debug-build checks; see `vnni_tile`).
#[target_feature(enable = "avx2,fma")]
/// `NIB`: 4-bit codes, unpacked in registers as in `vnni_tile`.
unsafe fn avx2_tile<const MR: usize, const NIB: bool>(
    w: &Int8Weights,
    xq: &QuantizedRows,
    i0: usize,
    p: usize,
    y: *mut f32,
) {
    let (kp, ng) = (w.kp, w.n_groups());
    let quads = w.group / 4;
    let (steps, subs) = if NIB { (quads / 2, 2) } else { (quads, 1) };
    let (low4, eight) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(8));
    let mut wp = w.data.as_ptr().wrapping_add(p * w.panel_bytes());
    let sb = w.scales.as_ptr().wrapping_add(p * ng * PANEL);
    let mut xr = [xq.data.as_ptr(); MR];
    for (r, x) in xr.iter_mut().enumerate() {
        *x = x.wrapping_add((i0 + r) * kp);
    }
    let ones = _mm256_set1_epi16(1);
    let mut facc = [[_mm256_setzero_ps(); 2]; MR];
    for g in 0..ng {
        let mut iacc = [[_mm256_setzero_si256(); 2]; MR];
        for _ in 0..steps {
            // SAFETY: the current 64-byte k-quad (int8) or k-oct (4-bit) of panel p lies inside `data`.
            let r0 = _mm256_lddqu_si256(wp as *const __m256i);
            let r1 = _mm256_lddqu_si256(wp.wrapping_add(32) as *const __m256i);
            wp = wp.wrapping_add(64);
            let wv = if NIB {
                macro_rules! lo {
                    ($v:expr) => {
                        _mm256_sub_epi8(_mm256_and_si256($v, low4), eight)
                    };
                }
                macro_rules! hi {
                    ($v:expr) => {
                        _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16($v, 4), low4), eight)
                    };
                }
                [[lo!(r0), lo!(r1)], [hi!(r0), hi!(r1)]]
            } else {
                [[r0, r1], [r0, r1]]
            };
            for [w0, w1] in wv.into_iter().take(subs) {
                for (acc, x) in iacc.iter_mut().zip(xr.iter_mut()) {
                    // SAFETY: row i0+r < m and the current quad < kp/4.
                    let xv = _mm256_set1_epi32(i32::from_le_bytes((*x as *const [u8; 4]).read()));
                    *x = x.wrapping_add(4);
                    let ax = _mm256_abs_epi8(xv);
                    let d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xv)), ones);
                    let d1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xv)), ones);
                    acc[0] = _mm256_add_epi32(acc[0], d0);
                    acc[1] = _mm256_add_epi32(acc[1], d1);
                }
            }
        }
        // SAFETY: group g's 16 scales of panel p lie inside `scales`.
        let s0 = _mm256_castsi256_ps(_mm256_lddqu_si256(sb.wrapping_add(g * PANEL) as *const __m256i));
        let s1 = _mm256_castsi256_ps(_mm256_lddqu_si256(sb.wrapping_add(g * PANEL + 8) as *const __m256i));
        for r in 0..MR {
            facc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][0]), s0, facc[r][0]);
            facc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][1]), s1, facc[r][1]);
        }
    }
    let n = w.n;
    let col0 = p * PANEL;
    let valid = (n - col0).min(PANEL);
    for r in 0..MR {
        let sx = _mm256_set1_ps(xq.scales[i0 + r]);
        let mut tmp = [0.0f32; PANEL];
        _mm256_storeu_ps(tmp.as_mut_ptr(), _mm256_mul_ps(facc[r][0], sx));
        _mm256_storeu_ps(tmp.as_mut_ptr().add(8), _mm256_mul_ps(facc[r][1], sx));
        // SAFETY: row i0+r < m, columns col0..col0+valid < n are owned by this task.
        std::ptr::copy_nonoverlapping(tmp.as_ptr(), y.add((i0 + r) * n + col0), valid);
    }
}
