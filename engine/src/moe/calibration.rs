//! Offline calibration: how many tokens each expert of each layer receives, by prompt length.
//!
//! The capacity tiers and the expert groups are derived from these counts, so a static plan
//! matches what the model actually does with prompts of that length (expert popularity).

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// Prompt-length buckets the calibration and the static graphs use (upper bounds, tokens).
pub const DEFAULT_BUCKETS: &[usize] = &[64, 128, 256, 512, 1024, 2048, 4096];

/// Per-layer, per-expert token counts, split by prompt-length bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeCalibration {
    pub n_layers: usize,
    pub n_experts: usize,
    pub top_k: usize,
    /// Bucket upper bounds, ascending; a prompt goes to the first bucket it fits.
    pub buckets: Vec<usize>,
    /// Prompts recorded per bucket.
    pub prompts: Vec<u64>,
    /// Tokens recorded per bucket.
    pub tokens: Vec<u64>,
    /// `counts[bucket][layer][expert]`: routed tokens.
    pub counts: Vec<Vec<Vec<u64>>>,
    /// `peak_share[bucket][layer][expert]`: the largest fraction of one prompt's tokens the expert
    /// received (0..=1), so capacities can cover the busiest prompt seen, not just the mean.
    pub peak_share: Vec<Vec<Vec<f64>>>,
}

impl MoeCalibration {
    /// An empty calibration for a model shape.
    pub fn new(n_layers: usize, n_experts: usize, top_k: usize, buckets: &[usize]) -> Result<Self> {
        if n_experts == 0 || top_k == 0 || top_k > n_experts {
            return Err(EngineError::InvalidRequest(format!(
                "a calibration needs 1 <= top_k <= experts (top_k {top_k}, experts {n_experts})"
            )));
        }
        if buckets.is_empty() || buckets.windows(2).any(|w| w[0] >= w[1]) || buckets[0] == 0 {
            return Err(EngineError::InvalidRequest("calibration buckets must be positive and ascending".into()));
        }
        let nb = buckets.len();
        Ok(MoeCalibration {
            n_layers,
            n_experts,
            top_k,
            buckets: buckets.to_vec(),
            prompts: vec![0; nb],
            tokens: vec![0; nb],
            counts: vec![vec![vec![0; n_experts]; n_layers]; nb],
            peak_share: vec![vec![vec![0.0; n_experts]; n_layers]; nb],
        })
    }

    /// The bucket a prompt of `tokens` falls into (the last one for longer prompts).
    pub fn bucket_of(&self, tokens: usize) -> usize {
        self.buckets.iter().position(|&b| tokens <= b).unwrap_or(self.buckets.len() - 1)
    }

    /// Adds one prompt's per-layer, per-expert counts.
    pub fn record(&mut self, prompt_tokens: usize, layer_counts: &[Vec<u64>]) -> Result<()> {
        if layer_counts.len() != self.n_layers || layer_counts.iter().any(|l| l.len() != self.n_experts) {
            return Err(EngineError::InvalidRequest(format!(
                "calibration record has {} layers, expected {} x {} experts",
                layer_counts.len(),
                self.n_layers,
                self.n_experts
            )));
        }
        if prompt_tokens == 0 {
            return Ok(());
        }
        let b = self.bucket_of(prompt_tokens);
        self.prompts[b] += 1;
        self.tokens[b] += prompt_tokens as u64;
        for (li, counts) in layer_counts.iter().enumerate() {
            for (e, &c) in counts.iter().enumerate() {
                self.counts[b][li][e] += c;
                let share = c as f64 / prompt_tokens as f64;
                let peak = &mut self.peak_share[b][li][e];
                *peak = peak.max(share);
            }
        }
        Ok(())
    }

    /// Total prompts recorded.
    pub fn total_prompts(&self) -> u64 {
        self.prompts.iter().sum()
    }

    /// Share of routed pairs each expert of `layer` received in bucket `b` (sums to 1), falling
    /// back to all buckets together (also for `b` past the last bucket), then to uniform when
    /// nothing was recorded.
    pub fn popularity(&self, b: usize, layer: usize) -> Vec<f64> {
        let e = self.n_experts;
        let uniform = vec![1.0 / e as f64; e];
        if layer >= self.n_layers {
            return uniform;
        }
        let from = |counts: Vec<u64>| -> Option<Vec<f64>> {
            let total: u64 = counts.iter().sum();
            (total > 0).then(|| counts.iter().map(|&c| c as f64 / total as f64).collect())
        };
        if let Some(p) = self.counts.get(b).and_then(|c| from(c[layer].clone())) {
            return p;
        }
        let all: Vec<u64> = (0..e).map(|x| self.counts.iter().map(|c| c[layer][x]).sum()).collect();
        from(all).unwrap_or(uniform)
    }

