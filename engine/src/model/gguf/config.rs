//! llama.cpp GGUF metadata → [`ModelConfig`].

use std::path::Path;

use super::metadata::Metadata;
use super::GgufFile;
use crate::error::{EngineError, Result};
use crate::model::arch::GgufConventions;
use crate::model::config::{Architecture, ModelConfig, MoeConfig, RopeStyle};
use crate::tensor::TensorSource;

/// Typed access to `<arch>.*` keys with errors that name the key.
struct Keys<'a> {
    meta: &'a Metadata,
    arch: &'a str,
    path: &'a Path,
}

impl Keys<'_> {
    fn full(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }
    fn opt_usize_abs(&self, key: &str) -> Result<Option<usize>> {
        match self.meta.get(key) {
            None => Ok(None),
            Some(v) => {
                v.as_u64().and_then(|x| usize::try_from(x).ok()).map(Some).ok_or_else(|| {
                    EngineError::config(self.path, format!("`{key}` is {}, expected a non-negative integer", v.describe()))
                })
            }
        }
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.opt_usize_abs(&self.full(key))
    }
    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| EngineError::config(self.path, format!("missing key `{}`", self.full(key))))
    }
    /// A size that later values are derived from: present and at least 1.
    fn positive(&self, key: &str) -> Result<usize> {
        match self.usize(key)? {
            0 => Err(EngineError::config(self.path, format!("`{}` is 0; it must be at least 1", self.full(key)))),
            v => Ok(v),
        }
    }
    fn opt_u32_abs(&self, key: &str) -> Result<Option<u32>> {
        match self.opt_usize_abs(key)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| EngineError::config(self.path, format!("`{key}` is {v}, too large for a token id"))),
        }
    }
    fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        let key = self.full(key);
        match self.meta.get(&key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| EngineError::config(self.path, format!("`{key}` is {}, expected a number", v.describe()))),
        }
    }
    fn opt_bool_abs(&self, key: &str) -> Result<Option<bool>> {
        match self.meta.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .or_else(|| v.as_u64().filter(|&x| x <= 1).map(|x| x == 1))
                .map(Some)
                .ok_or_else(|| EngineError::config(self.path, format!("`{key}` is {}, expected true or false", v.describe()))),
        }
    }
}

impl ModelConfig {
    /// Reads the configuration of a llama.cpp GGUF (archs llama, qwen2, qwen3, qwen3moe, llada, dream, llada-moe).
    ///
    /// Biases, QK norms and tied heads are detected from which tensors exist, as llama.cpp does.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let path = file.path();
        let meta = file.metadata();
        let arch_s = meta
            .str("general.architecture")
            .ok_or_else(|| EngineError::config(path, "missing `general.architecture`"))?;
        let arch = Architecture::from_gguf_name(arch_s)
            .ok_or_else(|| EngineError::UnknownArchitecture { path: path.to_owned(), arch: arch_s.to_owned() })?;
        let conventions = arch.family().gguf();
        let k = Keys { meta, arch: arch_s, path };
        let hidden = k.positive("embedding_length")?;
        let n_heads = k.positive("attention.head_count")?;
        let n_kv_heads = k.opt_usize("attention.head_count_kv")?.unwrap_or(n_heads);
        let head_dim = match k.opt_usize("attention.key_length")? {
            Some(d) => d,
            None if hidden.is_multiple_of(n_heads) => hidden / n_heads,
            None => {
                return Err(EngineError::config(
                    path,
                    format!(
                        "`{arch_s}.embedding_length` ({hidden}) is not a multiple of `{arch_s}.attention.head_count` ({n_heads}) and no `{arch_s}.attention.key_length` is given"
                    ),
                ))
            }
        };
        let vocab = match k.opt_usize("vocab_size")? {
            Some(v) => v,
            None => match meta.get("tokenizer.ggml.tokens").and_then(|t| t.as_array()) {
                Some(t) => t.len(),
                // Fall back to the embedding table's outer dimension.
                None => file
                    .tensor_info("token_embd.weight")
                    .and_then(|t| t.ne.get(1).copied())
                    .map(|v| v as usize)
                    .ok_or_else(|| {
                        EngineError::config(path, format!("no `{arch_s}.vocab_size`, tokens or token_embd"))
                    })?,
            },
        };
        let moe = match k.opt_usize("expert_count")? {
            Some(n) if n > 0 => Some(moe_config(&k, &conventions, n)?),
            _ if conventions.requires_experts => {
                return Err(EngineError::config(
                    path,
                    format!("`{arch_s}.expert_count` is missing or 0; a {arch_s} model needs at least one expert"),
                ))
            }
            _ => None,
        };
        // The llama.cpp converter permutes Q/K rows of some families for adjacent-pair RoPE.
        let rope_style = if conventions.permuted_rope { RopeStyle::Interleaved } else { RopeStyle::RotateHalf };
        let diffusion = arch.is_diffusion();
        let causal = k.opt_bool_abs(&k.full("attention.causal"))?.unwrap_or(!diffusion);
        // llama.cpp: an absent `diffusion.shift_logits` means shifted (Dream does not write it).
        let shift_logits = diffusion && k.opt_bool_abs("diffusion.shift_logits")?.unwrap_or(true);
        let cfg = ModelConfig {
            arch,
            hidden,
            n_layers: k.usize("block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn: k.opt_usize("feed_forward_length")?.unwrap_or(0),
            vocab,
            max_seq: k.opt_usize("context_length")?.unwrap_or(4096),
            rope_theta: k.opt_f32("rope.freq_base")?.unwrap_or(10000.0),
            rope_style,
            rotary_dim: k.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
            rms_eps: k.opt_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(conventions.default_rms_eps),
            qkv_bias: file.contains("blk.0.attn_q.bias"),
            qk_norm: file.contains("blk.0.attn_q_norm.weight"),
            moe,
            causal,
            shift_logits,
            tie_embeddings: !file.contains("output.weight"),
            mask_token_id: k
                .opt_u32_abs("tokenizer.ggml.mask_token_id")?
                .or(if diffusion { arch.published_mask_id(vocab) } else { None }),
            bos_token_id: k.opt_u32_abs("tokenizer.ggml.bos_token_id")?,
            eos_token_id: k.opt_u32_abs("tokenizer.ggml.eos_token_id")?,
            eot_token_id: k.opt_u32_abs("tokenizer.ggml.eot_token_id")?,
            pad_token_id: k.opt_u32_abs("tokenizer.ggml.padding_token_id")?,
        };
        cfg.validate_keys(path, &crate::model::config::ConfigKeys::gguf(arch_s))?;
        Ok(cfg)
    }
}

/// The MoE keys of a family with `n_experts` routed experts.
fn moe_config(k: &Keys, conventions: &GgufConventions, n_experts: usize) -> Result<MoeConfig> {
    let top_k = k.usize("expert_used_count")?;
    let expert_ffn = match k.opt_usize("expert_feed_forward_length")? {
        Some(f) => f,
        None if conventions.expert_ffn_splits_ffn && top_k > 0 => k.usize("feed_forward_length")? / top_k,
        None => k.usize("feed_forward_length")?,
    };
    // A file of ours that says otherwise than the family's default (exported from a config with
    // `norm_topk_prob` false) is taken at its word.
    let norm_topk_prob = k.opt_bool_abs(&k.full("expert_weights_norm"))?.unwrap_or(conventions.default_norm_topk);
    Ok(MoeConfig { n_experts, top_k, expert_ffn, norm_topk_prob })
}
