//! LLaDA (`LLaDAModelLM`) checkpoint names: OLMo-style `model.transformer.*`.

use super::{Global, NameScheme, Part};

/// LLaDA's tensor names (`ff_proj` = gate, `up_proj` = up, `ff_out` = down, `attn_out` = o).
pub struct LladaNames;

impl NameScheme for LladaNames {
    fn global(&self, g: Global) -> String {
        match g {
            Global::Embedding => "model.transformer.wte.weight",
            Global::FinalNorm => "model.transformer.ln_f.weight",
            Global::LmHead => "model.transformer.ff_out.weight",
        }
        .to_owned()
    }
    fn layer(&self, l: usize, p: Part) -> String {
        let s = match p {
            Part::AttnNorm => "attn_norm.weight",
            Part::Q => "q_proj.weight",
            Part::K => "k_proj.weight",
            Part::V => "v_proj.weight",
            Part::O => "attn_out.weight",
            Part::QBias => "q_proj.bias",
            Part::KBias => "k_proj.bias",
            Part::VBias => "v_proj.bias",
            Part::QNorm => "q_norm.weight",
            Part::KNorm => "k_norm.weight",
            Part::FfnNorm => "ff_norm.weight",
            Part::Gate => "ff_proj.weight",
            Part::Up => "up_proj.weight",
            Part::Down => "ff_out.weight",
            Part::Router => "router.weight",
        };
        format!("model.transformer.blocks.{l}.{s}")
    }
    fn expert(&self, l: usize, e: usize, p: Part) -> String {
        // Dense LLaDA has no experts; this naming only serves hypothetical MoE variants.
        format!(
            "model.transformer.blocks.{l}.experts.{e}.{}",
            if p == Part::Up {
                "up_proj.weight"
            } else if p == Part::Gate {
                "ff_proj.weight"
            } else {
                "ff_out.weight"
            }
        )
    }
}