    /// [`MoeCalibration::popularity`] over every bucket together.
    pub fn overall_popularity(&self, layer: usize) -> Vec<f64> {
        self.popularity(self.buckets.len(), layer)
    }

    /// The peak per-prompt share of each expert of `layer` in bucket `b` (0 where unrecorded).
    pub fn peak(&self, b: usize, layer: usize) -> Vec<f64> {
        self.peak_share.get(b).and_then(|p| p.get(layer)).cloned().unwrap_or_else(|| vec![0.0; self.n_experts])
    }

    /// How uneven routing is: the busiest expert's share of its layer over the uniform share,
    /// maximised over layers (1.0 = perfectly balanced), over all buckets together.
    pub fn max_skew(&self) -> f64 {
        (0..self.n_layers)
            .map(|li| self.overall_popularity(li).into_iter().fold(0.0f64, f64::max) * self.n_experts as f64)
            .fold(0.0, f64::max)
    }

    /// One line for people: prompts seen and how uneven routing is.
    pub fn summary(&self) -> String {
        format!(
            "{} prompts · {} layers x {} experts (top-{}) · busiest expert {:.1}x its fair share",
            self.total_prompts(),
            self.n_layers,
            self.n_experts,
            self.top_k,
            self.max_skew()
        )
    }

    /// Checks a calibration read from storage against a model's MoE shape.
    pub fn check_shape(&self, n_layers: usize, n_experts: usize, top_k: usize) -> Result<()> {
        let nb = self.buckets.len();
        let consistent = self.prompts.len() == nb
            && self.tokens.len() == nb
            && self.counts.len() == nb
            && self.peak_share.len() == nb
            && self.counts.iter().all(|c| c.len() == self.n_layers && c.iter().all(|l| l.len() == self.n_experts))
            && self.peak_share.iter().all(|c| c.len() == self.n_layers && c.iter().all(|l| l.len() == self.n_experts));
        if !consistent {
            return Err(EngineError::InvalidRequest("MoE calibration is damaged (inconsistent table sizes)".into()));
        }
        if (self.n_layers, self.n_experts, self.top_k) != (n_layers, n_experts, top_k) {
            return Err(EngineError::InvalidRequest(format!(
                "MoE calibration is for {} layers x {} experts (top-{}), the model has {} x {} (top-{})",
                self.n_layers, self.n_experts, self.top_k, n_layers, n_experts, top_k
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_by_bucket_and_reports_popularity() {
        let mut c = MoeCalibration::new(1, 4, 2, &[8, 16]).unwrap();
        c.record(6, &[vec![6, 4, 2, 0]]).unwrap();
        c.record(12, &[vec![0, 12, 12, 0]]).unwrap();
        c.record(40, &[vec![40, 40, 0, 0]]).unwrap(); // longer than every bucket: the last one
        assert_eq!(c.prompts, vec![1, 2]);
        assert_eq!(c.popularity(0, 0), vec![0.5, 4.0 / 12.0, 2.0 / 12.0, 0.0]);
        assert_eq!(c.peak(1, 0), vec![1.0, 1.0, 1.0, 0.0]);
        assert!(c.record(4, &[vec![1, 2]]).is_err());
        let empty = MoeCalibration::new(2, 4, 2, &[8]).unwrap();
        assert_eq!(empty.popularity(0, 1), vec![0.25; 4]);
        assert!(c.check_shape(1, 4, 2).is_ok());
        // Over all buckets: expert 1 has 56 of 116 pairs.
        assert!((c.max_skew() - 4.0 * 56.0 / 116.0).abs() < 1e-9, "{}", c.max_skew());
        assert!(c.summary().starts_with("3 prompts"));
        assert!(c.check_shape(2, 4, 2).is_err());
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(MoeCalibration::new(1, 4, 5, &[8]).is_err());
        assert!(MoeCalibration::new(1, 4, 2, &[16, 8]).is_err());
        assert!(MoeCalibration::new(1, 4, 2, &[]).is_err());
    }
}
