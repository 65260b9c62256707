//! x86_64 int8 kernels: AVX-512 VNNI (`vpdpbusd`) and AVX2 (`vpmaddubsw` + `vpmaddwd`).

use std::arch::x86_64::*;

use super::{Int8Weights, QuantizedRows, WeightScales, PANEL, VNNI_TILE_ROWS};

/// Activation rows per VNNI tile with per-row scales: 12 rows × 2 panels = 24 i32 accumulators in
/// zmm. Each 64-byte weight load feeds 12 `vpdpbusd` (half the L2 traffic of 6 rows).
const MR_VNNI: usize = VNNI_TILE_ROWS;
/// Rows per VNNI tile with scale groups: 12 i32 + 12 f32 accumulators.
const MR_GROUPED: usize = 6;
/// Bytes ahead of the current weight quad to prefetch in each panel: the hardware prefetcher
/// alone left the loads of the second panel stream waiting on L2.
const PREFETCH: usize = 1024;
/// Sub-tiles per panel pair up to which the next pair is prefetched into L2 (8: blocks of up to
/// 48 rows with scale groups).
const NEXT_PAIR_MAX_SUBTILES: usize = 8;
/// Panel bytes from which weights are prefetched.
const PREFETCH_MIN_PANEL: usize = 16 * 1024;
/// Activation rows per AVX2 tile (16 ymm registers: 2·MR i32 + 2·MR f32 + operands).
const MR_AVX2: usize = 3;

/// `$body` once per index `$r` in `0..$mr` (`$mr` ≤ 12 a constant), unrolled by the macro: LLVM
/// leaves a 12-row loop rolled, and accumulators indexed in a loop would live on the stack.
macro_rules! each_row {
    ($mr:expr, $r:ident, $body:block) => {
        each_row!(@ $mr, $r, $body, 0 1 2 3 4 5 6 7 8 9 10 11)
    };
    (@ $mr:expr, $r:ident, $body:block, $($i:literal)*) => {
        $( if $i < $mr { let $r: usize = $i; $body } )*
    };
}

/// Runs VNNI tiles over panels `p0..p1` (at most 2) for all `m` rows.
///
/// Per-row scales: tiles of up to 12 rows (24 i32 accumulators; the f32 result is formed once,
/// at the end). Scale groups: sub-tiles of up to 6 rows, whose running f32 sums take the other 12
/// registers (12-row tiles would have to keep them in memory, and the load, convert, multiply-add
/// and store per accumulator and group then cost more than the shorter weight reuse).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn vnni_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    let np = p1 - p0;
    let grouped = w.n_groups() > 1;
    let sub = if grouped { MR_GROUPED } else { MR_VNNI };
    let pstride = if w.nibbles { w.kp * PANEL / 2 } else { w.kp * PANEL };
    // The next panel pair (usually this thread's next task) is prefetched into L2 while this
    // one runs, each sub-tile taking an equal share spread over its steps: otherwise the first
    // sub-tile of every pair pulls it from DRAM in a burst faster than DRAM delivers, and waits
    // (LLaDA-8B shapes on the Zen 4 VM: a dual-cache step's GEMMs 4-12 % faster). Only for int8
    // codes with scale groups and few sub-tiles (short blocks): with many sub-tiles the burst is
    // a small part of a pair's time, and there, as for the per-row and 4-bit kernels, the
    // prefetches cost more than they saved (the per-row kernel lost a third of its rate).
    let n_sub: usize = (0..m).step_by(MR_VNNI).map(|i| (m - i).min(MR_VNNI).div_ceil(sub)).sum();
    let next_on = grouped && !w.nibbles && n_sub <= NEXT_PAIR_MAX_SUBTILES && pstride >= PREFETCH_MIN_PANEL;
    let next_panels = if next_on { w.n_panels().saturating_sub(p1).min(2) } else { 0 };
    let next_lines = next_panels * pstride / 64;
    let mut s_idx = 0;
    let mut i = 0;
    while i < m {
        // One tile of the activation layout: rows i..i+mr_l, quads interleaved with stride mr_l.
        let mr_l = (m - i).min(MR_VNNI);
        let tile = xq.data.as_ptr().wrapping_add(i * w.kp);
        // Equal sub-tiles (8 rows with groups: 4 + 4, not 6 + 2, which would reuse each weight
        // load only twice).
        let base = mr_l.div_ceil(mr_l.div_ceil(sub));
        let mut r0 = 0;
        while r0 < mr_l {
            let mr = (mr_l - r0).min(base);
            let share = next_lines.div_ceil(n_sub.max(1));
            let t = Tile {
                row: i + r0,
                x: tile.wrapping_add(4 * r0),
                x_step: 4 * mr_l,
                p0,
                next: (w.data.as_ptr() as *const u8).wrapping_add(p1 * pstride + s_idx * share * 64),
                next_lines: share.min(next_lines.saturating_sub(s_idx * share)),
            };
            s_idx += 1;
            macro_rules! go {
                ($g:literal, $h:literal; $($a:literal, $b:literal);*) => {
                    match (mr, np) {
                        $(($a, $b) if w.nibbles => vnni_tile::<$a, $b, true, $g, $h>(w, xq, t, y),
                          ($a, $b) => vnni_tile::<$a, $b, false, $g, $h>(w, xq, t, y),)*
                        _ => unreachable!(),
                    }
                };
            }
            // f16 scales come only with scale groups (`Isa::runs`).
            if grouped && w.scales.is_f16() {
                go!(true, true; 1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 1,2; 2,2; 3,2; 4,2; 5,2; 6,2);
            } else if grouped {
                go!(true, false; 1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 1,2; 2,2; 3,2; 4,2; 5,2; 6,2);
            } else {
                go!(false, false; 1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 7,1; 8,1; 9,1; 10,1; 11,1; 12,1;
                    1,2; 2,2; 3,2; 4,2; 5,2; 6,2; 7,2; 8,2; 9,2; 10,2; 11,2; 12,2);
            }
            r0 += mr;
        }
        i += mr_l;
    }
}

