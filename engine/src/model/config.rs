//! Typed model configuration, read from HF `config.json` (per family) or GGUF metadata.

use std::path::Path;

use serde_json::Value;

use super::arch::hf_config::HfConfig;
use super::arch::Family;
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
    /// Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3 attention with routed experts in every layer, autoregressive.
    Qwen3Moe,
}

impl Architecture {
    /// Every family, in the order HF configs are matched against.
    pub const ALL: &'static [Architecture] = &[
        Architecture::Llada,
        Architecture::Dream,
        Architecture::LladaMoe,
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Qwen3Moe,
    ];
    /// Its family's file (`model/arch/`): checkpoint keys and names, special ids, chat template.
    pub fn family(self) -> &'static dyn Family {
        super::arch::family(self)
    }
    /// True for masked-diffusion models (bidirectional attention, mask token).
    pub fn is_diffusion(self) -> bool {
        self.family().is_diffusion()
    }
    /// The GGUF `general.architecture` string llama.cpp uses.
    pub fn gguf_name(self) -> &'static str {
        self.family().gguf().name
    }
    /// Parses a GGUF architecture string.
    pub fn from_gguf_name(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.gguf_name() == s)
    }
    /// Mask token id and vocabulary size of the published checkpoints of this family.
    pub fn published_mask(self) -> Option<(u32, usize)> {
        self.family().published_mask()
    }
    /// The published mask id, only for a model with the published vocabulary: any other
    /// vocabulary must name its mask token, or its id would point at an arbitrary token.
    pub fn published_mask_id(self, vocab: usize) -> Option<u32> {
        super::arch::hf_decoder::published_mask_id(self.published_mask(), vocab)
    }
}

/// How rotary embeddings pair up the dimensions of a head (defined with the RoPE kernel).
pub use crate::kernels::rope::RopeStyle;

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
        let text = crate::files::read_text(path)?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| EngineError::config(path, format!("not valid JSON ({e})")))?;
        if !json.is_object() {
            return Err(EngineError::config(path, format!("is {}, expected a JSON object", describe(&json))));
        }
        Self::from_hf_json(&json, path)
    }

    /// Interprets a parsed HF `config.json` (its family's file reads the keys).
    pub fn from_hf_json(json: &Value, path: &Path) -> Result<Self> {
        let family = super::arch::detect_hf(json, path)?;
        let cfg = family.config_from_hf(&HfConfig { json, path })?;
        cfg.validate_keys(path, &family.hf_keys())?;
        Ok(cfg)
    }

    /// Checks internal consistency (divisibility, non-zero sizes) and that every size is
    /// plausible for a real model, before anything is allocated from it. Errors describe fields
    /// in words; [`ModelConfig::validate_keys`] names the file's own keys instead.
    pub fn validate(&self, path: &Path) -> Result<()> {
        self.validate_keys(path, &ConfigKeys::words())
    }

    /// [`ModelConfig::validate`], naming each field by the key `keys` says the file uses.
    pub fn validate_keys(&self, path: &Path, keys: &ConfigKeys) -> Result<()> {
        let bad = |reason: String| Err(EngineError::config(path, reason));
        for (key, value, limit) in [
            (&keys.hidden, self.hidden, limits::HIDDEN),
            (&keys.n_layers, self.n_layers, limits::LAYERS),
            (&keys.n_heads, self.n_heads, limits::HEADS),
            (&keys.n_kv_heads, self.n_kv_heads, limits::HEADS),
            (&keys.head_dim, self.head_dim, limits::HEAD_DIM),
            (&keys.vocab, self.vocab, limits::VOCAB),
            (&keys.max_seq, self.max_seq, limits::CONTEXT),
        ] {
            if value == 0 {
                return bad(format!("{key} is 0; it must be at least 1"));
            }
            if value > limit {
                return bad(format!("{key} is {value}, implausible: no supported model exceeds {limit}"));
            }
        }
        if self.ffn > limits::FFN {
            return bad(format!("{} is {}, implausible: no supported model exceeds {}", keys.ffn, self.ffn, limits::FFN));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} ({}) is not a multiple of {} ({})",
                keys.n_heads, self.n_heads, keys.n_kv_heads, self.n_kv_heads
            ));
        }
        if self.rotary_dim > self.head_dim || !self.rotary_dim.is_multiple_of(2) || self.rotary_dim == 0 {
            return bad(format!(
                "{} gives a rotary dimension of {}; it must be even, positive and at most the head dimension {}",
                keys.rotary, self.rotary_dim, self.head_dim
            ));
        }
        if self.q_dim() > limits::HIDDEN * 4 {
            return bad(format!(
                "{} ({}) heads of dimension {} are implausible for {} {}",
                keys.n_heads, self.n_heads, self.head_dim, keys.hidden, self.hidden
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("{} is {}; it must be a positive finite number", keys.rope_theta, self.rope_theta));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0 && self.rms_eps < 1.0) {
            return bad(format!("{} is {}; it must lie in [0, 1)", keys.rms_eps, self.rms_eps));
        }
        if self.moe.is_none() && self.ffn == 0 {
            return bad(format!("{} is 0; it must be at least 1", keys.ffn));
        }
        if let Some(m) = &self.moe {
            if m.n_experts == 0 || m.n_experts > limits::EXPERTS {
                return bad(format!("{} is {}; it must lie in 1..={}", keys.n_experts, m.n_experts, limits::EXPERTS));
            }
            if m.top_k == 0 || m.top_k > m.n_experts {
                return bad(format!(
                    "{} is {}; it must lie in 1..={} ({})",
                    keys.top_k, m.top_k, m.n_experts, keys.n_experts
                ));
            }
            if m.expert_ffn == 0 || m.expert_ffn > limits::FFN {
                return bad(format!("{} is {}; it must lie in 1..={}", keys.expert_ffn, m.expert_ffn, limits::FFN));
            }
        }
        for (key, id) in [
            (&keys.mask, self.mask_token_id),
            (&keys.bos, self.bos_token_id),
            (&keys.eos, self.eos_token_id),
            (&keys.eot, self.eot_token_id),
            (&keys.pad, self.pad_token_id),
        ] {
            if let Some(id) = id {
                if id as usize >= self.vocab {
                    return bad(format!("{key} is {id}, outside the vocabulary of {} tokens", self.vocab));
                }
            }
        }
        if self.arch.is_diffusion() && self.mask_token_id.is_none() {
            let published = match self.arch.published_mask() {
                Some((id, v)) => format!(" (the published default {id} applies only to the {v}-token vocabulary)"),
                None => String::new(),
            };
            return bad(format!("no {} given; a diffusion model needs a mask token{published}", keys.mask));
        }
        Ok(())
    }
}

