//! LLaDA-MoE (`LLaDAMoEModelLM`): OLMoE-like masked diffusion with routed experts in every layer
//! and per-head QK norm; HF decoder naming plus per-expert MLPs; LLaDA2 role-tag chat.

use super::hf_config::HfConfig;
use super::hf_decoder::{decoder_config, hf_global_name, hf_layer_name, DecoderTraits};
use super::names::{Global, NameScheme, Part};
use super::{Family, GgufConventions, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ModelConfig, MoeConfig};

/// The LLaDA-MoE family.
pub struct LladaMoe;

impl Family for LladaMoe {
    fn arch(&self) -> Architecture {
        Architecture::LladaMoe
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["LLaDAMoEModel", "LLaDAMoEModelLM"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["llada_moe", "lladamoe"]
    }
    fn is_diffusion(&self) -> bool {
        true
    }
    fn published_mask(&self) -> Option<(u32, usize)> {
        Some((156895, 157184))
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        let traits = DecoderTraits { qkv_bias: false, qk_norm: true, shift_logits: false, moe: Some(moe_config) };
        decoder_config(Architecture::LladaMoe, r, traits)
    }
    fn hf_names(&self) -> &'static dyn NameScheme {
        &LladaMoeNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions { name: "llada-moe", ..GGUF_DEFAULTS }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::LladaMoe
    }
}

/// The MoE keys of a LLaDA-MoE `config.json` (the expert FFN under any of three names).
fn moe_config(r: &HfConfig) -> Result<MoeConfig> {
    let expert_ffn = match r.opt_usize("moe_intermediate_size")? {
        Some(v) => v,
        None => match r.opt_usize("expert_intermediate_size")? {
            Some(v) => v,
            None => r.usize("intermediate_size")?,
        },
    };
    Ok(MoeConfig {
        n_experts: r.usize("num_experts")?,
        top_k: r.usize("num_experts_per_tok")?,
        expert_ffn,
        norm_topk_prob: r.opt_bool("norm_topk_prob")?.unwrap_or(false),
    })
}

/// `model.layers.N.mlp.gate` (router) and `model.layers.N.mlp.experts.E.{gate,up,down}_proj`.
pub struct LladaMoeNames;

impl NameScheme for LladaMoeNames {
    fn global(&self, g: Global) -> String {
        hf_global_name(g)
    }
    fn layer(&self, l: usize, p: Part) -> String {
        hf_layer_name(l, p)
    }
    fn expert(&self, l: usize, e: usize, p: Part) -> String {
        let proj = match p {
            Part::Gate => "gate_proj",
            Part::Up => "up_proj",
            _ => "down_proj",
        };
        format!("model.layers.{l}.mlp.experts.{e}.{proj}.weight")
    }
}
