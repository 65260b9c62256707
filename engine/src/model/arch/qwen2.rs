//! Qwen2 (`Qwen2ForCausalLM`), autoregressive, with q/k/v biases; ChatML.

use super::hf_decoder::{chatml_helpful_assistant, DecoderFamily, DecoderTraits, HfDecoderNames};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::model::config::Architecture;

/// The Qwen2 family.
pub const QWEN2: DecoderFamily = DecoderFamily {
    arch: Architecture::Qwen2,
    hf_classes: &["Qwen2ForCausalLM"],
    hf_model_types: &["qwen2"],
    published_mask: None,
    traits: DecoderTraits { qkv_bias: true, qk_norm: false, shift_logits: false, moe: None },
    names: &HfDecoderNames,
    gguf: GgufConventions { name: "qwen2", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS },
    chat_template: chatml_helpful_assistant,
};
