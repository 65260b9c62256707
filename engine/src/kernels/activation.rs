//! Element-wise activations and softmax: plain references and vectorised variants per
//! instruction set ([`super::simd::Simd`]) with a polynomial `exp` ([`super::simd::exp_approx`]).

use super::simd::{exp_approx, exp_f64, multiversion, Simd};

/// SiLU(x) = x·σ(x) (reference form, libm `exp`).
#[cfg(test)]
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate[i] = silu(gate[i]) * up[i]` (the SwiGLU product), in place.
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    swiglu_with(Simd::detect(), gate, up)
}

/// Reference of [`swiglu_inplace`].
#[cfg(test)]
pub fn swiglu_reference(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

multiversion! {
    /// [`swiglu_inplace`] with the variant of `simd`.
    pub fn swiglu_with(gate: &mut [f32], up: &[f32]) {
        for (g, &u) in gate.iter_mut().zip(up) {
            let x = *g;
            // exp(-x) overflows to +inf for x < -88.7: x / inf = -0, as the reference gives.
            let e = if -x > 88.0 { f32::INFINITY } else { exp_approx::<F>(-x) };
            *g = x / (1.0 + e) * u;
        }
    }
}

/// Numerically stable softmax in place.
pub fn softmax_inplace(x: &mut [f32]) {
    softmax_with(Simd::detect(), x)
}

/// Reference of [`softmax_inplace`] (f64).
#[cfg(test)]
pub fn softmax_reference(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return;
    }
    let e: Vec<f64> = x.iter().map(|&v| ((v - max) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    for (v, e) in x.iter_mut().zip(e) {
        *v = (e / sum) as f32;
    }
}

multiversion! {
    /// [`softmax_inplace`] with the variant of `simd`.
    pub fn softmax_with(x: &mut [f32]) {
        let mut mx = [f32::NEG_INFINITY; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                mx[i] = mx[i].max(c[i]);
            }
        }
        let max = chunks.remainder().iter().fold(mx.iter().copied().fold(f32::NEG_INFINITY, f32::max), |a, &b| a.max(b));
        if max == f32::NEG_INFINITY {
            return;
        }
        let mut acc = [0.0f32; L];
        let mut chunks = x.chunks_exact_mut(L);
        for c in &mut chunks {
            for i in 0..L {
                c[i] = exp_approx::<F>(c[i] - max);
                acc[i] += c[i];
            }
        }
        let mut sum: f32 = acc.iter().sum();
        for v in chunks.into_remainder() {
            *v = exp_approx::<F>(*v - max);
            sum += *v;
        }
        let inv = 1.0 / sum;
        for v in x.iter_mut() {
            *v *= inv;
        }
    }
}

/// Largest value of `x` (NaN ignored; `-inf` when empty).
pub fn max_f64(x: &[f64]) -> f64 {
    max_f64_with(Simd::detect(), x)
}

multiversion! {
    /// [`max_f64`] with the variant of `simd`.
    pub fn max_f64_with(x: &[f64]) -> f64 {
        let mut mx = [f64::NEG_INFINITY; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                mx[i] = mx[i].max(c[i]);
            }
        }
        chunks.remainder().iter().fold(mx.iter().copied().fold(f64::NEG_INFINITY, f64::max), |a, &b| a.max(b))
    }
}

/// `Σ e^(x_i − shift)` in f64: the softmax denominator once `shift` is the row's max.
pub fn sum_exp_shifted_f64(x: &[f64], shift: f64) -> f64 {
    sum_exp_shifted_f64_with(Simd::detect(), x, shift)
}

/// Reference of [`sum_exp_shifted_f64`] (libm `exp`, one sequential sum).
#[cfg(test)]
pub fn sum_exp_shifted_f64_reference(x: &[f64], shift: f64) -> f64 {
    x.iter().map(|&v| (v - shift).exp()).sum()
}

multiversion! {
    /// [`sum_exp_shifted_f64`] with the variant of `simd`.
    pub fn sum_exp_shifted_f64_with(x: &[f64], shift: f64) -> f64 {
        let mut acc = [0.0f64; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                acc[i] += exp_f64::<F>(c[i] - shift);
            }
        }
        let tail: f64 = chunks.remainder().iter().map(|&v| exp_f64::<F>(v - shift)).sum();
        acc.iter().sum::<f64>() + tail
    }
}

/// `x_i ← e^(x_i − shift)` in place, in f64; returns their sum.
pub fn exp_shifted_f64_inplace(x: &mut [f64], shift: f64) -> f64 {
    exp_shifted_f64_inplace_with(Simd::detect(), x, shift)
}

multiversion! {
    /// [`exp_shifted_f64_inplace`] with the variant of `simd`.
    pub fn exp_shifted_f64_inplace_with(x: &mut [f64], shift: f64) -> f64 {
        let mut acc = [0.0f64; L];
        let mut chunks = x.chunks_exact_mut(L);
        for c in &mut chunks {
            for i in 0..L {
                c[i] = exp_f64::<F>(c[i] - shift);
                acc[i] += c[i];
            }
        }
        let mut tail = 0.0;
        for v in chunks.into_remainder() {
            *v = exp_f64::<F>(*v - shift);
            tail += *v;
        }
        acc.iter().sum::<f64>() + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_matches_reference() {
        for n in [1usize, 5, 16, 33, 576, 4099] {
            let x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 211) as f32 - 105.0) / 9.0).collect();
            let u: Vec<f32> = (0..n).map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0).collect();
            let mut sw = x.clone();
            swiglu_reference(&mut sw, &u);
            let mut sm = x.clone();
            softmax_reference(&mut sm);
            for simd in Simd::all_available() {
                let mut g = x.clone();
                swiglu_with(simd, &mut g, &u);
                for (a, b) in g.iter().zip(&sw) {
                    assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{simd:?} swiglu: {a} vs {b}");
                }
                let mut s = x.clone();
                softmax_with(simd, &mut s);
                for (a, b) in s.iter().zip(&sm) {
                    assert!((a - b).abs() <= 1e-6 * (1e-3 + b.abs()), "{simd:?} softmax: {a} vs {b}");
                }
            }
        }
        let mut big = vec![-100.0f32, 100.0];
        swiglu_with(Simd::detect(), &mut big, &[1.0, 1.0]);
        assert_eq!(big, [-0.0, 100.0]);
    }

    #[test]
    fn f64_softmax_pieces_match_reference_in_every_variant() {
        for n in [0usize, 1, 7, 16, 33, 4099, 126_464] {
            let x: Vec<f64> = (0..n).map(|i| ((i * 7919 % 4093) as f64 - 2046.0) / 97.0).collect();
            let mut with_inf = x.clone();
            if n > 3 {
                with_inf[2] = f64::NEG_INFINITY;
            }
            let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for simd in Simd::all_available() {
                assert_eq!(max_f64_with(simd, &x), max, "{simd:?} max, n={n}");
                for v in [&x, &with_inf] {
                    let want = sum_exp_shifted_f64_reference(v, max);
                    let got = sum_exp_shifted_f64_with(simd, v, max);
                    // The reference adds 126k terms one after another: its own rounding reaches ~1e-13.
                    assert!((got - want).abs() <= 1e-12 * want.max(1e-300), "{simd:?} sum n={n}: {got} vs {want}");
                    let mut e = v.clone();
                    let sum = exp_shifted_f64_inplace_with(simd, &mut e, max);
                    assert!((sum - got).abs() <= 1e-14 * got.max(1e-300), "{simd:?} in-place sum n={n}");
                    for (a, &b) in e.iter().zip(v.iter()) {
                        let want = (b - max).exp();
                        assert!((a - want).abs() <= 4.0 * f64::EPSILON * want, "{simd:?} e^{b}: {a} vs {want}");
                    }
                }
            }
        }
    }
}
