//! What the HF decoder families (Llama, Qwen2, Qwen3, Qwen3-MoE, Dream, LLaDA-MoE) share: the
//! `hidden_size` vocabulary of `config.json` and the `model.layers.N.self_attn.*` tensor names.
//! Each family's file is one [`DecoderFamily`] value saying what it adds.

use super::hf_config::HfConfig;
use super::names::{Global, NameScheme, Part};
use super::{Family, GgufConventions};
use crate::error::{EngineError, Result};
use crate::model::chat::ChatTemplate;
use crate::model::config::{describe, Architecture, ModelConfig, MoeConfig, RopeStyle};

/// An HF decoder family, as data: what its files call it and what it adds to the shared keys.
pub struct DecoderFamily {
    pub arch: Architecture,
    /// `architectures` entries of its `config.json`.
    pub hf_classes: &'static [&'static str],
    /// `model_type` values of its `config.json`.
    pub hf_model_types: &'static [&'static str],
    /// Mask token id and vocabulary of the published checkpoints; `Some` = a diffusion family.
    pub published_mask: Option<(u32, usize)>,
    pub traits: DecoderTraits,
    pub names: &'static dyn NameScheme,
    pub gguf: GgufConventions,
    pub chat_template: fn() -> ChatTemplate,
}

/// ChatML with Qwen's default system prompt (Dream and the Qwen families).
pub fn chatml_helpful_assistant() -> ChatTemplate {
    ChatTemplate::ChatMl { default_system: Some("You are a helpful assistant.".into()) }
}

impl Family for DecoderFamily {
    fn arch(&self) -> Architecture {
        self.arch
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        self.hf_classes
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        self.hf_model_types
    }
    fn is_diffusion(&self) -> bool {
        self.published_mask.is_some()
    }
    fn published_mask(&self) -> Option<(u32, usize)> {
        self.published_mask
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        decoder_config(self, r)
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        self.names
    }
    fn gguf(&self) -> GgufConventions {
        self.gguf
    }
    fn chat_template(&self) -> ChatTemplate {
        (self.chat_template)()
    }
}

/// What a decoder family adds to the shared keys.
pub struct DecoderTraits {
    /// q/k/v projections always have biases (else only with `attention_bias`).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on q and k (unless `qk_layernorm` is false).
    pub qk_norm: bool,
    /// Logit row p−1 predicts token p.
    pub shift_logits: bool,
    /// Reads the family's MoE keys (`None`: a dense model).
    pub moe: Option<fn(&HfConfig) -> Result<MoeConfig>>,
}

