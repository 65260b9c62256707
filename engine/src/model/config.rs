//! Typed model configuration, read from HF `config.json` (per family) or GGUF metadata.

use std::path::Path;

use serde_json::Value;

use crate::error::{EngineError, Result};

/// Model families Unmask runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Architecture {
    /// LLaDA (`LLaDAModelLM`): Llama-like, bidirectional masked diffusion.
    Llada,
    /// Dream (`DreamModel`): Qwen2 backbone, bidirectional, logits shifted by one.
    Dream,
    /// LLaDA-MoE (`LLaDAMoEModelLM`): OLMoE-like MoE with per-head QK norm, bidirectional.
    LladaMoe,
    /// Llama family, autoregressive.
    Llama,
    /// Qwen2 family, autoregressive (q/k/v biases).
    Qwen2,
    /// Qwen3 family, autoregressive (per-head QK norm).
    Qwen3,
}

impl Architecture {
    /// True for masked-diffusion models (bidirectional attention, mask token).
    pub fn is_diffusion(self) -> bool {
        matches!(self, Architecture::Llada | Architecture::Dream | Architecture::LladaMoe)
    }
    /// The GGUF `general.architecture` string llama.cpp uses.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Llada => "llada",
            Architecture::Dream => "dream",
            Architecture::LladaMoe => "llada-moe",
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
        }
    }
    /// Parses a GGUF architecture string.
    pub fn from_gguf_name(s: &str) -> Option<Self> {
        Some(match s {
            "llada" => Architecture::Llada,
            "dream" => Architecture::Dream,
            "llada-moe" => Architecture::LladaMoe,
            "llama" => Architecture::Llama,
            "qwen2" => Architecture::Qwen2,
            "qwen3" => Architecture::Qwen3,
            _ => return None,
        })
    }
    /// Default mask token id of the published checkpoints of this family.
    pub fn default_mask_id(self) -> Option<u32> {
        match self {
            Architecture::Llada => Some(126336),
            Architecture::Dream => Some(151666),
            Architecture::LladaMoe => Some(156895),
            _ => None,
        }
    }
}

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RopeStyle {
    /// HF / NeoX convention: dimension i pairs with i + rotary_dim/2.
    RotateHalf,
    /// Original Llama / llama.cpp "NORM": adjacent dimensions (2i, 2i+1) pair up.
    Interleaved,
}

/// Mixture-of-experts settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MoeConfig {
    /// Number of routed experts.
    pub n_experts: usize,
    /// Experts used per token.
    pub top_k: usize,
    /// Hidden size of one expert's FFN.
    pub expert_ffn: usize,
    /// Renormalise the top-k router weights to sum to one.
    pub norm_topk_prob: bool,
}

/// Everything the forward pass and the decoders need to know about a model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelConfig {
    pub arch: Architecture,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Dense FFN hidden size (unused by all-MoE models).
    pub ffn: usize,
    pub vocab: usize,
    pub max_seq: usize,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    /// Number of head dimensions rotated (== head_dim unless partial rotary).
    pub rotary_dim: usize,
    pub rms_eps: f32,
    pub qkv_bias: bool,
    /// Per-head RMSNorm on q and k before RoPE.
    pub qk_norm: bool,
    pub moe: Option<MoeConfig>,
    /// Causal (AR) attention; false for diffusion models.
    pub causal: bool,
    /// Logit row p-1 predicts token p (Dream).
    pub shift_logits: bool,
    pub tie_embeddings: bool,
    pub mask_token_id: Option<u32>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub eot_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
}

impl ModelConfig {
    /// Width of one K or V row (all kv heads).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    /// Matrix parameters touched per token (for FLOP accounting): attention, FFN (active experts), LM head.
    pub fn linear_params_per_token(&self) -> usize {
        let attn = self.hidden * (self.q_dim() + 2 * self.kv_dim()) + self.q_dim() * self.hidden;
        let ffn = match &self.moe {
            Some(m) => m.top_k * 3 * self.hidden * m.expert_ffn + self.hidden * m.n_experts,
            None => 3 * self.hidden * self.ffn,
        };
        self.n_layers * (attn + ffn) + self.hidden * self.vocab
    }

