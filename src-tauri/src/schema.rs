//! `settings_schema`: every decoding knob of [`crate::dto::DecodeSettings`] with its range,
//! choices, engine default, the kinds of model it applies to and a plain-language explanation
//! for the settings panel.

use unmask_engine::decode::{CacheMode, DreamAlg, Remasking};
use unmask_engine::model::config::{Architecture, ModelConfig};
use unmask_engine::moe::MoePolicy;

use crate::dto::{DecodeSettings, SettingInfo, SettingKind, SettingValue};

/// Model kinds of [`crate::dto::ModelEntry::kinds`] and [`SettingInfo::applies_to`].
pub const KIND_DIFFUSION: &str = "diffusion";
pub const KIND_AUTOREGRESSIVE: &str = "autoregressive";
/// LLaDA-style diffusion (LLaDA, LLaDA-MoE): remasking strategies and CFG.
pub const KIND_LLADA: &str = "llada";
/// Dream: logits shifted by one, its own position-selection algorithms.
pub const KIND_DREAM: &str = "dream";
pub const KIND_MOE: &str = "moe";

/// The kinds a model with config `cfg` is, for the settings that apply to it.
pub fn model_kinds(cfg: &ModelConfig) -> Vec<String> {
    let mut out = Vec::new();
    if cfg.arch.is_diffusion() {
        out.push(KIND_DIFFUSION);
        // The decoders pick the scorer by family (a shifted LLaDA still decodes as LLaDA).
        out.push(if cfg.arch == Architecture::Dream { KIND_DREAM } else { KIND_LLADA });
    } else {
        out.push(KIND_AUTOREGRESSIVE);
    }
    if cfg.moe.is_some() {
        out.push(KIND_MOE);
    }
    out.into_iter().map(str::to_owned).collect()
}

fn info(key: &str, label: &str, kind: SettingKind, explanation: &str) -> SettingInfo {
    SettingInfo {
        key: key.into(),
        label: label.into(),
        explanation: explanation.into(),
        kind,
        min: None,
        max: None,
        options: None,
        default: None,
        applies_to: None,
        toggle_label: None,
    }
}

/// Restricts `s` to models of any of `kinds`.
fn only(mut s: SettingInfo, kinds: &[&str]) -> SettingInfo {
    s.applies_to = Some(kinds.iter().map(|k| (*k).to_owned()).collect());
    s
}

/// Makes `s` optional: off (null) unless the switch labelled `toggle` is on.
fn optional(mut s: SettingInfo, toggle: &str) -> SettingInfo {
    s.toggle_label = Some(toggle.into());
    s
}

fn range(mut s: SettingInfo, min: f64, max: f64, default: SettingValue) -> SettingInfo {
    s.min = Some(min);
    s.max = Some(max);
    s.default = Some(default);
    s
}

/// A choice among an engine enum's values, offered in their one spelling (what the settings
/// carry on the wire).
fn choice<T: std::fmt::Display>(mut s: SettingInfo, options: &[T], default: T) -> SettingInfo {
    s.options = Some(options.iter().map(T::to_string).collect());
    s.default = Some(SettingValue::Text(default.to_string()));
    s
}

fn flag(mut s: SettingInfo, default: bool) -> SettingInfo {
    s.default = Some(SettingValue::Bool(default));
    s
}

