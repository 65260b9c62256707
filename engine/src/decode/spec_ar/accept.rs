//! The lossless acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023):
//! a drafted token `x ~ q` is kept with probability `min(1, p(x) / q(x))`; at the first rejection
//! the replacement is drawn from the residual `max(0, p − q)` normalised, so every emitted token
//! is distributed exactly as a draw from the target's `p`. At temperature 0 the rule is "keep
//! the draft iff it is the target's argmax, else emit the argmax".

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::decode::sampling::{argmax, sample_categorical, softmax, top_k_filter, top_p_filter};
use crate::decode::settings::DecodeSettings;

/// The distribution a token is drawn from under `settings` (temperature, top-p, top-k applied,
/// as [`crate::decode::ar::sample_next`] does), from one row of logits. At temperature 0 it is
/// the plain softmax (used only for entropy and confidence; the choice is the argmax).
pub fn token_distribution(logits: &[f64], settings: &DecodeSettings) -> Vec<f64> {
    let mut row = logits.to_vec();
    if settings.temperature == 0.0 {
        return softmax(&row);
    }
    row.iter_mut().for_each(|l| *l /= settings.temperature);
    if let Some(p) = settings.top_p {
        top_p_filter(&mut row, p);
    }
    if let Some(k) = settings.top_k {
        top_k_filter(&mut row, k);
    }
    softmax(&row)
}

/// Picks a token from a distribution made by [`token_distribution`]: argmax at temperature 0,
/// else a categorical draw.
pub fn pick(dist: &[f64], settings: &DecodeSettings, rng: &mut ChaCha8Rng) -> u32 {
    if settings.temperature == 0.0 {
        argmax(dist) as u32
    } else {
        sample_categorical(dist, rng) as u32
    }
}

/// Softmax probability of index `t` in a row of logits (one pass, no allocation).
pub fn probability_of(logits: &[f64], t: usize) -> f64 {
    let Some(&lt) = logits.get(t) else { return 0.0 };
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return 0.0;
    }
    let z: f64 = logits.iter().map(|&l| (l - max).exp()).sum();
    (lt - max).exp() / z
}

/// Shannon entropy in nats.
pub fn entropy(dist: &[f64]) -> f64 {
    -dist.iter().filter(|&&p| p > 0.0).map(|&p| p * p.ln()).sum::<f64>()
}

/// What the target made of one drafted token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The draft stands.
    Accept,
    /// The draft is rejected; this token (drawn from the residual, or the argmax) replaces it.
    Reject(u32),
}

/// Judges drafted token `x` against the target's distribution `p` for its position. `q` is the
/// draft's distribution it was drawn from (ignored at temperature 0).
pub fn judge(x: u32, p: &[f64], q: &[f64], settings: &DecodeSettings, rng: &mut ChaCha8Rng) -> Verdict {
    let x = x as usize;
    if settings.temperature == 0.0 {
        let best = argmax(p);
        return if best == x { Verdict::Accept } else { Verdict::Reject(best as u32) };
    }
    let (px, qx) = (p.get(x).copied().unwrap_or(0.0), q.get(x).copied().unwrap_or(0.0));
    // q(x) > 0 always holds for a token drawn from q; guard anyway (a zero would divide by zero).
    if qx <= 0.0 || rng.random::<f64>() < (px / qx).min(1.0) {
        return Verdict::Accept;
    }
    let residual: Vec<f64> = p.iter().zip(q).map(|(&a, &b)| (a - b).max(0.0)).collect();
    // An all-zero residual means p == q up to rounding, where rejection has probability 0; a
    // draw from p is then the exact answer.
    let total: f64 = residual.iter().sum();
    let pick = if total > 1e-12 { sample_categorical(&residual, rng) } else { sample_categorical(p, rng) };
    Verdict::Reject(pick as u32)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn sampled() -> DecodeSettings {
        DecodeSettings { temperature: 1.0, ..Default::default() }
    }

    /// The first token a round emits (an accepted draft, or the residual draw) must follow the
    /// target's distribution whatever the draft's: a chi-square test on a 6-token vocabulary.
    #[test]
    fn emitted_token_follows_the_target_distribution() {
        let p = [0.40, 0.25, 0.15, 0.10, 0.07, 0.03];
        let q_cases: [[f64; 6]; 3] = [
            [0.05, 0.05, 0.10, 0.20, 0.30, 0.30], // far from p
            [0.40, 0.25, 0.15, 0.10, 0.07, 0.03], // equal to p
            [0.90, 0.02, 0.02, 0.02, 0.02, 0.02], // overconfident draft
        ];
        let settings = sampled();
        for (case, q) in q_cases.iter().enumerate() {
            let mut rng = ChaCha8Rng::seed_from_u64(11 + case as u64);
            let n = 60_000;
            let mut counts = [0usize; 6];
            for _ in 0..n {
                let x = sample_categorical(q, &mut rng) as u32;
                let t = match judge(x, &p, q, &settings, &mut rng) {
                    Verdict::Accept => x,
                    Verdict::Reject(r) => r,
                };
                counts[t as usize] += 1;
            }
            let chi2: f64 = counts
                .iter()
                .zip(p)
                .map(|(&c, pi)| {
                    let e = pi * n as f64;
                    (c as f64 - e).powi(2) / e
                })
                .sum();
            // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
            assert!(chi2 < 20.5, "case {case}: chi2 {chi2:.1}, counts {counts:?}");
        }
    }

    /// Acceptance rate equals 1 − TV(p, q) (Leviathan §3): checks the rule accepts neither too
    /// often (which would bias toward q) nor too rarely (lossless but wasteful).
    #[test]
    fn acceptance_rate_is_one_minus_total_variation() {
        let p = [0.5, 0.3, 0.2];
        let q = [0.2, 0.3, 0.5];
        let alpha: f64 = p.iter().zip(&q).map(|(a, b): (&f64, &f64)| a.min(*b)).sum();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 40_000;
        let accepted = (0..n)
            .filter(|_| {
                let x = sample_categorical(&q, &mut rng) as u32;
                judge(x, &p, &q, &sampled(), &mut rng) == Verdict::Accept
            })
            .count();
        let rate = accepted as f64 / n as f64;
        assert!((rate - alpha).abs() < 0.01, "rate {rate} vs {alpha}");
    }

    #[test]
    fn greedy_keeps_only_the_argmax() {
        let settings = DecodeSettings { temperature: 0.0, ..Default::default() };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let p = [0.1, 0.6, 0.3];
        assert_eq!(judge(1, &p, &[], &settings, &mut rng), Verdict::Accept);
        assert_eq!(judge(2, &p, &[], &settings, &mut rng), Verdict::Reject(1));
    }

    #[test]
    fn entropy_of_uniform_is_ln_n() {
        assert!((entropy(&[0.25; 4]) - 4f64.ln()).abs() < 1e-12);
        assert_eq!(entropy(&[1.0, 0.0]), 0.0);
    }
}
