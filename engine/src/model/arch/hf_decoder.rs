//! HF decoder naming shared by Llama, Qwen2, Qwen3, Qwen3-MoE and Dream (`model.layers.N.self_attn.*`).

use super::{Global, NameScheme, Part};

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
