//! Confidence-threshold parallel decoding (Fast-dLLM `get_transfer_index` with a threshold):
//! each step commits the most confident masked position of the block plus every other one whose
//! confidence is at least τ; the block loops until it has no masks (adaptive step count).
//! Confidences come from the model family's scorer (LLaDA: softmax probability in f64).

use rand_chacha::ChaCha8Rng;

use super::policy::{Candidate, TransferPolicy};
use super::sampling::order_by_score;

/// Commit top-1 plus everything with confidence ≥ `threshold`.
#[derive(Debug, Clone)]
pub struct ThresholdPolicy {
    threshold: f64,
}

impl ThresholdPolicy {
    /// A policy with threshold τ.
    pub fn new(threshold: f64) -> Self {
        ThresholdPolicy { threshold }
    }
}

impl TransferPolicy for ThresholdPolicy {
    fn name(&self) -> &'static str {
        "threshold"
    }
    fn begin_block(&mut self, _n_masked: usize) {}
    fn next_step(&mut self, n_masked: usize) -> bool {
        n_masked > 0
    }
    fn select(&mut self, candidates: &[Candidate], _rng: &mut ChaCha8Rng) -> Vec<usize> {
        let scores: Vec<f64> = candidates.iter().map(|c| c.confidence).collect();
        let order = order_by_score(&scores);
        let mut chosen: Vec<usize> = order.iter().take(1).copied().collect();
        chosen.extend(order.iter().skip(1).copied().filter(|&i| scores[i] >= self.threshold));
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cand(conf: &[f64]) -> Vec<Candidate> {
        conf.iter().enumerate().map(|(i, &c)| Candidate { pos: i, token: 0, confidence: c }).collect()
    }

    #[test]
    fn always_commits_at_least_one() {
        let mut p = ThresholdPolicy::new(0.9);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(p.select(&cand(&[0.1, 0.3, 0.2]), &mut rng), vec![1]);
    }

    #[test]
    fn commits_everything_above_threshold() {
        let mut p = ThresholdPolicy::new(0.5);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut got = p.select(&cand(&[0.6, 0.3, 0.9, 0.5]), &mut rng);
        got.sort();
        assert_eq!(got, vec![0, 2, 3]);
    }
}