/// Where a tile's rows start and how its activations are walked.
#[derive(Clone, Copy)]
struct Tile {
    /// First output row.
    row: usize,
    /// The tile's first activation quad (row `row`, k 0..4).
    x: *const u8,
    /// Bytes from one quad of the tile's rows to the next (4 × rows of its layout tile).
    x_step: usize,
    /// First weight panel.
    p0: usize,
    /// This tile's share of the next panel pair, prefetched into L2 over its steps.
    next: *const u8,
    next_lines: usize,
}

/// The start of a panel-ordered scale array of either form; the kernels' `F16` parameter says
/// which (`WeightScales::is_f16`).
#[derive(Clone, Copy)]
struct ScalePtr(*const u8);

impl ScalePtr {
    fn new(s: &WeightScales) -> Self {
        match s {
            WeightScales::F32(v) => ScalePtr(v.as_ptr() as *const u8),
            WeightScales::F16(v) => ScalePtr(v.as_ptr() as *const u8),
        }
    }

    /// Address of scale `i`.
    fn at<const F16: bool>(self, i: usize) -> *const u8 {
        self.0.wrapping_add(i * if F16 { 2 } else { 4 })
    }

    /// Scales `i..i+16` as f32.
    ///
    /// # Safety
    /// AVX-512 F; 16 scales of the `F16` form lie there.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zmm<const F16: bool>(self, i: usize) -> __m512 {
        let p = self.at::<F16>(i);
        if F16 {
            _mm512_cvtph_ps(_mm256_lddqu_si256(p as *const __m256i))
        } else {
            _mm512_maskz_loadu_ps(0xFFFF, p as *const f32)
        }
    }

    /// Scales `i..i+8` as f32.
    ///
    /// # Safety
    /// AVX2 and F16C; 8 scales of the `F16` form lie there.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn ymm<const F16: bool>(self, i: usize) -> __m256 {
        let p = self.at::<F16>(i);
        if F16 {
            _mm256_cvtph_ps(_mm_lddqu_si128(p as *const __m128i))
        } else {
            _mm256_castsi256_ps(_mm256_lddqu_si256(p as *const __m256i))
        }
    }
}

