//! Qwen2 (`Qwen2ForCausalLM`), autoregressive, with q/k/v biases; ChatML.

use super::hf_config::HfConfig;
use super::hf_decoder::{decoder_config, DecoderTraits, HfDecoderNames};
use super::{Family, GgufConventions, NameScheme, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ModelConfig};

/// The Qwen2 family.
pub struct Qwen2;

impl Family for Qwen2 {
    fn arch(&self) -> Architecture {
        Architecture::Qwen2
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["Qwen2ForCausalLM"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["qwen2"]
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        decoder_config(
            Architecture::Qwen2,
            r,
            DecoderTraits { qkv_bias: true, qk_norm: false, shift_logits: false, moe: None },
        )
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        &HfDecoderNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions { name: "qwen2", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::ChatMl { default_system: Some("You are a helpful assistant.".into()) }
    }
}
