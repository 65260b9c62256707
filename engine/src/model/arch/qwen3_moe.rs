//! Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3 attention (per-head QK norm) with routed experts in
//! every layer, autoregressive; ChatML.

use serde_json::Value;

use super::hf_config::HfConfig;
use super::hf_decoder::{chatml_helpful_assistant, DecoderFamily, DecoderTraits, HfDecoderNames};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::error::{EngineError, Result};
use crate::model::config::{describe, Architecture, MoeConfig};

/// The Qwen3-MoE family. llama.cpp's qwen3moe: every layer MoE, expert FFN = n_ff / n_expert_used
/// when the key is absent, and its graph always renormalises the top-k weights.
pub const QWEN3_MOE: DecoderFamily = DecoderFamily {
    arch: Architecture::Qwen3Moe,
    hf_classes: &["Qwen3MoeForCausalLM"],
    hf_model_types: &["qwen3_moe"],
    published_mask: None,
    traits: DecoderTraits { qkv_bias: false, qk_norm: true, shift_logits: false, moe: Some(moe_config) },
    names: &HfDecoderNames,
    gguf: GgufConventions {
        name: "qwen3moe",
        pre_tokenizer: "qwen2",
        requires_experts: true,
        expert_ffn_splits_ffn: true,
        default_norm_topk: true,
        ..GGUF_DEFAULTS
    },
    chat_template: chatml_helpful_assistant,
};

/// The MoE settings of a Qwen3-MoE `config.json`. Only configs whose every layer is MoE are
/// accepted (`decoder_sparse_step` 1, `mlp_only_layers` empty), as in the published checkpoints
/// and in llama.cpp's `qwen3moe`.
fn moe_config(r: &HfConfig) -> Result<MoeConfig> {
    let step = r.opt_usize("decoder_sparse_step")?.unwrap_or(1);
    if step != 1 {
        return Err(EngineError::config(
            r.path,
            format!("`decoder_sparse_step` is {step}; only 1 (every layer MoE) is supported"),
        ));
    }
    match r.get("mlp_only_layers") {
        None => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(v) => {
            return Err(EngineError::config(
                r.path,
                format!("`mlp_only_layers` is {}; only an empty list (every layer MoE) is supported", describe(v)),
            ))
        }
    }
    Ok(MoeConfig {
        // Published configs say `num_experts`; transformers 5 writes `num_local_experts`.
        n_experts: match r.opt_usize("num_experts")? {
            Some(n) => n,
            None => r.usize("num_local_experts")?,
        },
        top_k: r.usize("num_experts_per_tok")?,
        expert_ffn: r.usize("moe_intermediate_size")?,
        // transformers' Qwen3MoeConfig default; the published checkpoints set it true.
        norm_topk_prob: r.opt_bool("norm_topk_prob")?.unwrap_or(false),
    })
}