/// One MR×(NP·16) tile: rows `t.row..t.row+MR` of x against panels `t.p0..t.p0+NP`, all of k.
///
/// Pointers advance with `wrapping_add` and loads are full-mask masked loads: the dev profile
/// (tests, `bench/run`) keeps debug assertions, and the overflow / `read_unaligned` checks of
/// the plain forms would otherwise outnumber the `vpdpbusd`s in the inner loop.
///
/// `NIB`: 4-bit codes (+8 biased, quad 2o low / 2o+1 high nibbles of 64-byte oct o), unpacked in
/// registers (`and`, `srli`, `sub`) and then used exactly like the int8 codes. `GROUPED`: one scale
/// per 32 k (else one per row, and the integer sums run over all of k). `F16`: the scales are
/// f16 (`WeightScales::F16`, only with `GROUPED`), widened per group in registers.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_tile<const MR: usize, const NP: usize, const NIB: bool, const GROUPED: bool, const F16: bool>(
    w: &Int8Weights,
    xq: &QuantizedRows,
    t: Tile,
    y: *mut f32,
) {
    let (kp, ng) = (w.kp, w.n_groups());
    let quads = w.group / 4;
    let pstride = if NIB { kp * PANEL / 2 } else { kp * PANEL };
    let (low4, eight) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(8));
    let (steps, subs) = if NIB { (quads / 2, 2) } else { (quads, 1) };
    let mut wp = w.data.as_ptr().wrapping_add(t.p0 * pstride);
    let sb = ScalePtr::new(&w.scales);
    let s0 = t.p0 * ng * PANEL;
    let mut xp = t.x;
    // Prefetching pays where a panel outgrows L1's share (k = 4096); on small panels (k = 192)
    // it only costs issue slots.
    let far = pstride >= PREFETCH_MIN_PANEL;
    let total_steps = ng * steps;
    // Fixed point (16 bits): lines of the next pair per step.
    let per_step = if total_steps > 0 { (t.next_lines << 16) / total_steps } else { 0 };
    let mut step_no = 0usize;
    let mut facc = [[_mm512_setzero_ps(); NP]; MR];
    let mut iacc = [[_mm512_setzero_si512(); NP]; MR];
    for g in 0..ng {
        if GROUPED {
            iacc = [[_mm512_setzero_si512(); NP]; MR];
        }
        for _ in 0..steps {
            let mut wv = [[_mm512_setzero_si512(); NP]; 2];
            each_row!(NP, p, {
                let at = wp.wrapping_add(p * pstride);
                // SAFETY: panel p0+p < n_panels and the current quad (int8) or oct (4-bit)
                // < kp/4 or kp/8: 64 bytes inside `data`. A prefetch never faults.
                let raw = _mm512_maskz_loadu_epi32(0xFFFF, at as *const i32);
                if far {
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH) as *const i8);
                }
                if NIB {
                    wv[0][p] = _mm512_sub_epi8(_mm512_and_si512(raw, low4), eight);
                    wv[1][p] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), eight);
                } else {
                    wv[0][p] = raw;
                }
            });
            for wq in wv.iter().take(subs) {
                each_row!(MR, r, {
                    // SAFETY: row t.row+r < m and the current quad < kp/4: 4 bytes inside the
                    // activations (layout in `QuantizedRows`).
                    let xv = _mm512_set1_epi32(i32::from_le_bytes((xp.wrapping_add(4 * r) as *const [u8; 4]).read()));
                    each_row!(NP, p, {
                        iacc[r][p] = _mm512_dpbusd_epi32(iacc[r][p], xv, wq[p]);
                    });
                });
                xp = xp.wrapping_add(t.x_step);
            }
            wp = wp.wrapping_add(64);
            if GROUPED && !NIB && t.next_lines > 0 {
                // SAFETY: a prefetch never faults; `line` < next_lines keeps it inside `data`.
                let line = (step_no * per_step) >> 16;
                _mm_prefetch::<_MM_HINT_T1>(t.next.wrapping_add(line * 64) as *const i8);
                step_no += 1;
            }
        }
        if GROUPED {
            each_row!(NP, p, {
                // SAFETY: group g of panel p0+p is inside `scales` (of the form `F16` says).
                let s = sb.zmm::<F16>(s0 + p * ng * PANEL + g * PANEL);
                each_row!(MR, r, {
                    facc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][p]), s, facc[r][p]);
                });
            });
        }
    }
    if !GROUPED {
        each_row!(NP, p, {
            // SAFETY: the one group of panel p0+p is inside `scales` (f32: no f16 without groups).
            let s = sb.zmm::<false>(s0 + p * ng * PANEL);
            each_row!(MR, r, {
                facc[r][p] = _mm512_mul_ps(_mm512_cvtepi32_ps(iacc[r][p]), s);
            });
        });
    }
    let n = w.n;
    each_row!(NP, p, {
        let col0 = (t.p0 + p) * PANEL;
        let valid = (n - col0).min(PANEL);
        let mask: u16 = if valid == PANEL { 0xFFFF } else { (1u16 << valid) - 1 };
        // SAFETY: `comp` has n_panels·16 entries.
        let c = _mm512_maskz_loadu_ps(0xFFFF, w.comp.as_ptr().wrapping_add(col0));
        each_row!(MR, r, {
            let row = t.row + r;
            let v = _mm512_mul_ps(_mm512_sub_ps(facc[r][p], c), _mm512_set1_ps(xq.scales[row]));
            // SAFETY: masked to the valid columns of row < m; this task owns these columns.
            _mm512_mask_storeu_ps(y.wrapping_add(row * n + col0), mask, v);
        });
    });
}