    /// Reads `config.json` from an HF model directory or file path.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| EngineError::config(path, format!("invalid JSON: {e}")))?;
        Self::from_hf_json(&json, path)
    }

    /// Interprets a parsed HF `config.json`.
    pub fn from_hf_json(json: &Value, path: &Path) -> Result<Self> {
        let arch = detect_hf_architecture(json, path)?;
        let r = HfReader { json, path };
        let cfg = match arch {
            Architecture::Llada => {
                let hidden = r.usize("d_model")?;
                let n_heads = r.usize("n_heads")?;
                let n_kv_heads = r.opt_usize("n_kv_heads")?.unwrap_or(n_heads);
                let ffn = match r.opt_usize("mlp_hidden_size")? {
                    Some(v) => v,
                    None => r.usize("mlp_ratio")? * hidden,
                };
                let vocab = r.opt_usize("embedding_size")?.unwrap_or(r.usize("vocab_size")?);
                ModelConfig {
                    arch,
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
                    qkv_bias: r.opt_bool("include_qkv_bias")?.unwrap_or(false)
                        || r.opt_bool("include_bias")?.unwrap_or(false),
                    qk_norm: r.opt_bool("attention_layer_norm")?.unwrap_or(false),
                    moe: None,
                    causal: false,
                    shift_logits: false,
                    tie_embeddings: r.opt_bool("weight_tying")?.unwrap_or(false),
                    mask_token_id: r.opt_u32("mask_token_id")?.or(arch.default_mask_id()),
                    bos_token_id: r.opt_u32("bos_token_id")?,
                    eos_token_id: r.opt_u32("eos_token_id")?,
                    eot_token_id: r.opt_u32("eot_token_id")?,
                    pad_token_id: r.opt_u32("pad_token_id")?,
                }
            }
            _ => {
                // Qwen2 / Llama / Qwen3 / Dream / LLaDA-MoE share the HF "hidden_size" vocabulary.
                let hidden = r.usize("hidden_size")?;
                let n_heads = r.usize("num_attention_heads")?;
                let n_kv_heads = r.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
                let head_dim = r.opt_usize("head_dim")?.unwrap_or(hidden / n_heads);
                let moe = if arch == Architecture::LladaMoe {
                    let expert_ffn = match r.opt_usize("moe_intermediate_size")? {
                        Some(v) => v,
                        None => match r.opt_usize("expert_intermediate_size")? {
                            Some(v) => v,
                            None => r.usize("intermediate_size")?,
                        },
                    };
                    Some(MoeConfig {
                        n_experts: r.usize("num_experts")?,
                        top_k: r.usize("num_experts_per_tok")?,
                        expert_ffn,
                        norm_topk_prob: r.opt_bool("norm_topk_prob")?.unwrap_or(false),
                    })
                } else {
                    None
                };
                let partial = r.opt_f32("partial_rotary_factor")?.unwrap_or(1.0);
                ModelConfig {
                    arch,
                    hidden,
                    n_layers: r.usize("num_hidden_layers")?,
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    ffn: r.opt_usize("intermediate_size")?.unwrap_or(0),
                    vocab: r.usize("vocab_size")?,
                    max_seq: r.opt_usize("max_position_embeddings")?.unwrap_or(4096),
                    rope_theta: match r.opt_f32("rope_theta")? {
                        Some(t) => t,
                        // transformers 5 writes only `rope_parameters.rope_theta`.
                        None => json
                            .get("rope_parameters")
                            .and_then(|p| p.get("rope_theta"))
                            .and_then(|t| t.as_f64())
                            .map(|t| t as f32)
                            .unwrap_or(10000.0),
                    },
                    rope_style: RopeStyle::RotateHalf,
                    rotary_dim: ((head_dim as f32) * partial) as usize,
                    rms_eps: r.opt_f32("rms_norm_eps")?.unwrap_or(1e-6),
                    qkv_bias: matches!(arch, Architecture::Qwen2 | Architecture::Dream)
                        || r.opt_bool("attention_bias")?.unwrap_or(false),
                    qk_norm: matches!(arch, Architecture::Qwen3 | Architecture::LladaMoe)
                        && r.opt_bool("qk_layernorm")?.unwrap_or(true),
                    moe,
                    causal: !arch.is_diffusion(),
                    shift_logits: arch == Architecture::Dream,
                    tie_embeddings: r.opt_bool("tie_word_embeddings")?.unwrap_or(false),
                    mask_token_id: r.opt_u32("mask_token_id")?.or(arch.default_mask_id()),
                    bos_token_id: r.opt_u32("bos_token_id")?,
                    eos_token_id: r.opt_u32("eos_token_id")?,
                    eot_token_id: r.opt_u32("eot_token_id")?,
                    pad_token_id: r.opt_u32("pad_token_id")?,
                }
            }
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// Checks internal consistency (divisibility, non-zero sizes).
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |reason: String| Err(EngineError::config(path, reason));
        if self.hidden == 0 || self.n_layers == 0 || self.n_heads == 0 || self.vocab == 0 {
            return bad("hidden size, layer count, head count and vocab must be non-zero".into());
        }
        if self.n_kv_heads == 0 || self.n_heads % self.n_kv_heads != 0 {
            return bad(format!("{} heads not divisible by {} kv heads", self.n_heads, self.n_kv_heads));
        }
        if self.head_dim == 0 || self.rotary_dim > self.head_dim || self.rotary_dim % 2 != 0 {
            return bad(format!("bad head_dim {} / rotary_dim {}", self.head_dim, self.rotary_dim));
        }
        if self.moe.is_none() && self.ffn == 0 {
            return bad("intermediate (FFN) size is zero".into());
        }
        if let Some(m) = &self.moe {
            if m.top_k == 0 || m.top_k > m.n_experts || m.expert_ffn == 0 {
                return bad(format!("bad MoE settings {m:?}"));
            }
        }
        for (name, id) in [("mask", self.mask_token_id), ("bos", self.bos_token_id), ("eos", self.eos_token_id)] {
            if let Some(id) = id {
                if id as usize >= self.vocab {
                    return bad(format!("{name} token id {id} outside vocab of {}", self.vocab));
                }
            }
        }
        if self.arch.is_diffusion() && self.mask_token_id.is_none() {
            return bad("diffusion model without a mask token id".into());
        }
        Ok(())
    }
}

