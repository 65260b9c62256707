//! Our own register-blocked f32 GEMM, `y[m, n] = x[m, k] · Wᵀ`, to compare against the `gemm` crate.
//!
//! Weights are packed once into 16-column panels `[panel][k][16]` f32 (Wᵀ, zero-padded in n), so
//! the AVX-512 microkernel reads one zmm per panel per k and broadcasts x: an 8×32 tile keeps 16
//! zmm accumulators. k is blocked by [`KC`] so a 2-panel strip (32·KC·4 = 64 KiB) stays in L2.
//! Where AVX-512 is missing but AVX2 and FMA are present, the same panels run through a 6×16
//! tile of 12 ymm accumulators (two ymm per panel row).
//!
//! Measured (Zen 4 KVM guest, 1 thread, load avg ~3.8, dev profile, k = n = 4096): ours 75 GFLOP/s
//! at m = 64 and 89 at m = 256 against 14.5 / 28.9 for `gemm` 0.19 (`x86-v4`) in the same run, so
//! [`super::linear::KernelChoice::Auto`] packs f32 weights for this kernel. Part of `gemm`'s
//! deficit is the dev profile's debug assertions inside it; a release-build comparison is pending.

use rayon::prelude::*;

/// Columns per packed panel (one zmm of f32).
pub const PANEL: usize = 16;
/// k per cache block (used by the x86 microkernel only).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const KC: usize = 512;

/// f32 weights packed as `[panel][k][16]`.
#[derive(Debug, Clone)]
pub struct PackedF32 {
    pub n: usize,
    pub k: usize,
    data: Vec<f32>,
}

impl PackedF32 {
    /// Packs `w[n][k]` (HF `[out, in]` rows) given row by row.
    pub fn pack(n: usize, k: usize, row: impl Fn(usize, &mut [f32]) + Sync) -> Self {
        let np = n.div_ceil(PANEL);
        let mut data = vec![0.0f32; np * k * PANEL];
        data.par_chunks_mut((k * PANEL).max(1)).enumerate().for_each(|(p, d)| {
            let mut r = vec![0.0f32; k];
            for c in 0..PANEL.min(n - p * PANEL) {
                row(p * PANEL + c, &mut r);
                for (t, v) in r.iter().enumerate() {
                    d[t * PANEL + c] = *v;
                }
            }
        });
        PackedF32 { n, k, data }
    }

    /// Row `j` of W (one output unit) into `out[k]`.
    pub fn row_into(&self, j: usize, out: &mut [f32]) {
        let (p, c) = (j / PANEL, j % PANEL);
        let d = &self.data[p * self.k * PANEL..(p + 1) * self.k * PANEL];
        for (t, o) in out.iter_mut().enumerate().take(self.k) {
            *o = d[t * PANEL + c];
        }
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    /// Overwrites these weights with `src`'s in place (no allocation; a staging-slot fill of the
    /// memory runtime). False when the shapes differ.
    pub fn copy_from(&mut self, src: &PackedF32) -> bool {
        if (self.n, self.k, self.data.len()) != (src.n, src.k, src.data.len()) {
            return false;
        }
        self.data.copy_from_slice(&src.data);
        true
    }
}

/// Plain reference (f64 accumulation) on unpacked row-major weights.
pub fn reference_gemm(w: &[f32], n: usize, k: usize, x: &[f32], m: usize, y: &mut [f32]) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for t in 0..k {
                acc += x[i * k + t] as f64 * w[j * k + t] as f64;
            }
            y[i * n + j] = acc as f32;
        }
    }
}

/// Whether a SIMD microkernel (AVX-512, or AVX2 with FMA) can run here.
pub fn available() -> bool {
    isa() != Isa::Scalar
}

/// The microkernel's name, for reports ("avx512", "avx2", "scalar").
pub fn kernel_name() -> &'static str {
    match isa() {
        Isa::Avx512 => "avx512",
        Isa::Avx2 => "avx2",
        Isa::Scalar => "scalar",
    }
}

#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint column strips of `y`.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// The microkernel this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Isa {
    Avx512,
    Avx2,
    Scalar,
}

fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// One strip of panels `p0..p1` for all rows, with the kernel `isa` names.
fn strip(isa: Isa, w: &PackedF32, x: &[f32], m: usize, p0: usize, p1: usize, y: *mut f32) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected; the callers checked the buffer sizes.
        Isa::Avx512 => unsafe { x86::strip(w, x, m, p0, p1, y) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA were detected; the callers checked the buffer sizes.
        Isa::Avx2 => unsafe { x86_avx2::strip(w, x, m, p0, p1, y) },
        _ => scalar_strip(w, x, m, p0, p1, y),
    }
}

