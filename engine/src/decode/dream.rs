//! Dream's reference decoder (`_sample`): scorer (`sample_tokens`) and timestep schedule.
//!
//! Logits are shifted: the token at position p is predicted by row p − 1 (position 0 by row 0);
//! the loop in `denoise.rs` requests exactly those rows. The schedule is
//! `timesteps = linspace(1, eps, steps + 1)`; step i (t = ts[i], s = ts[i+1]) commits
//! `int(n_mask · (1 − s/t))`, everything on the last step. Like Dream this arithmetic is f32;
//! `linspace` uses torch's scalar formula (first half from the start, second half from the end).
//! With `block_length < gen_length` the schedule runs per block (a generalisation; the published
//! Dream is one block). Steps that would commit nothing skip their forward.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::policy::{Candidate, Scorer, TransferPolicy};
use super::sampling::{
    argmax, order_by_score, sample_categorical, sample_without_replacement, softmax, top_k_filter, top_p_filter,
};
use super::settings::{DecodeSettings, DreamAlg};

/// `torch.linspace(start, end, n)` in f32 with torch's symmetric scalar formula.
pub fn linspace_f32(start: f32, end: f32, n: usize) -> Vec<f32> {
    if n == 1 {
        return vec![start];
    }
    let step = (end - start) / (n - 1) as f32;
    let half = n / 2;
    (0..n).map(|i| if i < half { start + step * i as f32 } else { end - step * (n - 1 - i) as f32 }).collect()
}

/// Tokens to commit at step `i` of `steps` with `n_masked` masks: `int(n · (1 − s/t))` in f32.
pub fn transfer_count(n_masked: usize, i: usize, steps: usize, timesteps: &[f32]) -> usize {
    if i + 1 >= steps {
        return n_masked;
    }
    let (t, s) = (timesteps[i], timesteps[i + 1]);
    let ratio = 1.0f32 - s / t;
    (n_masked as f32 * ratio) as usize
}

/// Dream's `sample_tokens`: temperature, top-p, top-k, then token and confidence by `alg`.
#[derive(Debug, Clone)]
pub struct DreamScorer {
    temperature: f64,
    top_p: Option<f64>,
    top_k: Option<usize>,
    alg: DreamAlg,
}

impl DreamScorer {
    /// A scorer for `settings`.
    pub fn new(settings: &DecodeSettings) -> Self {
        DreamScorer {
            temperature: settings.temperature,
            top_p: settings.top_p,
            top_k: settings.top_k,
            alg: settings.alg,
        }
    }
}

impl Scorer for DreamScorer {
    fn score(&mut self, logits: &mut [f64], rng: &mut ChaCha8Rng) -> (u32, f64) {
        if self.temperature > 0.0 {
            logits.iter_mut().for_each(|l| *l /= self.temperature);
        }
        if let Some(p) = self.top_p {
            top_p_filter(logits, p);
        }
        if let Some(k) = self.top_k {
            top_k_filter(logits, k);
        }
        let probs = softmax(logits);
        let token = if self.temperature > 0.0 { sample_categorical(&probs, rng) } else { argmax(&probs) };
        let confidence = match self.alg {
            DreamAlg::Origin | DreamAlg::MaskgitPlus => probs[token],
            DreamAlg::TopkMargin => {
                let (mut p1, mut p2) = (0.0f64, 0.0f64);
                for &p in &probs {
                    if p > p1 {
                        p2 = p1;
                        p1 = p;
                    } else if p > p2 {
                        p2 = p;
                    }
                }
                p1 - p2
            }
            DreamAlg::Entropy => probs.iter().map(|&p| p * (p + 1e-10).ln()).sum(),
        };
        (token as u32, confidence)
    }
}

/// Dream's timestep schedule with top-k (or `alg_temp`-sampled, or `origin` random) positions.
#[derive(Debug, Clone)]
pub struct DreamSchedule {
    steps: usize,
    timesteps: Vec<f32>,
    alg: DreamAlg,
    alg_temp: Option<f64>,
    step: usize,
    count: usize,
}

impl DreamSchedule {
    /// A schedule of `steps_per_block` steps per block.
    pub fn new(settings: &DecodeSettings, steps_per_block: usize) -> Self {
        DreamSchedule {
            steps: steps_per_block,
            timesteps: linspace_f32(1.0, settings.eps as f32, steps_per_block + 1),
            alg: settings.alg,
            alg_temp: settings.alg_temp,
            step: 0,
            count: 0,
        }
    }

    /// Unmasking probability of `origin` at the current step.
    fn p_transfer(&self) -> f64 {
        let i = self.step.saturating_sub(1);
        if i + 1 >= self.steps {
            return 1.0;
        }
        (1.0f32 - self.timesteps[i + 1] / self.timesteps[i]) as f64
    }
}

impl TransferPolicy for DreamSchedule {
    fn name(&self) -> &'static str {
        "dream_schedule"
    }
    fn begin_block(&mut self, _n_masked: usize) {
        self.step = 0;
    }
    fn next_step(&mut self, n_masked: usize) -> bool {
        let i = self.step;
        self.step += 1;
        if self.alg == DreamAlg::Origin {
            return true;
        }
        self.count = transfer_count(n_masked, i.min(self.steps.saturating_sub(1)), self.steps, &self.timesteps);
        self.count > 0
    }
    fn select(&mut self, candidates: &[Candidate], rng: &mut ChaCha8Rng) -> Vec<usize> {
        if self.alg == DreamAlg::Origin {
            let p = self.p_transfer();
            return (0..candidates.len()).filter(|_| p >= 1.0 || rng.random::<f64>() < p).collect();
        }
        let k = self.count.min(candidates.len());
        match self.alg_temp {
            Some(at) if at > 0.0 => {
                let logits: Vec<f64> = candidates.iter().map(|c| c.confidence / at).collect();
                sample_without_replacement(&softmax(&logits), k, rng)
            }
            _ => {
                let scores: Vec<f64> = candidates.iter().map(|c| c.confidence).collect();
                let mut chosen = order_by_score(&scores);
                chosen.truncate(k);
                chosen
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_endpoints() {
        let t = linspace_f32(1.0, 1e-3, 9);
        assert_eq!(t[0], 1.0);
        assert_eq!(t[8], 1e-3);
        assert!(t.windows(2).all(|w| w[1] < w[0]));
    }

    #[test]
    fn counts_sum_to_all_masks() {
        let steps = 7;
        let ts = linspace_f32(1.0, 1e-3, steps + 1);
        let mut n = 20;
        for i in 0..steps {
            n -= transfer_count(n, i, steps, &ts);
        }
        assert_eq!(n, 0);
    }

    #[test]
    fn margin_and_entropy_confidences() {
        let mut rng = rand::SeedableRng::seed_from_u64(0);
        let base = DecodeSettings::default();
        let mut m = DreamScorer::new(&DecodeSettings { alg: DreamAlg::TopkMargin, ..base.clone() });
        let (t, c) = m.score(&mut [0.0, (3.0f64).ln(), f64::NEG_INFINITY], &mut rng);
        assert_eq!(t, 1);
        assert!((c - 0.5).abs() < 1e-12);
        let mut e = DreamScorer::new(&DecodeSettings { alg: DreamAlg::Entropy, ..base });
        let (_, c) = e.score(&mut [0.0, 0.0], &mut rng);
        assert!((c - 0.5f64.ln()).abs() < 1e-8);
    }
}