fn detect_hf_architecture(json: &Value, path: &Path) -> Result<Architecture> {
    let archs: Vec<String> = json
        .get("architectures")
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let model_type = json.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_lowercase();
    for a in &archs {
        let found = match a.as_str() {
            "LLaDAModelLM" | "LLaDAOGuiForDiffusionLM" => Some(Architecture::Llada),
            "DreamModel" => Some(Architecture::Dream),
            "LLaDAMoEModel" | "LLaDAMoEModelLM" => Some(Architecture::LladaMoe),
            "LlamaForCausalLM" => Some(Architecture::Llama),
            "Qwen2ForCausalLM" => Some(Architecture::Qwen2),
            "Qwen3ForCausalLM" => Some(Architecture::Qwen3),
            _ => None,
        };
        if let Some(f) = found {
            return Ok(f);
        }
    }
    let by_type = match model_type.as_str() {
        "llada" => Some(Architecture::Llada),
        "dream" => Some(Architecture::Dream),
        "llada_moe" | "lladamoe" => Some(Architecture::LladaMoe),
        "llama" => Some(Architecture::Llama),
        "qwen2" => Some(Architecture::Qwen2),
        "qwen3" => Some(Architecture::Qwen3),
        _ => None,
    };
    by_type.ok_or_else(|| EngineError::UnknownArchitecture {
        path: path.to_owned(),
        arch: if archs.is_empty() { model_type } else { archs.join(",") },
    })
}

struct HfReader<'a> {
    json: &'a Value,
    path: &'a Path,
}

impl HfReader<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }
    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| EngineError::config(self.path, format!("missing integer `{key}`")))
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|x| Some(x as usize))
                .ok_or_else(|| EngineError::config(self.path, format!("`{key}` is not a non-negative integer"))),
        }
    }
    fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        // Some configs carry a list of EOS ids; take the first.
        match self.get(key) {
            Some(Value::Array(a)) => Ok(a.first().and_then(|v| v.as_u64()).map(|x| x as u32)),
            _ => Ok(self.opt_usize(key)?.map(|x| x as u32)),
        }
    }
    fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| EngineError::config(self.path, format!("`{key}` is not a number"))),
        }
    }
    fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                v.as_bool().map(Some).ok_or_else(|| EngineError::config(self.path, format!("`{key}` is not a boolean")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llada_8b_config_is_understood() {
        let json = serde_json::json!({
            "architectures": ["LLaDAModelLM"], "d_model": 4096, "n_heads": 32, "n_kv_heads": 32,
            "n_layers": 32, "mlp_hidden_size": 12288, "vocab_size": 126464, "embedding_size": 126464,
            "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "mask_token_id": 126336, "eos_token_id": 126081,
            "max_sequence_length": 4096, "weight_tying": false
        });
        let c = ModelConfig::from_hf_json(&json, Path::new("config.json")).unwrap();
        assert_eq!(c.arch, Architecture::Llada);
        assert_eq!(c.head_dim, 128);
        assert_eq!(c.mask_token_id, Some(126336));
        assert!(!c.causal);
        assert_eq!(c.rope_theta, 500000.0);
    }

    #[test]
    fn unknown_architecture_is_an_error() {
        let json = serde_json::json!({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"});
        let e = ModelConfig::from_hf_json(&json, Path::new("x/config.json")).unwrap_err();
        assert!(matches!(e, EngineError::UnknownArchitecture { .. }), "{e}");
    }

    #[test]
    fn missing_key_names_it() {
        let json = serde_json::json!({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64});
        let e = ModelConfig::from_hf_json(&json, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("num_attention_heads"), "{e}");
    }
}
