//! RMSNorm: a plain reference and a vectorised variant per instruction set
//! ([`super::simd::Simd`]), checked against each other.

use super::simd::{multiversion, Simd};

/// RMSNorm applied in place to each `dim`-sized row of `x` (`dim = weight.len()`).
pub fn rmsnorm_rows_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    rmsnorm_rows_with(Simd::detect(), x, weight, eps)
}

/// Reference of [`rmsnorm_rows_inplace`] (tests).
#[cfg(test)]
pub fn rmsnorm_rows_reference(x: &mut [f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    for row in x.chunks_exact_mut(dim) {
        let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / dim as f64;
        let inv = 1.0 / (ss + eps as f64).sqrt();
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = (*v as f64 * inv * w as f64) as f32;
        }
    }
}

multiversion! {
    /// [`rmsnorm_rows_inplace`] with the variant of `simd`.
    pub fn rmsnorm_rows_with(x: &mut [f32], weight: &[f32], eps: f32) {
        let dim = weight.len();
        if dim == 0 {
            return;
        }
        for row in x.chunks_exact_mut(dim) {
            let mut acc = [0.0f32; L];
            let mut chunks = row.chunks_exact(L);
            for c in &mut chunks {
                for i in 0..L {
                    acc[i] = F::mul_add(c[i], c[i], acc[i]);
                }
            }
            let mut ss: f32 = acc.iter().sum();
            for &v in chunks.remainder() {
                ss += v * v;
            }
            let inv = 1.0 / (ss / dim as f32 + eps).sqrt();
            for (v, &w) in row.iter_mut().zip(weight) {
                *v = *v * inv * w;
            }
        }
    }
}

/// `dst[i] += src[i]` (residual adds), vectorised.
pub fn add_inplace(dst: &mut [f32], src: &[f32]) {
    add_with(Simd::detect(), dst, src)
}

multiversion! {
    fn add_with(dst: &mut [f32], src: &[f32]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d += s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_matches_reference() {
        for dim in [1usize, 7, 16, 48, 192, 4096 + 3] {
            let w: Vec<f32> = (0..dim).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
            let x: Vec<f32> = (0..3 * dim).map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0).collect();
            let mut want = x.clone();
            rmsnorm_rows_reference(&mut want, &w, 1e-5);
            for simd in Simd::all_available() {
                let mut got = x.clone();
                rmsnorm_rows_with(simd, &mut got, &w, 1e-5);
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() <= 2e-6 * (1.0 + b.abs()), "{simd:?} dim {dim}: {a} vs {b}");
                }
                let mut d = x.clone();
                add_with(simd, &mut d, &want);
                assert!(d.iter().zip(x.iter().zip(&want)).all(|(s, (a, b))| *s == a + b));
            }
        }
    }
}
