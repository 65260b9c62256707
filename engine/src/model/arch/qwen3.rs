//! Qwen3 (`Qwen3ForCausalLM`), autoregressive, with per-head QK norm; ChatML.

use super::hf_decoder::{chatml_helpful_assistant, DecoderFamily, DecoderTraits, HfDecoderNames};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::model::config::Architecture;

/// The Qwen3 family.
pub const QWEN3: DecoderFamily = DecoderFamily {
    arch: Architecture::Qwen3,
    hf_classes: &["Qwen3ForCausalLM"],
    hf_model_types: &["qwen3"],
    published_mask: None,
    traits: DecoderTraits { qkv_bias: false, qk_norm: true, shift_logits: false, moe: None },
    names: &HfDecoderNames,
    gguf: GgufConventions { name: "qwen3", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS },
    chat_template: chatml_helpful_assistant,
};
