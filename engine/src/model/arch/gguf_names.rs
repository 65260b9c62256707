//! llama.cpp's GGUF tensor names, the same for every architecture (`blk.N.attn_q.weight`, ...).

use super::names::{ExpertLayout, Global, NameScheme, Part};

/// GGUF naming as written by llama.cpp's converters.
pub struct GgufNames;

impl NameScheme for GgufNames {
    fn global(&self, g: Global) -> String {
        match g {
            Global::Embedding => "token_embd.weight",
            Global::FinalNorm => "output_norm.weight",
            Global::LmHead => "output.weight",
        }
        .to_owned()
    }
    fn layer(&self, l: usize, p: Part) -> String {
        let s = match p {
            Part::AttnNorm => "attn_norm.weight",
            Part::Q => "attn_q.weight",
            Part::K => "attn_k.weight",
            Part::V => "attn_v.weight",
            Part::O => "attn_output.weight",
            Part::QBias => "attn_q.bias",
            Part::KBias => "attn_k.bias",
            Part::VBias => "attn_v.bias",
            Part::QNorm => "attn_q_norm.weight",
            Part::KNorm => "attn_k_norm.weight",
            Part::FfnNorm => "ffn_norm.weight",
            Part::Gate => "ffn_gate.weight",
            Part::Up => "ffn_up.weight",
            Part::Down => "ffn_down.weight",
            Part::Router => "ffn_gate_inp.weight",
        };
        format!("blk.{l}.{s}")
    }
    fn expert_layout(&self) -> ExpertLayout {
        ExpertLayout::Stacked
    }
    fn expert(&self, l: usize, _e: usize, p: Part) -> String {
        let s = match p {
            Part::Gate => "ffn_gate_exps",
            Part::Up => "ffn_up_exps",
            _ => "ffn_down_exps",
        };
        format!("blk.{l}.{s}.weight")
    }
}
