//! LLaDA (`LLaDAModelLM`): Llama-like masked diffusion with OLMo-style config keys (`d_model`,
//! `n_heads`, ...) and tensor names (`model.transformer.*`); Llama-3 style chat headers.

use super::hf_config::HfConfig;
use super::hf_decoder::published_mask_id;
use super::names::{Global, NameScheme, Part};
use super::{Family, GgufConventions, GGUF_DEFAULTS};
use crate::error::{EngineError, Result};
use crate::model::chat::ChatTemplate;
use crate::model::config::{Architecture, ConfigKeys, ModelConfig, RopeStyle};

/// The LLaDA family.
pub struct Llada;

impl Family for Llada {
    fn arch(&self) -> Architecture {
        Architecture::Llada
    }
    fn hf_classes(&self) -> &'static [&'static str] {
        &["LLaDAModelLM", "LLaDAOGuiForDiffusionLM"]
    }
    fn hf_model_types(&self) -> &'static [&'static str] {
        &["llada"]
    }
    fn is_diffusion(&self) -> bool {
        true
    }
    fn published_mask(&self) -> Option<(u32, usize)> {
        Some((126336, 126464))
    }
    fn config_from_hf(&self, r: &HfConfig) -> Result<ModelConfig> {
        let path = r.path;
        let hidden = r.positive("d_model")?;
        let n_heads = r.positive("n_heads")?;
        let n_kv_heads = r.opt_usize("n_kv_heads")?.unwrap_or(n_heads);
        let ffn = match r.opt_usize("mlp_hidden_size")? {
            Some(v) => v,
            None => r
                .usize("mlp_ratio")?
                .checked_mul(hidden)
                .ok_or_else(|| EngineError::config(path, format!("`mlp_ratio` times `d_model` {hidden} overflows")))?,
        };
        let vocab = r.opt_usize("embedding_size")?.unwrap_or(r.usize("vocab_size")?);
        if !hidden.is_multiple_of(n_heads) {
            return Err(EngineError::config(
                path,
                format!("`d_model` ({hidden}) is not a multiple of `n_heads` ({n_heads})"),
            ));
        }
        Ok(ModelConfig {
            arch: Architecture::Llada,
            hidden,
            n_layers: r.usize("n_layers")?,
            n_heads,
            n_kv_heads,
            head_dim: hidden / n_heads,
            ffn,
            vocab,
            max_seq: r.opt_usize("max_sequence_length")?.unwrap_or(4096),
            rope_theta: r.opt_f32("rope_theta")?.unwrap_or(10000.0),
            rope_style: RopeStyle::RotateHalf,
            rotary_dim: hidden / n_heads,
            rms_eps: r.opt_f32("rms_norm_eps")?.unwrap_or(1e-5),
            qkv_bias: r.opt_bool("include_qkv_bias")?.unwrap_or(false) || r.opt_bool("include_bias")?.unwrap_or(false),
            qk_norm: r.opt_bool("attention_layer_norm")?.unwrap_or(false),
            moe: None,
            causal: false,
            // Not a published LLaDA key: our AR-converted dLLMs may keep the AR head's meaning
            // (row p-1 predicts token p, as Dream does); decoding stays LLaDA's.
            shift_logits: r.opt_bool("shift_logits")?.unwrap_or(false),
            tie_embeddings: r.opt_bool("weight_tying")?.unwrap_or(false),
            mask_token_id: r.opt_u32("mask_token_id")?.or(published_mask_id(self.published_mask(), vocab)),
            bos_token_id: r.opt_u32("bos_token_id")?,
            eos_token_id: r.opt_u32("eos_token_id")?,
            eot_token_id: r.opt_u32("eot_token_id")?,
            pad_token_id: r.opt_u32("pad_token_id")?,
        })
    }
    fn hf_keys(&self) -> ConfigKeys {
        ConfigKeys::from([
            "`d_model`",
            "`n_layers`",
            "`n_heads`",
            "`n_kv_heads`",
            "`d_model` / `n_heads`",
            "`d_model` / `n_heads`",
            "`mlp_hidden_size`",
            "`vocab_size`",
            "`max_sequence_length`",
            "`rope_theta`",
            "`rms_norm_eps`",
            "`mask_token_id`",
            "`bos_token_id`",
            "`eos_token_id`",
            "`eot_token_id`",
            "`pad_token_id`",
            "`num_experts`",
            "`num_experts_per_tok`",
            "`moe_intermediate_size`",
        ])
    }
    fn hf_names(&self) -> &'static dyn super::NameScheme {
        &LladaNames
    }
    fn gguf(&self) -> GgufConventions {
        GgufConventions {
            name: "llada",
            permuted_rope: true,
            default_rms_eps: 1e-5,
            pre_tokenizer: "llama-bpe",
            add_bos: true,
            ..GGUF_DEFAULTS
        }
    }
    fn chat_template(&self) -> ChatTemplate {
        ChatTemplate::Llada
    }
}

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
