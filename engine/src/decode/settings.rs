//! Decoding settings (serde-serialisable) and their validation against a model and prompt.

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::model::ModelConfig;

// NPU-aware decoding: its settings live in their own modules.
pub use super::revision::RevisionSettings;
pub use super::speculative::SpeculativeSettings;

// Every settings enum has one spelling everywhere: kebab-case in flags, recorded settings, JSON
// and the app. Older recordings wrote snake_case and older app builds camelCase; `spelled!` reads
// those too (not as serde aliases: the app's TypeScript bindings would list them as values).

/// How LLaDA scores a predicted token (which low-scored predictions stay masked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum Remasking {
    /// Confidence = softmax probability of the chosen token.
    LowConfidence,
    /// Confidence ~ U(0, 1) from the seeded RNG.
    Random,
}

/// KV caching between denoising steps (Fast-dLLM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum CacheMode {
    /// Every step is a full forward over the whole canvas.
    None,
    /// Prefix before the block cached at block start; later steps forward block + suffix.
    Prefix,
    /// Prefix and suffix cached at block start; later steps forward only the block.
    Dual,
}

/// Dream's position-selection algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum DreamAlg {
    /// Each masked position is unmasked with probability 1 − s/t (random order).
    Origin,
    /// Confidence = top-1 probability.
    MaskgitPlus,
    /// Confidence = top-1 minus top-2 probability.
    TopkMargin,
    /// Confidence = Σ p·log p (negative entropy).
    Entropy,
}

/// For a settings enum: `as_str` and `Display` give its one spelling (as flags and recordings
/// write it, equal to its serde rename), and `Deserialize` reads that spelling or any older one
/// listed after it with `|`.
macro_rules! spelled {
    ($t:ty { $($v:ident => $s:literal $(| $old:literal)*),* $(,)? }) => {
        impl $t {
            /// The one spelling of this value (flags, settings, records, the app).
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                const NAMES: &[&str] = &[$($s),*];
                let s = <String as serde::Deserialize>::deserialize(d)?;
                $(if s == $s $(|| s == $old)* {
                    return Ok(Self::$v);
                })*
                Err(serde::de::Error::unknown_variant(&s, NAMES))
            }
        }
    };
}
pub(crate) use spelled;

// Older spellings: snake_case (recordings before the spellings were unified), camelCase and
// `margin` (the app's own names before it used these enums).
spelled!(Remasking { LowConfidence => "low-confidence" | "low_confidence" | "lowConfidence", Random => "random" });
spelled!(CacheMode { None => "none", Prefix => "prefix", Dual => "dual" });
spelled!(DreamAlg {
    Origin => "origin",
    MaskgitPlus => "maskgit-plus" | "maskgit_plus" | "maskgitPlus",
    TopkMargin => "topk-margin" | "topk_margin" | "margin",
    Entropy => "entropy",
});

/// Every knob of a decoding run. Defaults follow LLaDA's `chat.py` (and Dream's generation config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecodeSettings {
    /// Tokens to generate (canvas = prompt ‖ gen_length masks).
    pub gen_length: usize,
    /// Semi-autoregressive block size over the generated region.
    pub block_length: usize,
    /// Total denoising steps, split evenly over the blocks (ignored by threshold decoding).
    pub steps: usize,
    /// Sampling temperature; 0 = argmax.
    pub temperature: f64,
    /// LLaDA remasking strategy.
    pub remasking: Remasking,
    /// Classifier-free guidance scale (LLaDA; 0 = off).
    pub cfg_scale: f64,
    /// Confidence threshold τ for parallel decoding (Fast-dLLM); `None` = fixed schedule.
    pub threshold: Option<f64>,
    /// KV cache between steps.
    pub cache: CacheMode,
    /// Seed of the ChaCha8 RNG every random draw comes from.
    pub seed: u64,
    /// Set the EOS logit to −inf before choosing tokens (LLaDA).
    pub logits_eos_inf: bool,
    /// LLaDA's `confidence_eos_eot_inf` quirk (see `llada.rs`).
    pub confidence_eos_eot_inf: bool,
    /// Stop after a block whose last token is EOS/EOT (the rest would be EOS padding).
    pub early_stop_eos: bool,
    /// EOS id override (default: the model config's).
    pub eos_token_id: Option<u32>,
    /// EOT id override (default: the model config's).
    pub eot_token_id: Option<u32>,
    /// Dream position-selection algorithm.
    pub alg: DreamAlg,
    /// Dream: `None`/0 = take the top positions; otherwise sample them from softmax(conf / alg_temp).
    pub alg_temp: Option<f64>,
    /// Dream: last timestep of `linspace(1, eps, steps + 1)`.
    pub eps: f64,
    /// Nucleus sampling mass (Dream and AR).
    pub top_p: Option<f64>,
    /// Top-k sampling (Dream and AR).
    pub top_k: Option<usize>,
    /// NPU-aware decoding hook: multi-block speculative decoding (`None` = off).
    pub speculative: Option<SpeculativeSettings>,
    /// NPU-aware decoding hook: dual-path progressive revision (`None` = off).
    pub revision: Option<RevisionSettings>,
    /// How MoE layers execute (`None` = [`crate::moe::MoePolicy::Cpu`]); dense models ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<crate::moe::MoeSettings>,
}

