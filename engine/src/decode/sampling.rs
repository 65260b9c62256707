//! Numerics shared by the policies: f64 softmax, argmax, Gumbel-max, top-p / top-k filtering,
//! categorical draws. All randomness comes from the caller's seeded RNG.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::kernels::activation::{exp_shifted_f64_inplace, max_f64, sum_exp_shifted_f64};

/// Index of the largest value; ties go to the lowest index (as `torch.argmax`); NaN never wins.
pub fn argmax(x: &[f64]) -> usize {
    // The vectorised max, then its first occurrence: two streaming passes instead of a
    // compare-and-branch per vocabulary entry.
    let max = max_f64(x);
    if let Some(i) = x.iter().position(|&v| v == max) {
        return i;
    }
    // Only NaN entries (max_f64 skips them): the first rule below decides.
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] || x[best].is_nan() {
            best = i;
        }
    }
    best
}

/// Softmax in f64; entries at −inf get probability 0.
pub fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = max_f64(logits);
    if !max.is_finite() {
        // All −inf (or empty): a uniform distribution is the only sensible answer.
        let n = logits.len().max(1) as f64;
        return vec![1.0 / n; logits.len()];
    }
    let mut p = logits.to_vec();
    let sum = exp_shifted_f64_inplace(&mut p, max);
    p.iter_mut().for_each(|v| *v /= sum);
    p
}

/// `softmax(logits)[token]` without materialising the distribution (one pass for the max, one
/// for the denominator): the confidence the decoders rank positions by.
pub fn probability_of(logits: &[f64], token: usize) -> f64 {
    let max = max_f64(logits);
    if !max.is_finite() {
        return 1.0 / logits.len().max(1) as f64;
    }
    match logits.get(token) {
        Some(&l) => (l - max).exp() / sum_exp_shifted_f64(logits, max),
        None => 0.0,
    }
}

/// A uniform draw in (0, 1], so `ln` of it is finite-or-zero.
pub fn open_uniform(rng: &mut ChaCha8Rng) -> f64 {
    1.0 - rng.random::<f64>()
}

/// Gumbel-max token choice: argmax of `exp(l) / (−ln U)^T`, computed as `l − T·ln(−ln U)`
/// (same argmax, no overflow). Temperature 0 is a plain argmax and draws nothing.
pub fn gumbel_argmax(logits: &[f64], temperature: f64, rng: &mut ChaCha8Rng) -> usize {
    if temperature == 0.0 {
        return argmax(logits);
    }
    let noisy: Vec<f64> = logits
        .iter()
        .map(|&l| {
            let u = open_uniform(rng);
            l - temperature * (-u.ln()).ln()
        })
        .collect();
    argmax(&noisy)
}