/// The schema, defaults taken from the engine's own defaults.
pub fn settings_schema() -> Vec<SettingInfo> {
    let d = DecodeSettings::default();
    let num = |v: f64| SettingValue::Number(v);
    vec![
        range(
            info("genLength", "Answer length (tokens)", SettingKind::Int,
                "How many tokens the answer canvas has. The model starts from this many [MASK] tokens and fills them in; unused room ends as end-of-text padding. Must be a multiple of the block length, and prompt + answer must fit the model's context."),
            1.0, 4096.0, num(f64::from(d.gen_length)),
        ),
        only(range(
            info("blockLength", "Block length (tokens)", SettingKind::Int,
                "Semi-autoregressive blocks: the answer is denoised block by block, left to right. Smaller blocks behave more like left-to-right writing; one block as long as the answer denoises everything at once."),
            1.0, 4096.0, num(f64::from(d.block_length)),
        ), &[KIND_DIFFUSION]),
        only(range(
            info("steps", "Denoising steps", SettingKind::Int,
                "Total forward passes of the fixed schedule, split evenly over the blocks (so a multiple of the number of blocks). Steps = answer length commits one token per step (best quality); fewer steps commit several tokens per forward (faster, usually worse). Ignored when a confidence threshold is set."),
            1.0, 4096.0, num(f64::from(d.steps)),
        ), &[KIND_DIFFUSION]),
        range(
            info("temperature", "Temperature", SettingKind::Float,
                "Randomness when choosing each position's token: 0 always takes the most likely token (deterministic); higher values sample more freely (Gumbel noise on the logits)."),
            0.0, 2.0, num(d.temperature),
        ),
        only(choice(
            info("remasking", "Remasking", SettingKind::Choice,
                "Which predictions are kept in a step (LLaDA): low-confidence keeps the most confident positions and re-masks the rest; random keeps a random choice of positions."),
            &[Remasking::LowConfidence, Remasking::Random], d.remasking,
        ), &[KIND_LLADA]),
        only(choice(
            info("cache", "KV cache", SettingKind::Choice,
                "Reuse of attention keys/values between steps (Fast-dLLM): none recomputes the whole canvas every step (exact); prefix caches everything before the current block at block start; dual also caches the part after it, so a step forwards only the block. Caches are approximations that speed decoding up."),
            &[CacheMode::None, CacheMode::Prefix, CacheMode::Dual], d.cache,
        ), &[KIND_DIFFUSION]),
        only(optional(range(
            info("threshold", "Confidence threshold", SettingKind::Float,
                "Parallel decoding: when set, every masked position whose confidence exceeds this value is committed in the same step (at least one per step), instead of the fixed schedule. 0.9 is a common choice."),
            0.01, 1.0, num(0.9),
        ), "Parallel decoding by confidence threshold"), &[KIND_DIFFUSION]),
        only(optional(choice(
            info("algorithm", "Dream position selection", SettingKind::Choice,
                "Which masked positions to reveal first (Dream models). origin reveals random positions with the schedule's probability; maskgit-plus picks the highest top-1 probability; topk-margin the largest gap between the top two tokens; entropy the lowest-entropy (most certain) positions."),
            &[DreamAlg::Origin, DreamAlg::MaskgitPlus, DreamAlg::TopkMargin, DreamAlg::Entropy], DreamAlg::Origin,
        ), "Choose the position selection (else the model's default)"), &[KIND_DREAM]),
        only(flag(
            info("speculative", "Speculative drafts", SettingKind::Bool,
                "NPU-aware decoding: a sliding, bucket-padded window also predicts positions of later blocks; drafts that the model later confirms are committed without extra forwards (shown as speculative tokens)."),
            d.speculative,
        ), &[KIND_DIFFUSION]),
        only(flag(
            info("revision", "Progressive revision", SettingKind::Bool,
                "NPU-aware decoding: committed tokens stay 'visible' (revisable) until re-checks on a concurrent CPU path confirm them as 'stable'; a token the model later clearly prefers to replace is revised (shown as revised tokens)."),
            d.revision,
        ), &[KIND_DIFFUSION]),
        only(choice(
            info("moe", "Mixture-of-experts execution", SettingKind::Choice,
                "How the experts of a mixture-of-experts model run: cpu routes every token to its experts exactly, all experts in one parallel pass; naive launches each expert separately (what a simple NPU offload does); static-tiers gives each expert a fixed capacity from the model's calibration, drops the least salient tokens beyond it, and runs experts in groups, one launch per group."),
            &[MoePolicy::Cpu, MoePolicy::Naive, MoePolicy::StaticTiers], d.moe,
        ), &[KIND_MOE]),
        only(range(
            info("cfgScale", "Guidance scale (CFG)", SettingKind::Float,
                "Classifier-free guidance (LLaDA): 0 is off; larger values push the answer towards the prompt by contrasting with a prompt-less forward, which doubles the work per step. Not combinable with a KV cache."),
            0.0, 10.0, num(d.cfg_scale),
        ), &[KIND_LLADA]),
        range(
            info("seed", "Seed", SettingKind::Int,
                "Seed of every random draw (sampling, random remasking): the same seed and settings reproduce a run exactly."),
            0.0, f64::from(u32::MAX), num(f64::from(d.seed)),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_covers_every_decode_setting() {
        let keys: Vec<String> = settings_schema().into_iter().map(|s| s.key).collect();
        let json = serde_json::to_value(DecodeSettings::default()).expect("json");
        let fields: Vec<String> = json.as_object().expect("object").keys().cloned().collect();
        for f in &fields {
            assert!(keys.contains(f), "no schema entry for `{f}`");
        }
        assert_eq!(keys.len(), fields.len(), "schema keys {keys:?} vs settings {fields:?}");
        for s in settings_schema() {
            assert!(s.explanation.len() > 40, "{} needs a real explanation", s.key);
            if s.kind == SettingKind::Choice {
                assert!(s.options.as_ref().is_some_and(|o| o.len() >= 2), "{}", s.key);
            }
        }
    }

    #[test]
    fn every_choice_is_a_value_the_settings_accept() {
        for s in settings_schema().into_iter().filter(|s| s.kind == SettingKind::Choice) {
            let mut options = s.options.clone().unwrap_or_default();
            if let Some(SettingValue::Text(d)) = &s.default {
                options.push(d.clone());
            }
            for o in options {
                let mut json = serde_json::to_value(DecodeSettings::default()).expect("json");
                json[&s.key] = o.clone().into();
                let back: DecodeSettings =
                    serde_json::from_value(json).unwrap_or_else(|e| panic!("{}: {o}: {e}", s.key));
                assert_eq!(serde_json::to_value(back).expect("json")[&s.key], o.as_str(), "{}", s.key);
            }
        }
    }

    #[test]
    fn optional_settings_are_exactly_the_nullable_ones() {
        // Off = null in DecodeSettings; the schema's default is the value it starts at when on.
        let off = DecodeSettings { threshold: None, algorithm: None, ..Default::default() };
        let json = serde_json::to_value(off).expect("json");
        for s in settings_schema() {
            assert_eq!(s.toggle_label.is_some(), json[&s.key].is_null(), "{}", s.key);
            if s.toggle_label.is_some() {
                assert!(s.default.is_some(), "{} needs a starting value", s.key);
            }
        }
    }

    #[test]
    fn settings_apply_only_to_the_models_that_use_them() {
        let by_key = |k: &str| settings_schema().into_iter().find(|s| s.key == k).expect(k).applies_to;
        assert_eq!(by_key("algorithm"), Some(vec![KIND_DREAM.to_owned()]));
        assert_eq!(by_key("cfgScale"), Some(vec![KIND_LLADA.to_owned()]));
        assert_eq!(by_key("moe"), Some(vec![KIND_MOE.to_owned()]));
        assert_eq!(by_key("temperature"), None);
        let known = [KIND_DIFFUSION, KIND_AUTOREGRESSIVE, KIND_LLADA, KIND_DREAM, KIND_MOE];
        for s in settings_schema() {
            for k in s.applies_to.unwrap_or_default() {
                assert!(known.contains(&k.as_str()), "{}: unknown kind {k}", s.key);
            }
        }
    }

    #[test]
    fn model_kinds_follow_the_architecture() {
        let dir = crate::backends::embedded_model_dir().expect("embedded model");
        let cfg = ModelConfig::from_hf_file(&dir.join("config.json")).expect("config");
        assert_eq!(model_kinds(&cfg), vec![KIND_DIFFUSION, KIND_LLADA]);
        let dream = ModelConfig { arch: Architecture::Dream, shift_logits: true, ..cfg.clone() };
        assert_eq!(model_kinds(&dream), vec![KIND_DIFFUSION, KIND_DREAM]);
        let ar = ModelConfig { arch: Architecture::Qwen3, causal: true, ..cfg };
        assert_eq!(model_kinds(&ar), vec![KIND_AUTOREGRESSIVE]);
    }
}