/// How a config file names each field, for errors that point at the exact key.
#[derive(Debug, Clone)]
pub struct ConfigKeys {
    pub hidden: String,
    pub n_layers: String,
    pub n_heads: String,
    pub n_kv_heads: String,
    pub head_dim: String,
    pub rotary: String,
    pub ffn: String,
    pub vocab: String,
    pub max_seq: String,
    pub rope_theta: String,
    pub rms_eps: String,
    pub mask: String,
    pub bos: String,
    pub eos: String,
    pub eot: String,
    pub pad: String,
    pub n_experts: String,
    pub top_k: String,
    pub expert_ffn: String,
}

impl ConfigKeys {
    /// Keys in field order: hidden, layers, heads, kv heads, head dim, rotary, FFN, vocab,
    /// context, RoPE theta, RMS eps, mask, BOS, EOS, EOT, pad, experts, top-k, expert FFN.
    pub(crate) fn from(k: [&str; 19]) -> Self {
        let s = |i: usize| k[i].to_owned();
        ConfigKeys {
            hidden: s(0),
            n_layers: s(1),
            n_heads: s(2),
            n_kv_heads: s(3),
            head_dim: s(4),
            rotary: s(5),
            ffn: s(6),
            vocab: s(7),
            max_seq: s(8),
            rope_theta: s(9),
            rms_eps: s(10),
            mask: s(11),
            bos: s(12),
            eos: s(13),
            eot: s(14),
            pad: s(15),
            n_experts: s(16),
            top_k: s(17),
            expert_ffn: s(18),
        }
    }
    /// Fields in words (configs built in code).
    pub fn words() -> Self {
        Self::from([
            "the hidden size", "the layer count", "the attention head count", "the key/value head count",
            "the head dimension", "the head dimension", "the FFN size", "the vocabulary size",
            "the context length", "RoPE theta", "the RMSNorm epsilon", "the mask token id", "the BOS token id",
            "the EOS token id", "the EOT token id", "the padding token id", "the expert count",
            "the experts per token", "the expert FFN size",
        ])
    }
    /// The Hugging Face `config.json` of the HF decoder families (Llama, Qwen, Dream, LLaDA-MoE).
    pub fn hf() -> Self {
        Self::from([
            "`hidden_size`", "`num_hidden_layers`", "`num_attention_heads`", "`num_key_value_heads`",
            "`head_dim`", "`partial_rotary_factor` × `head_dim`", "`intermediate_size`", "`vocab_size`",
            "`max_position_embeddings`", "`rope_theta`", "`rms_norm_eps`", "`mask_token_id`", "`bos_token_id`",
            "`eos_token_id`", "`eot_token_id`", "`pad_token_id`", "`num_experts`", "`num_experts_per_tok`",
            "`moe_intermediate_size`",
        ])
    }
    /// llama.cpp's GGUF metadata of architecture `arch`.
    pub fn gguf(arch: &str) -> Self {
        let k = |s: &str| format!("`{arch}.{s}`");
        ConfigKeys {
            hidden: k("embedding_length"),
            n_layers: k("block_count"),
            n_heads: k("attention.head_count"),
            n_kv_heads: k("attention.head_count_kv"),
            head_dim: k("attention.key_length"),
            rotary: k("rope.dimension_count"),
            ffn: k("feed_forward_length"),
            vocab: "the vocabulary size (`tokenizer.ggml.tokens`)".into(),
            max_seq: k("context_length"),
            rope_theta: k("rope.freq_base"),
            rms_eps: k("attention.layer_norm_rms_epsilon"),
            mask: "`tokenizer.ggml.mask_token_id`".into(),
            bos: "`tokenizer.ggml.bos_token_id`".into(),
            eos: "`tokenizer.ggml.eos_token_id`".into(),
            eot: "`tokenizer.ggml.eot_token_id`".into(),
            pad: "`tokenizer.ggml.padding_token_id`".into(),
            n_experts: k("expert_count"),
            top_k: k("expert_used_count"),
            expert_ffn: k("expert_feed_forward_length"),
        }
    }
}