impl Default for DecodeSettings {
    fn default() -> Self {
        DecodeSettings {
            gen_length: 128,
            block_length: 32,
            steps: 128,
            temperature: 0.0,
            remasking: Remasking::LowConfidence,
            cfg_scale: 0.0,
            threshold: None,
            cache: CacheMode::None,
            seed: 0,
            logits_eos_inf: false,
            confidence_eos_eot_inf: false,
            early_stop_eos: false,
            eos_token_id: None,
            eot_token_id: None,
            alg: DreamAlg::Origin,
            alg_temp: None,
            eps: 1e-3,
            top_p: None,
            top_k: None,
            speculative: None,
            revision: None,
            moe: None,
        }
    }
}

/// The size checks every request passes before anything is allocated for it: the context, then
/// the memory its canvas needs against what the host has available.
pub(crate) fn check_fits(cfg: &ModelConfig, prompt_len: usize, settings: &DecodeSettings) -> Result<()> {
    if settings.gen_length > cfg.max_seq {
        return Err(EngineError::InvalidRequest(format!(
            "gen_length {} exceeds the model's context of {} tokens",
            settings.gen_length, cfg.max_seq
        )));
    }
    let len = prompt_len.saturating_add(settings.gen_length);
    if len > cfg.max_seq {
        return Err(EngineError::ContextOverflow { len, max: cfg.max_seq });
    }
    for (name, id) in [("eos_token_id", settings.eos_token_id), ("eot_token_id", settings.eot_token_id)] {
        if let Some(id) = id.filter(|&id| id as usize >= cfg.vocab) {
            return Err(EngineError::InvalidRequest(format!(
                "{name} {id} lies outside the model's vocabulary of {} tokens",
                cfg.vocab
            )));
        }
    }
    let need = settings.working_set_bytes(cfg, prompt_len);
    if let Some(avail) = crate::memory::host::available_bytes() {
        if need > avail as u128 {
            return Err(EngineError::InvalidRequest(format!(
                "a canvas of {len} tokens needs about {:.1} GB of working memory (K/V cache, activations, logits), more than the {:.1} GB available",
                need as f64 / 1e9,
                avail as f64 / 1e9
            )));
        }
    }
    Ok(())
}

/// Largest token bucket a speculative window may be padded to (bounds the padded forward).
const MAX_BUCKET: usize = 1 << 16;

impl DecodeSettings {
    /// Number of blocks the generated region splits into.
    pub fn num_blocks(&self) -> usize {
        self.gen_length.checked_div(self.block_length).unwrap_or(0)
    }

    /// Steps per block of the fixed schedule.
    pub fn steps_per_block(&self) -> usize {
        self.steps.checked_div(self.num_blocks()).unwrap_or(0)
    }

    /// EOS id: the override, else the model's.
    pub fn eos_id(&self, cfg: &ModelConfig) -> Option<u32> {
        self.eos_token_id.or(cfg.eos_token_id)
    }

    /// EOT id: the override, else the model's.
    pub fn eot_id(&self, cfg: &ModelConfig) -> Option<u32> {
        self.eot_token_id.or(cfg.eot_token_id)
    }

