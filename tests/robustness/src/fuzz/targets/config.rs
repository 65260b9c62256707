//! HF `config.json` parsing and validation for every family.

use serde_json::{json, Value};
use unmask_engine::model::ModelConfig;
use unmask_engine::EngineError;

use super::{Scratch, Target};
use crate::fuzz::rng::Rng;
use crate::fuzz::{bytes, json, seeds, FuzzError};

/// LLaDA's own (OLMo-style) keys.
const LLADA_KEYS: &[&str] = &[
    "d_model",
    "n_heads",
    "n_kv_heads",
    "n_layers",
    "mlp_hidden_size",
    "mlp_ratio",
    "vocab_size",
    "embedding_size",
    "max_sequence_length",
    "rope_theta",
    "rms_norm_eps",
    "include_qkv_bias",
    "include_bias",
    "attention_layer_norm",
    "weight_tying",
];

/// The HF keys of Llama, Qwen2, Qwen3, Dream and LLaDA-MoE.
const HF_KEYS: &[&str] = &[
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rope_theta",
    "rope_parameters",
    "partial_rotary_factor",
    "rms_norm_eps",
    "attention_bias",
    "qk_layernorm",
    "tie_word_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "expert_intermediate_size",
    "norm_topk_prob",
];

/// Keys every family reads.
const COMMON_KEYS: &[&str] =
    &["architectures", "model_type", "mask_token_id", "bos_token_id", "eos_token_id", "eot_token_id", "pad_token_id"];

const ARCHITECTURES: &[&str] = &[
    "LLaDAModelLM",
    "DreamModel",
    "LLaDAMoEModelLM",
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "GPT2LMHeadModel",
    "",
];

/// Mutates a `config.json`: mostly one known key of the file's family set to a hostile value.
pub fn mutate_config(input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
    let parsed = if rng.chance(9, 10) { serde_json::from_slice::<Value>(input).ok() } else { None };
    let Some(mut v) = parsed else {
        bytes::mutate(input, rng, corpus);
        return;
    };
    for _ in 0..rng.range(1, 2) {
        let is_llada = v.get("d_model").is_some();
        let family = if is_llada { LLADA_KEYS } else { HF_KEYS };
        match rng.below(10) {
            0..=5 => {
                let key = if rng.chance(4, 5) { *rng.pick(family) } else { *rng.pick(COMMON_KEYS) };
                json::set_key(&mut v, "", key, rng);
            }
            6 => {
                // Same shape, another family: keys of one family read by another's parser.
                if let Some(o) = v.as_object_mut() {
                    o.insert("architectures".into(), json!([rng.pick(ARCHITECTURES)]));
                }
            }
            7 => {
                if let Some(o) = v.as_object_mut() {
                    o.insert("rope_parameters".into(), json!({"rope_theta": json::hostile_value(rng)}));
                    o.remove("rope_theta");
                }
            }
            8 => {
                // Two sizes at once, so products (heads × head_dim) can overflow past validation.
                let a = *rng.pick(family);
                let b = *rng.pick(family);
                if let Some(o) = v.as_object_mut() {
                    let big = json!(*rng.pick(&[1u64 << 32, 1 << 62, u64::MAX, 1 << 31]));
                    o.insert(a.into(), big.clone());
                    o.insert(b.into(), big);
                }
            }
            _ => json::mutate(&mut v, rng, family),
        }
    }
    *input = json::to_bytes(&v, rng);
}

/// `ModelConfig::from_hf_file` on a mutated `config.json`.
pub struct HfConfig {
    scratch: Scratch,
}

impl HfConfig {
    pub fn new() -> Result<Self, FuzzError> {
        Ok(HfConfig { scratch: Scratch::new()? })
    }
}

impl Target for HfConfig {
    fn name(&self) -> &'static str {
        "hf_config"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::seeds().map(|s| s.configs.clone()).unwrap_or_default()
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        mutate_config(input, rng, corpus);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let path = self.scratch.write("config.json", input)?;
        let cfg = ModelConfig::from_hf_file(&path)?;
        // The loader sizes its first matrices from these right after parsing.
        let _ = (cfg.q_dim(), cfg.kv_dim());
        Ok(())
    }
}
