//! LLaDA-MoE (`LLaDAMoEModelLM`) names: OLMoE-like HF decoder naming plus per-expert MLPs.

use super::hf_decoder::{hf_global_name, hf_layer_name};
use super::{Global, NameScheme, Part};

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
