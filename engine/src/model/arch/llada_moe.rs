//! LLaDA-MoE (`LLaDAMoEModelLM`): OLMoE-like masked diffusion with routed experts in every layer
//! and per-head QK norm; HF decoder naming plus per-expert MLPs; LLaDA2 role-tag chat.

use super::hf_config::HfConfig;
use super::hf_decoder::{hf_global_name, hf_layer_name, DecoderFamily, DecoderTraits};
use super::names::{Global, NameScheme, Part};
use super::{GgufConventions, GGUF_DEFAULTS};
use crate::error::Result;
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, MoeConfig};

/// The LLaDA-MoE family.
pub const LLADA_MOE: DecoderFamily = DecoderFamily {
    arch: Architecture::LladaMoe,
    hf_classes: &["LLaDAMoEModel", "LLaDAMoEModelLM"],
    hf_model_types: &["llada_moe", "lladamoe"],
    published_mask: Some((156895, 157184)),
    traits: DecoderTraits { qkv_bias: false, qk_norm: true, shift_logits: false, moe: Some(moe_config) },
    names: &LladaMoeNames,
    gguf: GgufConventions { name: "llada-moe", ..GGUF_DEFAULTS },
    chat_template: || ChatTemplate::LladaMoe,
};

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
