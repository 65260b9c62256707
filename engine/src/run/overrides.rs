//! The settings of a run, decided in one place: the user's overrides over the model's shipped
//! defaults (`generation_config.json`) over the engine's defaults.

use serde::{Deserialize, Serialize};

use crate::decode::revision::RevisionSettings;
use crate::decode::speculative::SpeculativeSettings;
use crate::decode::{CacheMode, DecodeSettings, DreamAlg, Remasking};
use crate::model::{Architecture, GenerationDefaults, ModelConfig};

/// What a user set explicitly; `None` = take the model's default, then the engine's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SettingsOverrides {
    pub gen_length: Option<usize>,
    pub block_length: Option<usize>,
    pub steps: Option<usize>,
    pub temperature: Option<f64>,
    pub remasking: Option<Remasking>,
    pub cfg_scale: Option<f64>,
    pub threshold: Option<f64>,
    pub cache: Option<CacheMode>,
    pub seed: Option<u64>,
    pub alg: Option<DreamAlg>,
    pub alg_temp: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<usize>,
    pub early_stop_eos: Option<bool>,
    pub logits_eos_inf: Option<bool>,
    pub confidence_eos_eot_inf: Option<bool>,
    pub eps: Option<f64>,
    pub eos_token_id: Option<u32>,
    pub eot_token_id: Option<u32>,
    /// Multi-block speculative decoding (`None` = off).
    pub speculative: Option<SpeculativeSettings>,
    /// Dual-path progressive revision (`None` = off).
    pub revision: Option<RevisionSettings>,
    /// MoE execution policy (`None` = cpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<crate::moe::MoeSettings>,
}

/// Where Unmask's defaults differ from the upstream reference code, for `--help` and docs.
pub const DEFAULTS_THAT_DIFFER: &str = "Defaults that differ from the upstream reference: \
decoding stops after a block that ends in EOS (--early-stop-eos true; upstream fills the whole \
canvas); a LLaDA model without an EOT id in its config uses its chat template's <|eot_id|>; a Dream \
model without a block length decodes one block.";