/// Reads the shared decoder keys of `family`'s `config.json`.
fn decoder_config(family: &DecoderFamily, r: &HfConfig) -> Result<ModelConfig> {
    let (arch, traits) = (family.arch, &family.traits);
    let path = r.path;
    let hidden = r.positive("hidden_size")?;
    let n_heads = r.positive("num_attention_heads")?;
    let n_kv_heads = r.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
    let head_dim = match r.opt_usize("head_dim")? {
        Some(d) => d,
        None if hidden.is_multiple_of(n_heads) => hidden / n_heads,
        None => {
            return Err(EngineError::config(
                path,
                format!("`hidden_size` ({hidden}) is not a multiple of `num_attention_heads` ({n_heads}) and no `head_dim` is given"),
            ))
        }
    };
    let moe = traits.moe.map(|read| read(r)).transpose()?;
    let partial = r.opt_f32("partial_rotary_factor")?.unwrap_or(1.0);
    if !(partial > 0.0 && partial <= 1.0) {
        return Err(EngineError::config(path, format!("`partial_rotary_factor` is {partial}; it must lie in (0, 1]")));
    }
    let vocab = r.usize("vocab_size")?;
    Ok(ModelConfig {
        arch,
        hidden,
        n_layers: r.usize("num_hidden_layers")?,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn: r.opt_usize("intermediate_size")?.unwrap_or(0),
        vocab,
        max_seq: r.opt_usize("max_position_embeddings")?.unwrap_or(4096),
        rope_theta: match r.opt_f32("rope_theta")? {
            Some(t) => t,
            // transformers 5 writes only `rope_parameters.rope_theta`.
            None => match r.json.get("rope_parameters").and_then(|p| p.get("rope_theta")) {
                None => 10000.0,
                Some(t) => t.as_f64().map(|t| t as f32).ok_or_else(|| {
                    EngineError::config(
                        path,
                        format!("`rope_parameters.rope_theta` is {}, expected a number", describe(t)),
                    )
                })?,
            },
        },
        rope_style: RopeStyle::RotateHalf,
        rotary_dim: ((head_dim as f32) * partial) as usize,
        rms_eps: r.opt_f32("rms_norm_eps")?.unwrap_or(1e-6),
        qkv_bias: traits.qkv_bias || r.opt_bool("attention_bias")?.unwrap_or(false),
        qk_norm: traits.qk_norm && r.opt_bool("qk_layernorm")?.unwrap_or(true),
        moe,
        causal: !family.is_diffusion(),
        shift_logits: traits.shift_logits,
        tie_embeddings: r.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        mask_token_id: r.opt_u32("mask_token_id")?.or(published_mask_id(family.published_mask(), vocab)),
        bos_token_id: r.opt_u32("bos_token_id")?,
        eos_token_id: r.opt_u32("eos_token_id")?,
        eot_token_id: r.opt_u32("eot_token_id")?,
        pad_token_id: r.opt_u32("pad_token_id")?,
    })
}

/// The published mask id, only for a model with the published vocabulary: any other
/// vocabulary must name its mask token, or its id would point at an arbitrary token.
pub(crate) fn published_mask_id(published: Option<(u32, usize)>, vocab: usize) -> Option<u32> {
    published.filter(|&(_, v)| v == vocab).map(|(id, _)| id)
}

/// `model.embed_tokens`, `model.layers.N.{self_attn,mlp}.*`, `model.norm`, `lm_head`; experts
/// (Qwen3-MoE) as `model.layers.N.mlp.experts.E.{gate,up,down}_proj`, router `mlp.gate`.
pub struct HfDecoderNames;

/// Name of a layer part under `model.layers.{l}.` (shared with LLaDA-MoE).
pub(crate) fn hf_layer_name(l: usize, p: Part) -> String {
    let s = match p {
        Part::AttnNorm => "input_layernorm.weight",
        Part::Q => "self_attn.q_proj.weight",
        Part::K => "self_attn.k_proj.weight",
        Part::V => "self_attn.v_proj.weight",
        Part::O => "self_attn.o_proj.weight",
        Part::QBias => "self_attn.q_proj.bias",
        Part::KBias => "self_attn.k_proj.bias",
        Part::VBias => "self_attn.v_proj.bias",
        Part::QNorm => "self_attn.q_norm.weight",
        Part::KNorm => "self_attn.k_norm.weight",
        Part::FfnNorm => "post_attention_layernorm.weight",
        Part::Gate => "mlp.gate_proj.weight",
        Part::Up => "mlp.up_proj.weight",
        Part::Down => "mlp.down_proj.weight",
        Part::Router => "mlp.gate.weight",
    };
    format!("model.layers.{l}.{s}")
}

pub(crate) fn hf_global_name(g: Global) -> String {
    match g {
        Global::Embedding => "model.embed_tokens.weight",
        Global::FinalNorm => "model.norm.weight",
        Global::LmHead => "lm_head.weight",
    }
    .to_owned()
}

impl NameScheme for HfDecoderNames {
    fn global(&self, g: Global) -> String {
        hf_global_name(g)
    }
    fn layer(&self, l: usize, p: Part) -> String {
        hf_layer_name(l, p)
    }
    fn expert(&self, l: usize, e: usize, p: Part) -> String {
        super::llada_moe::LladaMoeNames.expert(l, e, p)
    }
}