/// `y = x · Wᵀ` (overwrites `y`); scalar loops where neither AVX-512 nor AVX2+FMA is present.
pub fn gemm(w: &PackedF32, x: &[f32], m: usize, y: &mut [f32]) {
    assert!(x.len() >= m * w.k && y.len() >= m * w.n);
    let np = w.n.div_ceil(PANEL);
    let out = OutPtr(y.as_mut_ptr());
    let isa = isa();
    (0..np.div_ceil(2)).into_par_iter().for_each(|t| {
        let out = out;
        let (p0, p1) = (2 * t, (2 * t + 2).min(np));
        strip(isa, w, x, m, p0, p1, out.0);
    });
}
/// [`gemm`] on the calling thread only: for callers that already run one task per worker (a
/// grouped expert launch), where splitting each small product again costs more than it gains.
pub fn gemm_serial(w: &PackedF32, x: &[f32], m: usize, y: &mut [f32]) {
    assert!(x.len() >= m * w.k && y.len() >= m * w.n);
    let np = w.n.div_ceil(PANEL);
    let isa = isa();
    // Strips of two panels, as the parallel path cuts them (the microkernel's widest tile).
    for t in 0..np.div_ceil(2) {
        let (p0, p1) = (2 * t, (2 * t + 2).min(np));
        strip(isa, w, x, m, p0, p1, y.as_mut_ptr());
    }
}

