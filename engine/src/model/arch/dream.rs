//! Dream (`DreamModel`): masked diffusion on a Qwen2 backbone (q/k/v biases), logits shifted by
//! one (row p−1 predicts token p); ChatML.

use super::hf_config::HfConfig;
use super::hf_decoder::{decoder_config, DecoderTraits, HfDecoderNames};
use super::{Family, GgufConventions, NameScheme, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ModelConfig};

/// The Dream family.
pub struct Dream;

impl Family for Dream {
    fn arch(&self) -> Architecture {
        Architecture::Dream
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["DreamModel"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["dream"]
    }
    fn is_diffusion(&self) -> bool {
        true
    }
    fn published_mask(&self) -> Option<(u32, usize)> {
        Some((151666, 152064))
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        decoder_config(
            Architecture::Dream,
            r,
            DecoderTraits { qkv_bias: true, qk_norm: false, shift_logits: true, moe: None },
        )
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        &HfDecoderNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions { name: "dream", pre_tokenizer: "qwen2", ..GGUF_DEFAULTS }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::ChatMl { default_system: Some("You are a helpful assistant.".into()) }
    }
}
