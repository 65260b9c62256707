//! Llama (`LlamaForCausalLM`), autoregressive; also SmolLM2. Its GGUF files have Q/K rows permuted
//! for adjacent-pair RoPE by llama.cpp's converter.

use super::hf_decoder::{DecoderFamily, DecoderTraits, HfDecoderNames};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::model::chat::ChatTemplate;
use crate::model::config::Architecture;

/// The Llama family.
pub const LLAMA: DecoderFamily = DecoderFamily {
    arch: Architecture::Llama,
    hf_classes: &["LlamaForCausalLM"],
    hf_model_types: &["llama"],
    published_mask: None,
    traits: DecoderTraits { qkv_bias: false, qk_norm: false, shift_logits: false, moe: None },
    names: &HfDecoderNames,
    gguf: GgufConventions {
        name: "llama",
        permuted_rope: true,
        default_rms_eps: 1e-5,
        pre_tokenizer: "llama-bpe",
        ..GGUF_DEFAULTS
    },
    chat_template: || ChatTemplate::Llada,
};