/// Dream's `top_p_logits`: keep the smallest prefix of tokens (by descending logit) whose
/// probability mass reaches `top_p`, always keeping the first; the rest become −inf.
pub fn top_p_filter(logits: &mut [f64], top_p: f64) {
    if top_p >= 1.0 {
        return;
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let sorted: Vec<f64> = order.iter().map(|&i| logits[i]).collect();
    let p = softmax(&sorted);
    let mut cum = 0.0;
    let mut remove = vec![false; order.len()];
    for (rank, &pi) in p.iter().enumerate() {
        // Shifted right by one: a token is removed when the mass *before* it already exceeds top_p.
        if rank > 0 && cum > top_p {
            remove[rank] = true;
        }
        cum += pi;
    }
    for (rank, &i) in order.iter().enumerate() {
        if remove[rank] {
            logits[i] = f64::NEG_INFINITY;
        }
    }
}

/// Dream's `top_k_logits`: everything below the k-th largest logit becomes −inf (ties kept).
pub fn top_k_filter(logits: &mut [f64], top_k: usize) {
    if top_k == 0 || top_k >= logits.len() {
        return;
    }
    let mut sorted = logits.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[top_k - 1];
    logits.iter_mut().filter(|l| **l < kth).for_each(|l| *l = f64::NEG_INFINITY);
}

/// One draw from a categorical distribution given by (unnormalised, non-negative) weights.
pub fn sample_categorical(weights: &[f64], rng: &mut ChaCha8Rng) -> usize {
    let total: f64 = weights.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return argmax(weights);
    }
    let mut r = rng.random::<f64>() * total;
    for (i, &w) in weights.iter().enumerate() {
        if r < w {
            return i;
        }
        r -= w;
    }
    // Rounding left a sliver: the last index with weight.
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

/// `k` distinct indices drawn without replacement with probability proportional to `weights`
/// (like `torch.multinomial(..., replacement=False)`).
pub fn sample_without_replacement(weights: &[f64], k: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut w = weights.to_vec();
    let mut out = Vec::with_capacity(k.min(w.len()));
    for _ in 0..k.min(w.len()) {
        let i = sample_categorical(&w, rng);
        out.push(i);
        w[i] = 0.0;
        if w.iter().all(|&x| x <= 0.0) {
            // Remaining weights are zero: fill in index order, as a degenerate distribution would.
            for j in 0..w.len() {
                if out.len() >= k {
                    break;
                }
                if !out.contains(&j) {
                    out.push(j);
                }
            }
            break;
        }
    }
    out
}

/// Indices ordered by descending score, ties by lower index (the top-k rule of every policy).
pub fn order_by_score(scores: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn argmax_takes_first_of_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
    }

    /// The plain loop the fast [`argmax`] must agree with.
    fn argmax_loop(x: &[f64]) -> usize {
        let mut best = 0;
        for (i, &v) in x.iter().enumerate() {
            if v > x[best] || x[best].is_nan() {
                best = i;
            }
        }
        best
    }

    #[test]
    fn argmax_agrees_with_the_plain_loop_on_nan_and_infinities() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        let cases: [&[f64]; 8] = [
            &[nan, 1.0, 2.0],
            &[1.0, nan, 1.0],
            &[nan, nan],
            &[-inf, -inf, -inf],
            &[-inf, 0.5, inf, inf],
            &[],
            &[3.0],
            &[0.1; 40],
        ];
        for x in cases {
            assert_eq!(argmax(x), argmax_loop(x), "{x:?}");
        }
        // A vocabulary-sized row whose maximum appears twice, past the vector width.
        let mut row: Vec<f64> = (0..126_464).map(|i| ((i * 7919) % 1013) as f64 / 100.0).collect();
        row[70_001] = 11.0;
        row[90_000] = 11.0;
        assert_eq!(argmax(&row), 70_001);
        assert_eq!(argmax(&row), argmax_loop(&row));
    }

    #[test]
    fn probability_of_is_the_softmax_entry() {
        let row: Vec<f64> = (0..5000).map(|i| ((i * 31) % 97) as f64 / 7.0 - 3.0).collect();
        let p = softmax(&row);
        let naive_max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let naive_sum: f64 = row.iter().map(|&l| (l - naive_max).exp()).sum();
        for t in [0, 17, 4999] {
            let want = (row[t] - naive_max).exp() / naive_sum;
            assert!((probability_of(&row, t) - want).abs() <= 1e-12 * want, "token {t}");
            assert!((p[t] - want).abs() <= 1e-12 * want, "softmax entry {t}");
        }
        assert_eq!(probability_of(&row, 5000), 0.0);
        assert_eq!(probability_of(&[f64::NEG_INFINITY; 4], 1), 0.25);
        let mut banned = row.clone();
        banned[17] = f64::NEG_INFINITY;
        assert_eq!(probability_of(&banned, 17), 0.0);
    }

    #[test]
    fn top_p_keeps_at_least_one() {
        let mut l = vec![10.0, 0.0, 0.0];
        top_p_filter(&mut l, 0.5);
        assert_eq!(l[0], 10.0);
        assert!(l[1].is_infinite() && l[2].is_infinite());
    }

    #[test]
    fn top_k_keeps_k() {
        let mut l = vec![1.0, 4.0, 3.0, 2.0];
        top_k_filter(&mut l, 2);
        assert_eq!(l.iter().filter(|v| v.is_finite()).count(), 2);
    }

    #[test]
    fn without_replacement_is_distinct() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let s = sample_without_replacement(&[0.1, 0.5, 0.2, 0.2], 4, &mut rng);
        let mut t = s.clone();
        t.sort();
        assert_eq!(t, vec![0, 1, 2, 3]);
    }
}
