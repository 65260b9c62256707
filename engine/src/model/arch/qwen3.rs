//! Qwen3 (`Qwen3ForCausalLM`), autoregressive, with per-head QK norm; ChatML.

use super::hf_config::HfConfig;
use super::hf_decoder::{decoder_config, DecoderTraits, HfDecoderNames};
use super::{Family, GgufConventions, NameScheme, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ModelConfig};

/// The Qwen3 family.
pub struct Qwen3;

impl Family for Qwen3 {
    fn arch(&self) -> Architecture {
        Architecture::Qwen3
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["Qwen3ForCausalLM"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["qwen3"]
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        decoder_config(
            Architecture::Qwen3,
            r,
            DecoderTraits { qkv_bias: false, qk_norm: true, shift_logits: false, moe: None },
        )
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        &HfDecoderNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions { name: "qwen3", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::ChatMl { default_system: Some("You are a helpful assistant.".into()) }
    }
}
