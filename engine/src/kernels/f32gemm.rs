//! Our own register-blocked f32 GEMM, `y[m, n] = x[m, k] · Wᵀ`, to compare against the `gemm` crate.
//!
//! Weights are packed once into 16-column panels `[panel][k][16]` f32 (Wᵀ, zero-padded in n), so
//! the AVX-512 microkernel reads one zmm per panel per k and broadcasts x: an 8×32 tile keeps 16
//! zmm accumulators. k is blocked by [`KC`] so a 2-panel strip (32·KC·4 = 64 KiB) stays in L2.
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

/// Whether the AVX-512 microkernel can run here.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint column strips of `y`.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// `y = x · Wᵀ` (overwrites `y`); scalar loops where AVX-512 is missing.
pub fn gemm(w: &PackedF32, x: &[f32], m: usize, y: &mut [f32]) {
    assert!(x.len() >= m * w.k && y.len() >= m * w.n);
    let np = w.n.div_ceil(PANEL);
    let out = OutPtr(y.as_mut_ptr());
    let simd = available();
    (0..np.div_ceil(2)).into_par_iter().for_each(|t| {
        let out = out;
        let (p0, p1) = (2 * t, (2 * t + 2).min(np));
        if simd {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512F was detected; buffer sizes were checked above.
            unsafe {
                x86::strip(w, x, m, p0, p1, out.0)
            }
        } else {
            scalar_strip(w, x, m, p0, p1, out.0);
        }
    });
}

/// [`gemm`] on the calling thread only: for callers that already run one task per worker (a
/// grouped expert launch), where splitting each small product again costs more than it gains.
pub fn gemm_serial(w: &PackedF32, x: &[f32], m: usize, y: &mut [f32]) {
    assert!(x.len() >= m * w.k && y.len() >= m * w.n);
    let np = w.n.div_ceil(PANEL);
    let simd = available();
    // Strips of two panels, as the parallel path cuts them (the microkernel's widest tile).
    for t in 0..np.div_ceil(2) {
        let (p0, p1) = (2 * t, (2 * t + 2).min(np));
        if simd {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512F was detected; buffer sizes were checked above.
            unsafe {
                x86::strip(w, x, m, p0, p1, y.as_mut_ptr())
            }
        } else {
            scalar_strip(w, x, m, p0, p1, y.as_mut_ptr());
        }
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