    /// Checks the numeric knobs on their own (no model needed).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if self.gen_length == 0 || self.block_length == 0 {
            return bad("gen_length and block_length must be positive".into());
        }
        if !self.gen_length.is_multiple_of(self.block_length) {
            return bad(format!(
                "gen_length {} is not a multiple of block_length {}",
                self.gen_length, self.block_length
            ));
        }
        if self.threshold.is_none() {
            let nb = self.num_blocks();
            if self.steps == 0 || !self.steps.is_multiple_of(nb) {
                return bad(format!("steps {} must be a positive multiple of the {nb} blocks", self.steps));
            }
            // More steps than tokens would only add forwards that unmask nothing.
            if self.steps > self.gen_length {
                return bad(format!(
                    "steps {} exceed the {} tokens to generate (a step unmasks at least one token)",
                    self.steps, self.gen_length
                ));
            }
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!("temperature {} must be finite and >= 0", self.temperature));
        }
        if !(self.cfg_scale.is_finite() && self.cfg_scale >= 0.0) {
            return bad(format!("cfg_scale {} must be finite and >= 0", self.cfg_scale));
        }
        if let Some(t) = self.threshold {
            if !(t.is_finite() && t > 0.0 && t <= 1.0) {
                return bad(format!("threshold {t} must lie in (0, 1]"));
            }
        }
        if !(self.eps > 0.0 && self.eps < 1.0) {
            return bad(format!("eps {} must lie in (0, 1)", self.eps));
        }
        if let Some(sp) = &self.speculative {
            if sp.accept_top_k == 0 {
                return bad("speculative accept_top_k must be at least 1".into());
            }
            if sp.max_lookahead > self.gen_length {
                return bad(format!(
                    "speculative lookahead {} exceeds the {} tokens to generate",
                    sp.max_lookahead, self.gen_length
                ));
            }
            if let Some(c) = sp.accept_confidence.filter(|c| !(c.is_finite() && (0.0..=1.0).contains(c))) {
                return bad(format!("speculative accept_confidence {c} must lie in [0, 1]"));
            }
            if let Some(&b) = sp.token_buckets.iter().find(|&&b| b == 0 || b > MAX_BUCKET) {
                return bad(format!("speculative token bucket {b} must lie in 1..={MAX_BUCKET}"));
            }
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return bad(format!("top_p {p} must lie in (0, 1]"));
            }
        }
        if self.top_k == Some(0) {
            return bad("top_k must be at least 1".into());
        }
        if let Some(a) = self.alg_temp {
            if !(a.is_finite() && a >= 0.0) {
                return bad(format!("alg_temp {a} must be finite and >= 0"));
            }
        }
        if self.cfg_scale > 0.0 && self.cache != CacheMode::None {
            return bad("classifier-free guidance is not supported together with a KV cache".into());
        }
        // NPU-aware decoding hook: each feature checks its own knobs.
        super::dual_path::validate(self)?;
        Ok(())
    }

    /// Bytes a run of these settings may hold at once beyond the weights, on a prompt of
    /// `prompt_len` tokens, in the worst case (every step forwards the whole canvas): the K/V
    /// cache, one forward's activations, and the logits rows with their f64 copies.
    pub fn working_set_bytes(&self, cfg: &ModelConfig, prompt_len: usize) -> u128 {
        super::working_set::WorkingSetRates::of(cfg).bytes(prompt_len as u64, self.gen_length as u64)
    }

    /// Full check for a diffusion run of `prompt` on a model with config `cfg`.
    pub fn validate_for(&self, cfg: &ModelConfig, prompt: &[u32]) -> Result<()> {
        self.validate()?;
        check_fits(cfg, prompt.len(), self)?;
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= cfg.vocab) {
            return Err(EngineError::InvalidRequest(format!("prompt token {t} outside vocab of {}", cfg.vocab)));
        }
        if cfg.arch.is_diffusion() {
            let Some(mask) = cfg.mask_token_id else {
                return Err(EngineError::InvalidRequest("diffusion model without a mask token id".into()));
            };
            if prompt.contains(&mask) {
                return Err(EngineError::InvalidRequest("the prompt contains the mask token".into()));
            }
            if self.cfg_scale > 0.0 && cfg.shift_logits {
                return Err(EngineError::InvalidRequest(
                    "classifier-free guidance is only defined for LLaDA-style models".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe::MoePolicy;

    #[test]
    fn enums_write_kebab_case_and_read_every_older_spelling() {
        let s = DecodeSettings {
            remasking: Remasking::LowConfidence,
            alg: DreamAlg::MaskgitPlus,
            moe: Some(crate::moe::MoeSettings { policy: MoePolicy::StaticTiers, ..Default::default() }),
            ..Default::default()
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["remasking"], "low-confidence");
        assert_eq!(v["alg"], "maskgit-plus");
        assert_eq!(v["moe"]["policy"], "static-tiers");
        // The current spelling, snake_case of older recordings, camelCase of older app builds.
        fn read<T: serde::de::DeserializeOwned>(t: &str) -> Option<T> {
            serde_json::from_value(serde_json::Value::String(t.into())).ok()
        }
        for t in ["low-confidence", "low_confidence", "lowConfidence"] {
            assert_eq!(read(t), Some(Remasking::LowConfidence), "{t}");
        }
        for (t, alg) in [
            ("maskgit-plus", DreamAlg::MaskgitPlus),
            ("maskgit_plus", DreamAlg::MaskgitPlus),
            ("maskgitPlus", DreamAlg::MaskgitPlus),
            ("topk-margin", DreamAlg::TopkMargin),
            ("topk_margin", DreamAlg::TopkMargin),
            ("margin", DreamAlg::TopkMargin),
        ] {
            assert_eq!(read(t), Some(alg), "{t}");
        }
        for t in ["static-tiers", "staticTiers"] {
            assert_eq!(read(t), Some(MoePolicy::StaticTiers), "{t}");
        }
        // The one spelling (`as_str`, Display, what flags accept) is what serde writes.
        fn same<T: Serialize + std::fmt::Display>(values: &[T]) {
            for v in values {
                assert_eq!(serde_json::to_value(v).ok(), Some(serde_json::Value::String(v.to_string())));
            }
        }
        same(&[Remasking::LowConfidence, Remasking::Random]);
        same(&[CacheMode::None, CacheMode::Prefix, CacheMode::Dual]);
        same(&[DreamAlg::Origin, DreamAlg::MaskgitPlus, DreamAlg::TopkMargin, DreamAlg::Entropy]);
        same(&[MoePolicy::Cpu, MoePolicy::Naive, MoePolicy::StaticTiers]);
        let err = serde_json::from_str::<DreamAlg>("\"greedy\"").expect_err("unknown");
        assert!(err.to_string().contains("greedy") && err.to_string().contains("topk-margin"), "{err}");
    }
}