/// Upper bounds on sizes read from files: generous for every published model, small enough that
/// a hostile header cannot make the loader allocate unbounded memory before the tensors are read.
pub mod limits {
    pub const HIDDEN: usize = 1 << 18;
    pub const LAYERS: usize = 4096;
    pub const HEADS: usize = 4096;
    pub const HEAD_DIM: usize = 4096;
    pub const FFN: usize = 1 << 20;
    pub const VOCAB: usize = 1 << 23;
    pub const CONTEXT: usize = 1 << 24;
    pub const EXPERTS: usize = 4096;
}

/// A JSON value in words, for error messages ("the string \"abc\"", "the negative number -3").
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|x| x < 0) => format!("the negative number {n}"),
        Value::Number(n) if n.is_f64() => format!("the fractional number {n}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(t) => {
            let short: String = t.chars().take(40).collect();
            format!("the string \"{}\"", short.escape_default())
        }
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::Object(_) => "an object".into(),
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

    fn qwen3_30b_a3b() -> serde_json::Value {
        serde_json::json!({
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
            "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6, "vocab_size": 151936, "max_position_embeddings": 40960,
            "tie_word_embeddings": false, "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151645
        })
    }

    #[test]
    fn qwen3_moe_config_is_understood() {
        let c = ModelConfig::from_hf_json(&qwen3_30b_a3b(), Path::new("config.json")).unwrap();
        assert_eq!(c.arch, Architecture::Qwen3Moe);
        assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim, c.q_dim()), (32, 4, 128, 4096));
        assert_eq!(c.moe, Some(MoeConfig { n_experts: 128, top_k: 8, expert_ffn: 768, norm_topk_prob: true }));
        assert!(c.causal && c.qk_norm && !c.qkv_bias && !c.shift_logits && !c.tie_embeddings);
        assert_eq!(c.arch.gguf_name(), "qwen3moe");
        // transformers 5 writes `num_local_experts`; the model type alone also names the family.
        let mut j = qwen3_30b_a3b();
        let o = j.as_object_mut().unwrap();
        o.remove("num_experts");
        o.remove("architectures");
        o.insert("num_local_experts".into(), serde_json::json!(64));
        let c = ModelConfig::from_hf_json(&j, Path::new("config.json")).unwrap();
        assert_eq!((c.arch, c.moe.unwrap().n_experts), (Architecture::Qwen3Moe, 64));
    }

    #[test]
    fn qwen3_moe_with_dense_layers_is_refused() {
        for (key, value, expect) in [
            ("decoder_sparse_step", serde_json::json!(2), "`decoder_sparse_step` is 2"),
            ("mlp_only_layers", serde_json::json!([0, 3]), "`mlp_only_layers` is a list of 2 items"),
        ] {
            let mut j = qwen3_30b_a3b();
            j.as_object_mut().unwrap().insert(key.into(), value);
            let e = ModelConfig::from_hf_json(&j, Path::new("m/config.json")).unwrap_err().to_string();
            assert!(e.contains("m/config.json") && e.contains(expect), "{e}");
        }
        let mut j = qwen3_30b_a3b();
        j.as_object_mut().unwrap().insert("num_experts_per_tok".into(), serde_json::json!(129));
        let e = ModelConfig::from_hf_json(&j, Path::new("config.json")).unwrap_err().to_string();
        assert!(e.contains("`num_experts_per_tok` is 129"), "{e}");
    }

    #[test]
    fn missing_key_names_it() {
        let json = serde_json::json!({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64});
        let e = ModelConfig::from_hf_json(&json, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("num_attention_heads"), "{e}");
    }
}