fn scalar_strip(w: &PackedF32, x: &[f32], m: usize, p0: usize, p1: usize, y: *mut f32) {
    let k = w.k;
    for p in p0..p1 {
        let d = &w.data[p * k * PANEL..(p + 1) * k * PANEL];
        for c in 0..PANEL.min(w.n - p * PANEL) {
            for i in 0..m {
                let acc: f32 = (0..k).map(|t| x[i * k + t] * d[t * PANEL + c]).sum();
                // SAFETY: i < m, column p·16+c < n, owned by this task.
                unsafe { *y.add(i * w.n + p * PANEL + c) = acc };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{PackedF32, KC, PANEL};

    const MR: usize = 8;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn strip(w: &PackedF32, x: &[f32], m: usize, p0: usize, p1: usize, y: *mut f32) {
        let np = p1 - p0;
        let mut k0 = 0;
        while k0 < w.k {
            let kc = (w.k - k0).min(KC);
            let mut i = 0;
            while i < m {
                let mr = (m - i).min(MR);
                macro_rules! go {
                    ($($a:literal, $b:literal);*) => {
                        match (mr, np) {
                            $(($a, $b) => tile::<$a, $b>(w, x, i, p0, k0, kc, y),)*
                            _ => unreachable!(),
                        }
                    };
                }
                go!(1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 7,1; 8,1; 1,2; 2,2; 3,2; 4,2; 5,2; 6,2; 7,2; 8,2);
                i += mr;
            }
            k0 += kc;
        }
    }

    /// MR×(NP·16) tile over k0..k0+kc, accumulating into y (zero-started at k0 = 0).
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const MR: usize, const NP: usize>(
        w: &PackedF32,
        x: &[f32],
        i0: usize,
        p0: usize,
        k0: usize,
        kc: usize,
        y: *mut f32,
    ) {
        let (n, k) = (w.n, w.k);
        let mut acc = [[_mm512_setzero_ps(); NP]; MR];
        let mut masks = [0u16; NP];
        for (p, mk) in masks.iter_mut().enumerate() {
            let valid = (n - (p0 + p) * PANEL).min(PANEL);
            *mk = if valid == PANEL { 0xFFFF } else { (1u16 << valid) - 1 };
        }
        if k0 > 0 {
            for r in 0..MR {
                for p in 0..NP {
                    // SAFETY: masked load of row i0+r < m, valid columns of panel p0+p.
                    acc[r][p] = _mm512_maskz_loadu_ps(masks[p], y.add((i0 + r) * n + (p0 + p) * PANEL));
                }
            }
        }
        // Pointers advance with `wrapping_add` and loads are full-mask masked loads, free of the
        // debug-build checks the dev profile would add to `add` / `loadu` (see `int8::vnni_tile`).
        let mut wp = w.data.as_ptr().wrapping_add(p0 * k * PANEL + k0 * PANEL);
        let mut xr = [x.as_ptr(); MR];
        for (r, xp) in xr.iter_mut().enumerate() {
            *xp = xp.wrapping_add((i0 + r) * k + k0);
        }
        for _ in 0..kc {
            let mut wv = [_mm512_setzero_ps(); NP];
            for (p, v) in wv.iter_mut().enumerate() {
                // SAFETY: the current t < k and panel p0+p exists, so 16 floats lie inside `data`.
                *v = _mm512_maskz_loadu_ps(0xFFFF, wp.wrapping_add(p * k * PANEL));
            }
            wp = wp.wrapping_add(PANEL);
            for (r, xp) in xr.iter_mut().enumerate() {
                // SAFETY: row i0+r < m and the current t < k.
                let xv = _mm512_set1_ps(xp.read());
                *xp = xp.wrapping_add(1);
                for p in 0..NP {
                    acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
                }
            }
        }
        for r in 0..MR {
            for p in 0..NP {
                // SAFETY: masked store to the valid columns this task owns.
                _mm512_mask_storeu_ps(y.add((i0 + r) * n + (p0 + p) * PANEL), masks[p], acc[r][p]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_avx2 {
    use std::arch::x86_64::*;

    use super::{PackedF32, KC, PANEL};

    /// Rows per tile: 6 rows × 2 ymm = 12 accumulators, plus 2 weight registers and a broadcast.
    const MR: usize = 6;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn strip(w: &PackedF32, x: &[f32], m: usize, p0: usize, p1: usize, y: *mut f32) {
        for p in p0..p1 {
            let mut k0 = 0;
            while k0 < w.k {
                let kc = (w.k - k0).min(KC);
                let mut i = 0;
                while i < m {
                    let mr = (m - i).min(MR);
                    match mr {
                        1 => tile::<1>(w, x, i, p, k0, kc, y),
                        2 => tile::<2>(w, x, i, p, k0, kc, y),
                        3 => tile::<3>(w, x, i, p, k0, kc, y),
                        4 => tile::<4>(w, x, i, p, k0, kc, y),
                        5 => tile::<5>(w, x, i, p, k0, kc, y),
                        _ => tile::<6>(w, x, i, p, k0, kc, y),
                    }
                    i += mr;
                }
                k0 += kc;
            }
        }
    }

    /// MR×16 tile of panel `p` over k0..k0+kc, accumulating into y (zero-started at k0 = 0).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const MR: usize>(w: &PackedF32, x: &[f32], i0: usize, p: usize, k0: usize, kc: usize, y: *mut f32) {
        let (n, k) = (w.n, w.k);
        let valid = (n - p * PANEL).min(PANEL);
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        if k0 > 0 {
            for (r, a) in acc.iter_mut().enumerate() {
                let mut row = [0.0f32; PANEL];
                // SAFETY: row i0+r < m; `valid` columns of panel p lie inside y's row.
                std::ptr::copy_nonoverlapping(y.add((i0 + r) * n + p * PANEL), row.as_mut_ptr(), valid);
                a[0] = _mm256_loadu_ps(row.as_ptr());
                a[1] = _mm256_loadu_ps(row.as_ptr().add(8));
            }
        }
        let mut wp = w.data.as_ptr().wrapping_add(p * k * PANEL + k0 * PANEL);
        let mut xr = [x.as_ptr(); MR];
        for (r, xp) in xr.iter_mut().enumerate() {
            *xp = xp.wrapping_add((i0 + r) * k + k0);
        }
        for _ in 0..kc {
            // SAFETY: t < k and panel p exists, so 16 floats lie inside `data` (zero-padded).
            let w0 = _mm256_loadu_ps(wp);
            let w1 = _mm256_loadu_ps(wp.wrapping_add(8));
            wp = wp.wrapping_add(PANEL);
            for (r, xp) in xr.iter_mut().enumerate() {
                // SAFETY: row i0+r < m and the current t < k.
                let xv = _mm256_broadcast_ss(&*(*xp));
                *xp = xp.wrapping_add(1);
                acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let dst = y.add((i0 + r) * n + p * PANEL);
            if valid == PANEL {
                // SAFETY: the whole panel's 16 columns of row i0+r belong to this task.
                _mm256_storeu_ps(dst, a[0]);
                _mm256_storeu_ps(dst.add(8), a[1]);
            } else {
                let mut row = [0.0f32; PANEL];
                _mm256_storeu_ps(row.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(row.as_mut_ptr().add(8), a[1]);
                // SAFETY: only the `valid` columns inside y's row are written.
                std::ptr::copy_nonoverlapping(row.as_ptr(), dst, valid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn matches_reference(m in 1usize..20, n in 1usize..70, k in 1usize..1100, seed in 0u64..1000) {
            let w: Vec<f32> = (0..n * k).map(|i| ((i as u64 * 40503 + seed) % 997) as f32 / 498.0 - 1.0).collect();
            let x: Vec<f32> = (0..m * k).map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0 - 1.0).collect();
            let pw = PackedF32::pack(n, k, |j, r| r.copy_from_slice(&w[j * k..(j + 1) * k]));
            let mut y = vec![f32::NAN; m * n];
            let mut r = vec![0.0; m * n];
            gemm(&pw, &x, m, &mut y);
            reference_gemm(&w, n, k, &x, m, &mut r);
            for (a, b) in y.iter().zip(&r) {
                prop_assert!((a - b).abs() <= 1e-4 * (1.0 + (k as f32).sqrt()) * (1.0 + b.abs()), "{} vs {}", a, b);
            }
        }
    }
}
