//! `settings_schema`: every decoding knob of [`crate::dto::DecodeSettings`] with its range,
//! choices, engine default and a plain-language explanation for the settings panel.

use crate::dto::{DecodeSettings, SettingInfo, SettingKind, SettingValue, ALGORITHMS};

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
    }
}

fn range(mut s: SettingInfo, min: f64, max: f64, default: SettingValue) -> SettingInfo {
    s.min = Some(min);
    s.max = Some(max);
    s.default = Some(default);
    s
}

fn choice(mut s: SettingInfo, options: &[&str], default: &str) -> SettingInfo {
    s.options = Some(options.iter().map(|o| (*o).to_owned()).collect());
    s.default = Some(SettingValue::Text(default.into()));
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
        range(
            info("blockLength", "Block length (tokens)", SettingKind::Int,
                "Semi-autoregressive blocks: the answer is denoised block by block, left to right. Smaller blocks behave more like left-to-right writing; one block as long as the answer denoises everything at once."),
            1.0, 4096.0, num(f64::from(d.block_length)),
        ),
        range(
            info("steps", "Denoising steps", SettingKind::Int,
                "Total forward passes of the fixed schedule, split evenly over the blocks (so a multiple of the number of blocks). Steps = answer length commits one token per step (best quality); fewer steps commit several tokens per forward (faster, usually worse). Ignored when a confidence threshold is set."),
            1.0, 4096.0, num(f64::from(d.steps)),
        ),
        range(
            info("temperature", "Temperature", SettingKind::Float,
                "Randomness when choosing each position's token: 0 always takes the most likely token (deterministic); higher values sample more freely (Gumbel noise on the logits)."),
            0.0, 2.0, num(d.temperature),
        ),
        choice(
            info("remasking", "Remasking", SettingKind::Choice,
                "Which predictions are kept in a step (LLaDA): lowConfidence keeps the most confident positions and re-masks the rest; random keeps a random choice of positions."),
            &["lowConfidence", "random"], "lowConfidence",
        ),
        choice(
            info("cache", "KV cache", SettingKind::Choice,
                "Reuse of attention keys/values between steps (Fast-dLLM): none recomputes the whole canvas every step (exact); prefix caches everything before the current block at block start; dual also caches the part after it, so a step forwards only the block. Caches are approximations that speed decoding up."),
            &["none", "prefix", "dual"], "none",
        ),
        range(
            info("threshold", "Confidence threshold", SettingKind::Float,
                "Parallel decoding: when set, every masked position whose confidence exceeds this value is committed in the same step (at least one per step), instead of the fixed schedule. 0.9 is a common choice; empty turns it off."),
            0.01, 1.0, num(0.9),
        ),
        choice(
            info("algorithm", "Dream position selection", SettingKind::Choice,
                "Dream models only: which masked positions to reveal first. origin reveals random positions with the schedule's probability; maskgitPlus picks the highest top-1 probability; margin the largest gap between the top two tokens; entropy the lowest-entropy (most certain) positions. LLaDA models ignore it."),
            &ALGORITHMS, "origin",
        ),
        flag(
            info("speculative", "Speculative drafts", SettingKind::Bool,
                "NPU-aware decoding: a sliding, bucket-padded window also predicts positions of later blocks; drafts that the model later confirms are committed without extra forwards (shown as speculative tokens)."),
            d.speculative,
        ),
        flag(
            info("revision", "Progressive revision", SettingKind::Bool,
                "NPU-aware decoding: committed tokens stay 'visible' (revisable) until re-checks on a concurrent CPU path confirm them as 'stable'; a token the model later clearly prefers to replace is revised (shown as revised tokens)."),
            d.revision,
        ),
        choice(
            info("moe", "Mixture-of-experts execution", SettingKind::Choice,
                "MoE models only (dense models ignore it): cpu routes every token to its experts exactly, all experts in one parallel pass; naive launches each expert separately (what a simple NPU offload does); staticTiers gives each expert a fixed capacity from the model's calibration, drops the least salient tokens beyond it, and runs experts in groups, one launch per group."),
            &["cpu", "naive", "staticTiers"], "cpu",
        ),
        range(
            info("cfgScale", "Guidance scale (CFG)", SettingKind::Float,
                "Classifier-free guidance (LLaDA): 0 is off; larger values push the answer towards the prompt by contrasting with a prompt-less forward, which doubles the work per step. Not combinable with a KV cache."),
            0.0, 10.0, num(d.cfg_scale),
        ),
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
}
