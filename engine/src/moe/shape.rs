//! Published shapes of MoE models, for simulations that need a model's dimensions but not its
//! weights (the simulated NPU prefill in `backend::vnpu::moe_prefill`).
//!
//! Kept apart from `ModelConfig`: a shape preset carries no tokenizer ids, RoPE or norm details,
//! only what costs time and memory, plus where the numbers come from.

use serde::Serialize;

use crate::error::{EngineError, Result};

/// The dimensions of one MoE transformer (every layer MoE, no shared expert).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MoeShape {
    /// Short name ("Qwen3-30B-A3B").
    pub name: &'static str,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Routed experts per layer.
    pub n_experts: usize,
    /// Experts chosen per token.
    pub top_k: usize,
    /// Hidden size of one expert's SwiGLU FFN.
    pub expert_ffn: usize,
    pub vocab: usize,
    /// Whether the router renormalises the top-k weights.
    pub norm_topk_prob: bool,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// Where the presets' figures are recorded (the team's MoE reference notes, §2, which name the
/// primary configs).
const SHAPES_SOURCE: &str = "MoE reference notes §2 (model configurations)";

impl MoeShape {
    /// Qwen3-30B-A3B: 48 layers, hidden 2048, 32/4 heads of 128, 128 experts top-8 (renormalised),
    /// expert FFN 768 (`moe_intermediate_size`), vocab 151936. Secondary: public configs repeating
    /// the checkpoint's values (vLLM test config, MindSpeed-RL `qwen3_30b_a3b.yaml`).
    pub const QWEN3_30B_A3B: MoeShape = MoeShape {
        name: "Qwen3-30B-A3B",
        n_layers: 48,
        hidden: 2048,
        n_heads: 32,
        n_kv_heads: 4,
        head_dim: 128,
        n_experts: 128,
        top_k: 8,
        expert_ffn: 768,
        vocab: 151936,
        norm_topk_prob: true,
        source: SHAPES_SOURCE,
    };

    /// Phi-3.5-MoE-instruct: 32 layers, hidden 4096, 32/8 heads of 128, 16 experts top-2, expert
    /// FFN 6400, vocab 32064 (`configuration_phimoe.py` defaults; SparseMixer router, modelled
    /// here as plain top-2).
    pub const PHI35_MOE: MoeShape = MoeShape {
        name: "Phi-3.5-MoE",
        n_layers: 32,
        hidden: 4096,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        n_experts: 16,
        top_k: 2,
        expert_ffn: 6400,
        vocab: 32064,
        norm_topk_prob: false,
        source: SHAPES_SOURCE,
    };

    /// LLaDA-MoE-7B-A1B: 16 layers, hidden 2048, 16/16 heads of 128, 64 experts top-8, expert FFN
    /// 1024, vocab 157184, top-k weights not renormalised.
    pub const LLADA_MOE_7B_A1B: MoeShape = MoeShape {
        name: "LLaDA-MoE-7B-A1B",
        n_layers: 16,
        hidden: 2048,
        n_heads: 16,
        n_kv_heads: 16,
        head_dim: 128,
        n_experts: 64,
        top_k: 8,
        expert_ffn: 1024,
        vocab: 157184,
        norm_topk_prob: false,
        source: SHAPES_SOURCE,
    };

    /// Every preset.
    pub const ALL: [MoeShape; 3] = [Self::QWEN3_30B_A3B, Self::PHI35_MOE, Self::LLADA_MOE_7B_A1B];

    /// A preset by name (case-insensitive).
    pub fn by_name(name: &str) -> Result<MoeShape> {
        Self::ALL.into_iter().find(|s| s.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|s| s.name).collect();
            EngineError::InvalidRequest(format!("unknown MoE shape `{name}` (known: {})", known.join(", ")))
        })
    }

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of one K or V row.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Weight elements of one expert (gate, up and down projections).
    pub fn expert_weight_elems(&self) -> usize {
        3 * self.hidden * self.expert_ffn
    }

    /// Matrix parameters of the whole model (attention, router, every expert, LM head; embeddings
    /// excluded), for sanity checks against the published totals.
    pub fn matrix_params(&self) -> usize {
        let attn = self.hidden * (self.q_dim() + 2 * self.kv_dim()) + self.q_dim() * self.hidden;
        let moe = self.n_experts * (self.expert_weight_elems() + self.hidden);
        self.n_layers * (attn + moe) + self.hidden * self.vocab
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_their_published_sizes() {
        // Qwen3-30B-A3B: 30.5B total of which ~0.3B embeddings; Phi-3.5-MoE: 41.9B total.
        let q = MoeShape::QWEN3_30B_A3B.matrix_params() as f64 / 1e9;
        assert!((29.0..31.0).contains(&q), "{q}");
        let p = MoeShape::PHI35_MOE.matrix_params() as f64 / 1e9;
        assert!((41.0..42.5).contains(&p), "{p}");
        assert_eq!(MoeShape::by_name("qwen3-30b-a3b").unwrap(), MoeShape::QWEN3_30B_A3B);
        assert!(MoeShape::by_name("mixtral").is_err());
    }
}