/// The settings a run uses: `user` over the model's `defaults` over the engine's.
///
/// Rules beyond plain precedence, each because a plain override would leave an invalid or
/// surprising run: a new `gen_length` alone keeps the model's step density and becomes one block
/// when the block length does not divide it; steps are rounded to a multiple of the block count;
/// a Dream model without a block length decodes the whole generation as one block (as upstream
/// Dream does); early stop at EOS is on unless turned off.
pub fn effective_settings(cfg: &ModelConfig, defaults: &GenerationDefaults, user: &SettingsOverrides) -> DecodeSettings {
    let mut s = DecodeSettings { early_stop_eos: true, ..DecodeSettings::default() };
    let dream = cfg.arch == Architecture::Dream;
    if let Some(v) = defaults.gen_length {
        s.gen_length = v;
    }
    match defaults.block_length {
        Some(v) => s.block_length = v,
        None if dream => s.block_length = s.gen_length,
        None => {}
    }
    if let Some(v) = defaults.steps {
        s.steps = v;
    }
    if let Some(v) = defaults.temperature {
        s.temperature = v as f64;
    }
    if let Some(v) = defaults.remasking {
        s.remasking = v;
    }
    if let Some(v) = user.gen_length {
        s.gen_length = v;
        // Keep the model's step density when only the length changes.
        if user.steps.is_none() && user.threshold.is_none() {
            let per_token = defaults.steps.zip(defaults.gen_length).map(|(st, g)| st as f64 / g.max(1) as f64).unwrap_or(1.0);
            s.steps = ((v as f64 * per_token).round() as usize).max(1);
        }
        let whole = dream && defaults.block_length.is_none();
        if user.block_length.is_none() && (whole || s.block_length == 0 || !v.is_multiple_of(s.block_length)) {
            s.block_length = v;
        }
    }
    if let Some(v) = user.block_length {
        s.block_length = v;
    }
    if let Some(v) = user.steps {
        s.steps = v;
    }
    if user.steps.is_none() && user.threshold.is_none() {
        // Round steps to a multiple of the block count so a length change stays valid.
        let nb = (s.gen_length / s.block_length.max(1)).max(1);
        s.steps = s.steps.div_ceil(nb).max(1) * nb;
    }
    let set = |dst: &mut f64, v: Option<f64>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    set(&mut s.temperature, user.temperature);
    set(&mut s.cfg_scale, user.cfg_scale);
    set(&mut s.eps, user.eps);
    if let Some(v) = user.remasking {
        s.remasking = v;
    }
    if user.threshold.is_some() {
        s.threshold = user.threshold;
    }
    if let Some(v) = user.cache {
        s.cache = v;
    }
    if let Some(v) = user.seed {
        s.seed = v;
    }
    if let Some(v) = user.alg {
        s.alg = v;
    }
    if user.alg_temp.is_some() {
        s.alg_temp = user.alg_temp;
    }
    if user.top_p.is_some() {
        s.top_p = user.top_p;
    }
    if user.top_k.is_some() {
        s.top_k = user.top_k;
    }
    if let Some(v) = user.early_stop_eos {
        s.early_stop_eos = v;
    }
    if let Some(v) = user.logits_eos_inf {
        s.logits_eos_inf = v;
    }
    if let Some(v) = user.confidence_eos_eot_inf {
        s.confidence_eos_eot_inf = v;
    }
    if user.eos_token_id.is_some() {
        s.eos_token_id = user.eos_token_id;
    }
    if user.eot_token_id.is_some() {
        s.eot_token_id = user.eot_token_id;
    }
    s.speculative = user.speculative.clone();
    if let Some(sp) = s.speculative.as_mut().filter(|sp| sp.max_lookahead <= cfg.max_seq) {
        // The default lookahead (32) is longer than a short answer (the embedded models' 16): no
        // window can reach past the canvas, so look ahead at most over the answer. A lookahead
        // beyond the model's context is a mistake, left for validation to refuse.
        sp.max_lookahead = sp.max_lookahead.min(s.gen_length);
    }
    s.revision = user.revision.clone();
    s.moe = user.moe;
    if !cfg.arch.is_diffusion() {
        // Autoregressive decoding has no blocks or denoising steps: one token per step. Without
        // this a model default such as tiny-ar's gen_length 16 fails the block check.
        s.block_length = s.gen_length;
        s.steps = s.gen_length;
    } else if defaults.block_length.is_none() && user.block_length.is_none() && !s.gen_length.is_multiple_of(s.block_length.max(1)) {
        // A model default length that the default block does not divide is one block.
        s.block_length = s.gen_length;
        if user.steps.is_none() && user.threshold.is_none() {
            s.steps = s.steps.clamp(1, s.gen_length.max(1));
        }
    }
    s
}