/// One tile's row-major activation codes `rows[mr][kp]` into the VNNI layout `[kp/4][mr][4]`
/// (`QuantizedRows`): 16 quads of a row per load, scattered with stride `4·mr`.
///
/// # Safety
/// AVX-512 F must be available; `rows.len() == mr·kp` with `kp % 4 == 0`, `tile.len() ≥ mr·kp`.
#[target_feature(enable = "avx512f")]
pub unsafe fn interleave_tile(rows: &[u8], tile: &mut [u8], kp: usize) {
    let mr = rows.len() / kp;
    let quads = kp / 4;
    let stride = _mm512_set1_epi32((4 * mr) as i32);
    let lanes = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), stride);
    for r in 0..mr {
        let src = rows.as_ptr().wrapping_add(r * kp);
        let dst = tile.as_mut_ptr().wrapping_add(4 * r);
        let mut q = 0;
        while q < quads {
            let n = (quads - q).min(16);
            let mask: u16 = if n == 16 { 0xFFFF } else { (1u16 << n) - 1 };
            // SAFETY: quads q..q+n of row r lie inside `rows`; their slots (q + j)·4·mr + 4r lie
            // inside `tile[..mr·kp]`; masked lanes are neither read nor written.
            let v = _mm512_maskz_loadu_epi32(mask, src.wrapping_add(4 * q) as *const i32);
            _mm512_mask_i32scatter_epi32::<1>(dst.wrapping_add(4 * q * mr) as *mut i32, mask, lanes, v);
            q += n;
        }
    }
}

/// Runs AVX2 tiles over panels `p0..p1`, one panel (two ymm halves) at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn avx2_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    for p in p0..p1 {
        let mut i = 0;
        while i < m {
            let mr = (m - i).min(MR_AVX2);
            macro_rules! go {
                ($h:literal) => {
                    match mr {
                        1 if w.nibbles => avx2_tile::<1, true, $h>(w, xq, i, p, y),
                        2 if w.nibbles => avx2_tile::<2, true, $h>(w, xq, i, p, y),
                        _ if w.nibbles => avx2_tile::<3, true, $h>(w, xq, i, p, y),
                        1 => avx2_tile::<1, false, $h>(w, xq, i, p, y),
                        2 => avx2_tile::<2, false, $h>(w, xq, i, p, y),
                        _ => avx2_tile::<3, false, $h>(w, xq, i, p, y),
                    }
                };
            }
            if w.scales.is_f16() {
                go!(true)
            } else {
                go!(false)
            }
            i += mr;
        }
    }
}

/// One MR×16 tile with the sign trick: |x| (u8) × (w with x's sign) (i8) stays within i16.
/// Loads use `lddqu` (an LLVM intrinsic, free of debug-build checks; see `vnni_tile`).
#[target_feature(enable = "avx2,fma,f16c")]
/// `NIB`: 4-bit codes, unpacked in registers as in `vnni_tile`; `F16`: f16 scales.
unsafe fn avx2_tile<const MR: usize, const NIB: bool, const F16: bool>(
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
    let sb = ScalePtr::new(&w.scales);
    let s0 = p * ng * PANEL;
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
        // SAFETY: group g's 16 scales of panel p lie inside `scales` (of the form `F16` says).
        let lo = sb.ymm::<F16>(s0 + g * PANEL);
        let hi = sb.ymm::<F16>(s0 + g * PANEL + 8);
        for r in 0..MR {
            facc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][0]), lo, facc[r][0]);
            facc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][1]), hi, facc[r][1]);
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
