//! Working memory of a run beyond the weights: the K/V cache, one forward's activations and the
//! logits rows. The request check and the app's "fits this device" estimate both use these rates,
//! so the two never disagree.

use crate::model::ModelConfig;

/// Bytes per token of each part of a run's working memory, from the model's shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkingSetRates {
    /// K and V rows of every layer, stored as f32, per context token.
    pub kv_per_token: u64,
    /// One forward's activations per forwarded token (residual, norms, Q/K/V, attention out,
    /// the FFN's gate and up projections), f32.
    pub activations_per_token: u64,
    /// One logits row: the vocabulary as f32 plus the two f64 copies the confidence and sampling
    /// passes keep.
    pub logits_per_row: u64,
    /// A diffusion run asks a logits row for every answer position; an autoregressive one asks one
    /// row per step.
    pub logits_row_per_answer_token: bool,
}

impl WorkingSetRates {
    pub fn of(cfg: &ModelConfig) -> Self {
        let (h, q, kv) = (cfg.hidden as u64, cfg.q_dim() as u64, cfg.kv_dim() as u64);
        let ffn = cfg.ffn.max(cfg.moe.as_ref().map_or(0, |m| m.expert_ffn)) as u64;
        let f32_bytes = std::mem::size_of::<f32>() as u64;
        let f64_bytes = std::mem::size_of::<f64>() as u64;
        Self {
            kv_per_token: (cfg.n_layers as u64).saturating_mul(2).saturating_mul(kv).saturating_mul(f32_bytes),
            activations_per_token: (4 * h + 2 * q + 4 * kv + 2 * ffn).saturating_mul(f32_bytes),
            logits_per_row: (cfg.vocab as u64).saturating_mul(f32_bytes + 2 * f64_bytes),
            logits_row_per_answer_token: cfg.arch.is_diffusion(),
        }
    }

    /// Logits rows held at once for an answer of `answer_tokens`.
    pub fn logits_rows(&self, answer_tokens: u64) -> u64 {
        if self.logits_row_per_answer_token {
            answer_tokens
        } else {
            1
        }
    }

    /// Working memory of a run with `prompt_tokens` + `answer_tokens` in context, in the worst case
    /// (every step forwards the whole canvas).
    pub fn bytes(&self, prompt_tokens: u64, answer_tokens: u64) -> u128 {
        let len = u128::from(prompt_tokens) + u128::from(answer_tokens);
        len * u128::from(self.kv_per_token)
            + len * u128::from(self.activations_per_token)
            + u128::from(self.logits_rows(answer_tokens)) * u128::from(self.logits_per_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ModelConfig {
        let mut c = crate::memory::plan_test_config();
        c.n_layers = 2;
        c
    }

    #[test]
    fn a_diffusion_run_holds_one_logits_row_per_answer_token() {
        let c = cfg();
        assert!(c.arch.is_diffusion());
        let r = WorkingSetRates::of(&c);
        assert_eq!(r.logits_per_row, c.vocab as u64 * 20);
        assert_eq!(r.kv_per_token, 2 * 2 * c.kv_dim() as u64 * 4);
        let with_answer = r.bytes(10, 32) - r.bytes(10, 0);
        // 32 more context tokens and 32 logits rows.
        assert_eq!(with_answer, 32 * u128::from(r.kv_per_token + r.activations_per_token) + 32 * u128::from(r.logits_per_row));
    }

    #[test]
    fn an_autoregressive_run_holds_one_logits_row() {
        let mut c = cfg();
        c.arch = crate::model::Architecture::Qwen3;
        c.causal = true;
        let r = WorkingSetRates::of(&c);
        assert!(!r.logits_row_per_answer_token);
        assert_eq!(r.bytes(0, 100) - 100 * u128::from(r.kv_per_token + r.activations_per_token), u128::from(r.logits_per_row));
    }
}
