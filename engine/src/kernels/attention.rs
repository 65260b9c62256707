//! Scaled dot-product attention of a block of queries over a context of keys/values.
//!
//! The context is whatever the caller gathered (cached prefix ∪ the block itself); causal masking
//! compares absolute positions, so the same kernel serves bidirectional dLLM blocks and AR decoding.
//! Keys are processed in tiles with an online softmax, so the score matrix never materialises.

use rayon::prelude::*;

/// Head layout of an attention call.
#[derive(Debug, Clone, Copy)]
pub struct HeadShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Keys per tile of the online softmax.
const KEY_TILE: usize = 64;

/// `out[nq, n_heads*hd] = softmax(q·kᵀ/√hd (+mask)) · v` with GQA head sharing.
///
/// `k`/`v` are `[nctx, n_kv_heads*hd]`; with `causal`, key j is visible to query i iff
/// `k_pos[j] <= q_pos[i]`.
pub fn attention(
    out: &mut [f32],
    q: &[f32],
    q_pos: &[usize],
    k: &[f32],
    v: &[f32],
    k_pos: &[usize],
    shape: HeadShape,
    causal: bool,
) {
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = shape;
    let qw = n_heads * hd;
    let kw = n_kv_heads * hd;
    let group = n_heads / n_kv_heads;
    let nctx = k_pos.len();
    let scale = 1.0 / (hd as f32).sqrt();
    out.par_chunks_mut(qw).zip(q.par_chunks(qw)).zip(q_pos.par_iter()).for_each(|((orow, qrow), &qp)| {
        let mut scores = [0.0f32; KEY_TILE];
        let mut acc = vec![0.0f32; hd];
        for h in 0..n_heads {
            let kh = h / group;
            let qh = &qrow[h * hd..(h + 1) * hd];
            acc.iter_mut().for_each(|a| *a = 0.0);
            let mut run_max = f32::NEG_INFINITY;
            let mut run_sum = 0.0f32;
            let mut t0 = 0;
            while t0 < nctx {
                let t1 = (t0 + KEY_TILE).min(nctx);
                let mut tile_max = f32::NEG_INFINITY;
                for j in t0..t1 {
                    let s = if causal && k_pos[j] > qp {
                        f32::NEG_INFINITY
                    } else {
                        let kr = &k[j * kw + kh * hd..j * kw + (kh + 1) * hd];
                        dot(qh, kr) * scale
                    };
                    scores[j - t0] = s;
                    tile_max = tile_max.max(s);
                }
                if tile_max > f32::NEG_INFINITY {
                    let new_max = run_max.max(tile_max);
                    let correction = (run_max - new_max).exp();
                    if correction != 1.0 {
                        run_sum *= correction;
                        acc.iter_mut().for_each(|a| *a *= correction);
                    }
                    for j in t0..t1 {
                        let s = scores[j - t0];
                        if s == f32::NEG_INFINITY {
                            continue;
                        }
                        let p = (s - new_max).exp();
                        run_sum += p;
                        let vr = &v[j * kw + kh * hd..j * kw + (kh + 1) * hd];
                        for (a, &x) in acc.iter_mut().zip(vr) {
                            *a += p * x;
                        }
                    }
                    run_max = new_max;
                }
                t0 = t1;
            }
            let inv = if run_sum > 0.0 { 1.0 / run_sum } else { 0.0 };
            for (o, a) in orow[h * hd..(h + 1) * hd].iter_mut().zip(&acc) {
                *o = a * inv;
            }
        }
    });
}

#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums let the compiler vectorise without reassociation flags.
    let mut s = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            s[i] += x[i] * y[i];
        }
    }
    let mut t: f32 = s.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        t += x * y;
    }
    t
}

/// Reference: materialises every score row, f64 accumulation (tests only).
pub fn attention_reference(
    out: &mut [f32],
    q: &[f32],
    q_pos: &[usize],
    k: &[f32],
    v: &[f32],
    k_pos: &[usize],
    shape: HeadShape,
    causal: bool,
) {
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = shape;
    let (qw, kw, group) = (n_heads * hd, n_kv_heads * hd, n_heads / n_kv_heads);
    for (i, &qp) in q_pos.iter().enumerate() {
        for h in 0..n_heads {
            let kh = h / group;
            let s: Vec<f64> = (0..k_pos.len())
                .map(|j| {
                    if causal && k_pos[j] > qp {
                        f64::NEG_INFINITY
                    } else {
                        (0..hd).map(|d| q[i * qw + h * hd + d] as f64 * k[j * kw + kh * hd + d] as f64).sum::<f64>()
                            / (hd as f64).sqrt()
                    }
                })
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = (0..k_pos.len()).map(|j| e[j] * v[j * kw + kh * hd + d] as f64).sum();
                out[i * qw + h * hd + d] = (acc / z) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn tiled_matches_reference(nq in 1usize..9, nctx in 1usize..150, kvh in 1usize..3, group in 1usize..3,
                                   hd in prop::sample::select(vec![4usize, 8, 12]), causal: bool, seed in 0u64..1000) {
            let shape = HeadShape { n_heads: kvh * group, n_kv_heads: kvh, head_dim: hd };
            let f = |i: usize, s: u64| (((i as u64 * 2654435761 + s) % 2001) as f32 / 1000.0) - 1.0;
            let q: Vec<f32> = (0..nq * shape.n_heads * hd).map(|i| f(i, seed)).collect();
            let k: Vec<f32> = (0..nctx * kvh * hd).map(|i| f(i, seed + 7)).collect();
            let v: Vec<f32> = (0..nctx * kvh * hd).map(|i| f(i, seed + 13)).collect();
            let k_pos: Vec<usize> = (0..nctx).collect();
            // Queries sit at the end of the context, as in block decoding.
            let q_pos: Vec<usize> = (0..nq).map(|i| nctx.saturating_sub(nq) + i).collect();
            let mut a = vec![0.0; nq * shape.n_heads * hd];
            let mut b = a.clone();
            attention(&mut a, &q, &q_pos, &k, &v, &k_pos, shape, causal);
            attention_reference(&mut b, &q, &q_pos, &k, &v, &k_pos, shape, causal);
            for (x, y) in a.iter().zip(&b) {
                prop_assert!((x - y).abs() < 1e-5, "{} vs {}", x, y);
            }
        }
    }
}
