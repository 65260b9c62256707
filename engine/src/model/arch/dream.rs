//! Dream (`DreamModel`): masked diffusion on a Qwen2 backbone (q/k/v biases), logits shifted by
//! one (row p−1 predicts token p); ChatML.

use super::hf_decoder::{chatml_helpful_assistant, DecoderFamily, DecoderTraits, HfDecoderNames};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::model::config::Architecture;

/// The Dream family.
pub const DREAM: DecoderFamily = DecoderFamily {
    arch: Architecture::Dream,
    hf_classes: &["DreamModel"],
    hf_model_types: &["dream"],
    published_mask: Some((151666, 152064)),
    traits: DecoderTraits { qkv_bias: true, qk_norm: false, shift_logits: true, moe: None },
    names: &HfDecoderNames,
    gguf: GgufConventions { name: "dream", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS },
    chat_template: chatml_helpful_assistant,
};
