//! Plain references of the int8 GEMM and the portable kernel over the packed layout.

use super::{Int8Weights, QuantizedRows, PANEL};

/// Absmax quantisation of `x` into `q` (codes in ±127); returns the scale (0 for an all-zero `x`).
pub fn quantize_into(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let inv = 127.0 / amax;
    for (o, v) in q.iter_mut().zip(x) {
        *o = (v * inv).round().clamp(-127.0, 127.0) as i8;
    }
    amax / 127.0
}

/// Plain reference: `y[i, j] = sx[i] · Σ_g sw[j, g] · Σ_{k∈g} qx·qw` from unpacked codes, with
/// i32 inner sums and f64 outer sums.
pub fn reference_gemm(
    qx: &[i8],
    sx: &[f32],
    m: usize,
    qw: &[i8],
    sw: &[f32],
    n: usize,
    kp: usize,
    group: usize,
    y: &mut [f32],
) {
    let ng = kp / group;
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for g in 0..ng {
                let mut s = 0i32;
                for t in g * group..(g + 1) * group {
                    s += qx[i * kp + t] as i32 * qw[j * kp + t] as i32;
                }
                acc += sw[j * ng + g] as f64 * s as f64;
            }
            y[i * n + j] = (sx[i] as f64 * acc) as f32;
        }
    }
}

/// Scalar kernel over the packed layout (what the SIMD kernels compute, lane by lane).
pub(super) fn scalar_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    let (kp, ng, g) = (w.kp, w.n_groups(), w.group);
    for p in p0..p1 {
        let s = |i: usize| w.scales.get(p * ng * PANEL + i);
        for r in 0..PANEL.min(w.n - p * PANEL) {
            let j = p * PANEL + r;
            for i in 0..m {
                let x = &xq.data[i * kp..(i + 1) * kp];
                let mut acc = 0.0f32;
                for gi in 0..ng {
                    let mut sum = 0i32;
                    for t in gi * g..(gi + 1) * g {
                        sum += (x[t] as i8) as i32 * w.code_in_panel(p, r, t) as i32;
                    }
                    acc += sum as f32 * s(gi * PANEL + r);
                }
                // SAFETY: i < m and j < n, and this task alone writes column j.
                unsafe { *y.add(i * w.n + j) = acc * xq.scales[i] };
            }
        }
    }
}
