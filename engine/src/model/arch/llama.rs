//! Llama (`LlamaForCausalLM`), autoregressive; also SmolLM2. Its GGUF files have Q/K rows permuted
//! for adjacent-pair RoPE by llama.cpp's converter.

use super::hf_config::HfConfig;
use super::hf_decoder::{decoder_config, DecoderTraits, HfDecoderNames};
use super::{Family, GgufConventions, NameScheme, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ModelConfig};

/// The Llama family.
pub struct Llama;

impl Family for Llama {
    fn arch(&self) -> Architecture {
        Architecture::Llama
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["LlamaForCausalLM"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["llama"]
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        decoder_config(
            Architecture::Llama,
            r,
            DecoderTraits { qkv_bias: false, qk_norm: false, shift_logits: false, moe: None },
        )
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        &HfDecoderNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions {
            name: "llama",
            permuted_rope: true,
            default_rms_eps: 1e-5,
            pre_tokenizer: "llama-bpe",
            ..GGUF_DEFAULTS
        }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::Llada
    }
}
