//! LLaDA's reference decoder (`generate.py`): scorer and fixed transfer schedule.
//!
//! Semantics kept exactly: blocks over the generated region only, `steps / num_blocks` steps per
//! block, `get_num_transfer_tokens`, Gumbel-max in f64, low-confidence (softmax over the clean
//! logits) or random remasking, `logits_eos_inf`, and the `confidence_eos_eot_inf` quirk.
//! Committed tokens are never revised. Differences, none of which changes the result at
//! temperature 0: logits are requested only for masked positions of the current block (the
//! reference scores every position and then sets the others to −inf); steps whose schedule entry
//! is 0 run no forward (the reference runs one and commits nothing); random draws are made only
//! for the rows that are scored, so random runs are reproducible per seed but not bit-equal to
//! torch's RNG.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::policy::{Candidate, Scorer, TransferPolicy};
use super::sampling::{gumbel_argmax, order_by_score, probability_of};
use super::settings::{DecodeSettings, Remasking};

/// `get_num_transfer_tokens`: `n / steps` per step, the first `n % steps` steps one more.
pub fn num_transfer_tokens(n_masked: usize, steps: usize) -> Vec<usize> {
    if steps == 0 {
        return Vec::new();
    }
    let (base, rem) = (n_masked / steps, n_masked % steps);
    (0..steps).map(|i| base + usize::from(i < rem)).collect()
}

/// LLaDA's token choice and confidence.
#[derive(Debug, Clone)]
pub struct LladaScorer {
    temperature: f64,
    remasking: Remasking,
    logits_eos_inf: bool,
    confidence_eos_eot_inf: bool,
    eos: Option<u32>,
    eot: Option<u32>,
}

impl LladaScorer {
    /// A scorer for `settings`, with the model's EOS/EOT ids.
    pub fn new(settings: &DecodeSettings, eos: Option<u32>, eot: Option<u32>) -> Self {
        LladaScorer {
            temperature: settings.temperature,
            remasking: settings.remasking,
            logits_eos_inf: settings.logits_eos_inf,
            confidence_eos_eot_inf: settings.confidence_eos_eot_inf,
            eos,
            eot,
        }
    }
}

fn set_neg_inf(row: &mut [f64], id: Option<u32>) {
    if let Some(slot) = id.and_then(|i| row.get_mut(i as usize)) {
        *slot = f64::NEG_INFINITY;
    }
}

impl Scorer for LladaScorer {
    fn score(&mut self, logits: &mut [f64], rng: &mut ChaCha8Rng) -> (u32, f64) {
        if self.logits_eos_inf {
            set_neg_inf(logits, self.eos);
        }
        let token = gumbel_argmax(logits, self.temperature, rng);
        if self.confidence_eos_eot_inf {
            // generate.py writes −inf to EOS of the *noisy* logits and to EOT of the clean ones,
            // after x0 is chosen. At temperature 0 the noisy tensor aliases the clean one, so both
            // writes reach the softmax below; at T > 0 only the EOT write does. A position whose
            // chosen token was banned this way gets confidence p = 0 (not −inf), which still ranks
            // it above everything outside the block, as in the reference.
            if self.temperature == 0.0 {
                set_neg_inf(logits, self.eos);
            }
            set_neg_inf(logits, self.eot);
        }
        let confidence = match self.remasking {
            Remasking::LowConfidence => probability_of(logits, token),
            Remasking::Random => rng.random::<f64>(),
        };
        (token as u32, confidence)
    }
}

/// The fixed per-block schedule: commit the `k_i` most confident masked positions at step i.
#[derive(Debug, Clone)]
pub struct ScheduledTopK {
    steps_per_block: usize,
    schedule: Vec<usize>,
    step: usize,
}

impl ScheduledTopK {
    /// A schedule of `steps_per_block` steps for every block.
    pub fn new(steps_per_block: usize) -> Self {
        ScheduledTopK { steps_per_block, schedule: Vec::new(), step: 0 }
    }

    fn current(&self) -> usize {
        self.step.checked_sub(1).and_then(|i| self.schedule.get(i)).copied().unwrap_or(0)
    }
}

impl TransferPolicy for ScheduledTopK {
    fn name(&self) -> &'static str {
        "llada_schedule"
    }
    fn begin_block(&mut self, n_masked: usize) {
        self.schedule = num_transfer_tokens(n_masked, self.steps_per_block);
        self.step = 0;
    }
    fn next_step(&mut self, n_masked: usize) -> bool {
        self.step += 1;
        if self.step > self.schedule.len() {
            // Schedule exhausted with masks left (cannot happen when the schedule was built from
            // this block's masks): commit the rest in one step rather than loop forever.
            self.schedule.push(n_masked);
        }
        self.current() > 0
    }
    fn select(&mut self, candidates: &[Candidate], _rng: &mut ChaCha8Rng) -> Vec<usize> {
        let scores: Vec<f64> = candidates.iter().map(|c| c.confidence).collect();
        let mut chosen = order_by_score(&scores);
        chosen.truncate(self.current());
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn schedule_matches_get_num_transfer_tokens() {
        assert_eq!(num_transfer_tokens(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(num_transfer_tokens(3, 5), vec![1, 1, 1, 0, 0]);
        assert_eq!(num_transfer_tokens(32, 32), vec![1; 32]);
    }

    #[test]
    fn eos_eot_quirk_at_temperature_zero_hits_both() {
        let settings = DecodeSettings { confidence_eos_eot_inf: true, ..Default::default() };
        let mut s = LladaScorer::new(&settings, Some(0), Some(1));
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        // EOS is the argmax: it is still chosen, but its confidence becomes 0.
        let (t, c) = s.score(&mut [5.0, 1.0, 0.0], &mut rng);
        assert_eq!((t, c), (0, 0.0));
        // A normal token: confidence renormalised without EOS and EOT.
        let (t, c) = s.score(&mut [1.0, 1.0, 2.0], &mut rng);
        assert_eq!((t, c), (2, 1.0));
    }

    #[test]
    fn eos_eot_quirk_at_positive_temperature_hits_only_eot() {
        let settings = DecodeSettings { confidence_eos_eot_inf: true, temperature: 1e-9, ..Default::default() };
        let mut s = LladaScorer::new(&settings, Some(0), Some(1));
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (t, c) = s.score(&mut [0.0, 5.0, 0.0, 10.0], &mut rng);
        assert_eq!(t, 3);
        let want = 10f64.exp() / (1.0 + 10f64.exp() + 1.0);
        assert!((c - want).abs() < 1e-12, "{c} vs {want}");
    }

    #[test]
    fn logits_eos_inf_never_picks_eos() {
        let settings = DecodeSettings { logits_eos_inf: true, ..Default::default() };
        let mut s = LladaScorer::new(&settings, Some(0), None);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(s.score(&mut [9.0, 1.0], &mut rng).0, 1);
    }
}
