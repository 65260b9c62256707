//! One file per architecture family: how its checkpoints describe it (HF `config.json` keys,
//! tensor names, llama.cpp's GGUF architecture string and conventions), its published special
//! ids and the chat template of its instruct checkpoints. The math is generic: the transformer
//! reads only [`ModelConfig`], so a family differs only in how its files say things.
//!
//! Adding a family: a file here implementing [`Family`] (for an HF decoder family, one
//! [`hf_decoder::DecoderFamily`] value), its [`Architecture`] variant (the
//! compiler then points at [`family`] and [`Architecture::ALL`]), and a golden test against the
//! reference implementation (`tests/golden`, see docs/models.md).

pub(crate) mod dream;
pub(crate) mod gguf_names;
pub(crate) mod hf_config;
pub(crate) mod hf_decoder;
pub(crate) mod llada;
pub(crate) mod llada_moe;
pub(crate) mod llama;
pub(crate) mod names;
pub(crate) mod qwen2;
pub(crate) mod qwen3;
pub(crate) mod qwen3_moe;

use std::path::Path;

use serde_json::Value;

pub use names::{ExpertLayout, Global, NameScheme, Part};

use super::chat::ChatTemplate;
use super::config::{Architecture, ConfigKeys, ModelConfig};
use crate::error::{EngineError, Result};
use hf_config::HfConfig;

/// How llama.cpp's converter and graph treat a family in GGUF files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GgufConventions {
    /// `general.architecture`.
    pub name: &'static str,
    /// The converter permutes Q/K rows so that RoPE pairs adjacent dimensions.
    pub permuted_rope: bool,
    /// RMSNorm epsilon when the file names none.
    pub default_rms_eps: f32,
    /// `tokenizer.ggml.pre` written when the tokenizer's own pre-tokenizer is not recognised.
    pub pre_tokenizer: &'static str,
    /// `tokenizer.ggml.add_bos_token` is written true.
    pub add_bos: bool,
    /// Every layer is MoE: `expert_count` must be present and positive.
    pub requires_experts: bool,
    /// Without `expert_feed_forward_length` an expert's FFN is `feed_forward_length / top_k`
    /// (else the whole `feed_forward_length`).
    pub expert_ffn_splits_ffn: bool,
    /// Whether the top-k router weights are renormalised when the file does not say.
    pub default_norm_topk: bool,
}

/// Defaults most families share; each family overrides what differs.
pub const GGUF_DEFAULTS: GgufConventions = GgufConventions {
    name: "",
    permuted_rope: false,
    default_rms_eps: 1e-6,
    pre_tokenizer: "default",
    add_bos: false,
    requires_experts: false,
    expert_ffn_splits_ffn: false,
    default_norm_topk: false,
};

/// One architecture family.
pub trait Family: Sync {
    /// The family's variant.
    fn arch(&self) -> Architecture;
    /// `architectures` entries of its HF `config.json`.
    fn hf_classes(&self) -> &'static [&'static str];
    /// `model_type` values of its HF `config.json` (used when no class is recognised).
    fn hf_model_types(&self) -> &'static [&'static str];
    /// Masked-diffusion model (bidirectional attention, mask token) rather than autoregressive.
    fn is_diffusion(&self) -> bool {
        false
    }
    /// Mask token id and vocabulary size of the published checkpoints (diffusion families).
    fn published_mask(&self) -> Option<(u32, usize)> {
        None
    }
    /// Reads its HF `config.json`.
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig>;
    /// How its `config.json` names each field (for errors).
    fn hf_keys(&self) -> ConfigKeys {
        ConfigKeys::hf()
    }
    /// Tensor names of its HF checkpoints.
    fn hf_names(&self) -> &'static dyn NameScheme;
    /// llama.cpp's conventions for it.
    fn gguf(&self) -> GgufConventions;
    /// The chat template its instruct checkpoints use (when the file carries none we recognise).
    fn chat_template(&self) -> ChatTemplate;
}

/// The family of `arch`.
pub fn family(arch: Architecture) -> &'static dyn Family {
    match arch {
        Architecture::Llada => &llada::Llada,
        Architecture::Dream => &dream::DREAM,
        Architecture::LladaMoe => &llada_moe::LLADA_MOE,
        Architecture::Llama => &llama::LLAMA,
        Architecture::Qwen2 => &qwen2::QWEN2,
        Architecture::Qwen3 => &qwen3::QWEN3,
        Architecture::Qwen3Moe => &qwen3_moe::QWEN3_MOE,
    }
}

/// The HF naming of a config's architecture.
pub fn hf_scheme(cfg: &ModelConfig) -> &'static dyn NameScheme {
    family(cfg.arch).hf_names()
}

/// The family an HF `config.json` describes: its first recognised `architectures` entry, else
/// its `model_type`.
pub(crate) fn detect_hf(json: &Value, path: &Path) -> Result<&'static dyn Family> {
    let classes: Vec<String> = json
        .get("architectures")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let model_type = json.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_lowercase();
    let families = || Architecture::ALL.iter().map(|&a| family(a));
    let by_class = classes.iter().find_map(|c| families().find(|f| f.hf_classes().contains(&c.as_str())));
    by_class.or_else(|| families().find(|f| f.hf_model_types().contains(&model_type.as_str()))).ok_or_else(|| {
        EngineError::UnknownArchitecture {
            path: path.to_owned(),
            arch: if classes.is_empty() { model_type } else { classes.join(",") },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_answers_for_its_own_architecture() {
        let mut names = std::collections::HashSet::new();
        for &a in Architecture::ALL {
            let f = family(a);
            assert_eq!(f.arch(), a);
            assert!(names.insert(f.gguf().name), "{a:?}: GGUF name {} used twice", f.gguf().name);
            assert_eq!(Architecture::from_gguf_name(f.gguf().name), Some(a));
            assert!(!f.hf_classes().is_empty() && !f.hf_model_types().is_empty(), "{a:?}");
            assert_eq!(f.is_diffusion(), f.published_mask().is_some(), "{a:?}");
            let json = serde_json::json!({ "architectures": [f.hf_classes()[0]] });
            assert_eq!(detect_hf(&json, Path::new("c.json")).unwrap().arch(), a);
            let json = serde_json::json!({ "model_type": f.hf_model_types()[0] });
            assert_eq!(detect_hf(&json, Path::new("c.json")).unwrap().arch(), a);
        }
    }
}