impl SettingsOverrides {
    /// Every knob of `s` as an explicit override (a stored run re-run exactly as it was).
    pub fn exact(s: &DecodeSettings) -> Self {
        SettingsOverrides {
            gen_length: Some(s.gen_length),
            block_length: Some(s.block_length),
            steps: Some(s.steps),
            temperature: Some(s.temperature),
            remasking: Some(s.remasking),
            cfg_scale: Some(s.cfg_scale),
            threshold: s.threshold,
            cache: Some(s.cache),
            seed: Some(s.seed),
            alg: Some(s.alg),
            alg_temp: s.alg_temp,
            top_p: s.top_p,
            top_k: s.top_k,
            early_stop_eos: Some(s.early_stop_eos),
            logits_eos_inf: Some(s.logits_eos_inf),
            confidence_eos_eot_inf: Some(s.confidence_eos_eot_inf),
            eps: Some(s.eps),
            eos_token_id: s.eos_token_id,
            eot_token_id: s.eot_token_id,
            speculative: s.speculative.clone(),
            revision: s.revision.clone(),
            moe: s.moe,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Architecture;

    fn cfg(arch: Architecture) -> ModelConfig {
        let mut c: ModelConfig = serde_json::from_value(serde_json::json!({
            "arch": "llada", "hidden": 8, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "head_dim": 4,
            "ffn": 8, "vocab": 16, "max_seq": 256, "rope_theta": 1e4, "rope_style": "RotateHalf",
            "rotary_dim": 4, "rms_eps": 1e-5, "qkv_bias": false, "qk_norm": false, "moe": null,
            "causal": false, "shift_logits": false, "tie_embeddings": false, "mask_token_id": 2,
            "bos_token_id": null, "eos_token_id": 1, "eot_token_id": null, "pad_token_id": null
        }))
        .unwrap();
        c.arch = arch;
        c.shift_logits = arch == Architecture::Dream;
        c
    }

    #[test]
    fn speculation_never_looks_past_the_answer() {
        let d = GenerationDefaults { gen_length: Some(16), block_length: Some(16), steps: Some(16), ..Default::default() };
        let u = SettingsOverrides { speculative: Some(SpeculativeSettings::default()), ..Default::default() };
        let s = effective_settings(&cfg(Architecture::Llada), &d, &u);
        assert_eq!(s.speculative.as_ref().map(|sp| sp.max_lookahead), Some(16));
        assert!(s.validate().is_ok());
        let absurd = SpeculativeSettings { max_lookahead: 1_000_000_000_000, ..Default::default() };
        let u = SettingsOverrides { speculative: Some(absurd), ..Default::default() };
        assert!(effective_settings(&cfg(Architecture::Llada), &d, &u).validate().is_err());
    }

    #[test]
    fn an_autoregressive_model_default_length_needs_no_block_arithmetic() {
        // tiny-ar's generation_config.json: gen_length 16, nothing about blocks.
        let d = GenerationDefaults { gen_length: Some(16), ..Default::default() };
        for user in [SettingsOverrides::default(), SettingsOverrides { gen_length: Some(24), ..Default::default() }] {
            let s = effective_settings(&cfg(Architecture::Llama), &d, &user);
            s.validate().unwrap();
            assert_eq!(s.block_length, s.gen_length);
        }
        // A diffusion model with the same defaults decodes them as one block.
        let s = effective_settings(&cfg(Architecture::Llada), &d, &SettingsOverrides::default());
        s.validate().unwrap();
        assert_eq!((s.gen_length, s.block_length), (16, 16));
    }

    #[test]
    fn model_defaults_apply_under_user_overrides() {
        let d = GenerationDefaults { gen_length: Some(16), block_length: Some(16), steps: Some(16), ..Default::default() };
        let s = effective_settings(&cfg(Architecture::Llada), &d, &SettingsOverrides::default());
        assert_eq!((s.gen_length, s.block_length, s.steps), (16, 16, 16));
        assert!(s.early_stop_eos);
        let u = SettingsOverrides { gen_length: Some(32), ..Default::default() };
        let s = effective_settings(&cfg(Architecture::Llada), &d, &u);
        assert_eq!((s.gen_length, s.block_length, s.steps), (32, 16, 32));
        s.validate().unwrap();
    }

    #[test]
    fn dream_without_a_block_length_is_one_block() {
        let d = GenerationDefaults::default();
        let u = SettingsOverrides { gen_length: Some(64), steps: Some(64), ..Default::default() };
        let s = effective_settings(&cfg(Architecture::Dream), &d, &u);
        assert_eq!(s.block_length, 64);
        let s = effective_settings(&cfg(Architecture::Dream), &d, &SettingsOverrides::default());
        assert_eq!(s.block_length, s.gen_length);
        let s = effective_settings(&cfg(Architecture::Llada), &d, &SettingsOverrides::default());
        assert_eq!(s.block_length, 32);
    }

    #[test]
    fn exact_overrides_reproduce_the_settings() {
        let mut s = DecodeSettings { gen_length: 48, block_length: 16, steps: 24, threshold: Some(0.8), ..Default::default() };
        s.speculative = Some(SpeculativeSettings::default());
        let d = GenerationDefaults { gen_length: Some(16), steps: Some(4), ..Default::default() };
        assert_eq!(effective_settings(&cfg(Architecture::Llada), &d, &SettingsOverrides::exact(&s)), s);
    }
}
