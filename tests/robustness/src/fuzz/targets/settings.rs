//! `DecodeSettings` with extreme values (0, usize::MAX, NaN, ±inf, negatives) validated against
//! real model configs and fuzz-chosen prompts. The input is a byte string read as choices.

use unmask_engine::decode::revision::{CpuPathEnd, CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{CacheMode, DecodeSettings, DreamAlg, Remasking};
use unmask_engine::model::ModelConfig;
use unmask_engine::moe::MoePolicy;
use unmask_engine::EngineError;

use super::Target;
use crate::fuzz::bytes::{self, ByteSource};
use crate::fuzz::rng::Rng;
use crate::fuzz::seeds::repo_root;
use crate::fuzz::FuzzError;

const SIZES: &[usize] = &[0, 1, 2, 3, 7, 8, 32, 64, 127, 128, 4096, usize::MAX, usize::MAX - 1, 1 << 32, 1 << 63];
const FLOATS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    0.5,
    1e-9,
    -1.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MAX,
    f64::MIN_POSITIVE,
    2.0,
    1e300,
    0.999_999,
];
const PROMPT_LENS: &[usize] = &[0, 1, 2, 5, 63, 64, 300];

/// Validates fuzz-chosen settings against every family's config.
pub struct Settings {
    configs: Vec<ModelConfig>,
}

impl Settings {
    pub fn new() -> Result<Self, FuzzError> {
        let mut configs = Vec::new();
        let root = repo_root();
        let paths = ["llada", "dream", "llada_moe", "llama", "qwen2", "qwen3"]
            .iter()
            .map(|d| root.join("tests/golden").join(d).join("config.json"))
            .chain(["tiny-llada", "tiny-ar"].iter().map(|d| root.join("models").join(d).join("config.json")));
        for p in paths {
            if let Ok(c) = ModelConfig::from_hf_file(&p) {
                configs.push(c);
            }
        }
        if configs.is_empty() {
            return Err(FuzzError::Seeds("no model config could be read for `decode_settings`".into()));
        }
        Ok(Settings { configs })
    }
}

fn size(src: &mut ByteSource<'_>) -> usize {
    if src.one_in(4) {
        src.u32() as usize
    } else {
        src.pick(SIZES)
    }
}

fn opt_size(src: &mut ByteSource<'_>) -> Option<usize> {
    (!src.one_in(3)).then(|| size(src))
}

fn float(src: &mut ByteSource<'_>) -> f64 {
    src.pick(FLOATS)
}

fn opt_float(src: &mut ByteSource<'_>) -> Option<f64> {
    (!src.one_in(3)).then(|| float(src))
}

fn opt_id(src: &mut ByteSource<'_>, vocab: usize) -> Option<u32> {
    let v = vocab as u32;
    (!src.one_in(3)).then(|| src.pick(&[0, 1, 2, v.saturating_sub(1), v, u32::MAX]))
}

fn decode_settings(src: &mut ByteSource<'_>, vocab: usize) -> DecodeSettings {
    DecodeSettings {
        gen_length: size(src),
        block_length: size(src),
        steps: size(src),
        temperature: float(src),
        remasking: src.pick(&[Remasking::LowConfidence, Remasking::Random]),
        cfg_scale: float(src),
        threshold: opt_float(src),
        cache: src.pick(&[CacheMode::None, CacheMode::Prefix, CacheMode::Dual]),
        seed: src.u64(),
        logits_eos_inf: src.one_in(2),
        confidence_eos_eot_inf: src.one_in(2),
        early_stop_eos: src.one_in(2),
        eos_token_id: opt_id(src, vocab),
        eot_token_id: opt_id(src, vocab),
        alg: src.pick(&[DreamAlg::Origin, DreamAlg::MaskgitPlus, DreamAlg::TopkMargin, DreamAlg::Entropy]),
        alg_temp: opt_float(src),
        eps: float(src),
        top_p: opt_float(src),
        top_k: opt_size(src),
        speculative: src.one_in(3).then(|| SpeculativeSettings {
            trigger: size(src),
            max_lookahead: size(src),
            accept_drafts: src.one_in(2),
            accept_top_k: size(src),
            accept_confidence: src.one_in(2).then(|| float(src)),
            token_buckets: (0..src.u8() % 4).map(|_| size(src)).collect(),
        }),
        revision: src.one_in(3).then(|| RevisionSettings {
            visible_threshold: float(src),
            stable_threshold: float(src),
            revise_margin: float(src),
            stable_checks: size(src),
            max_checks: size(src),
            lookback: size(src),
            schedule: src.pick(&[CpuPathSchedule::Async, CpuPathSchedule::Lockstep, CpuPathSchedule::Threaded]),
            at_end: src.pick(&[CpuPathEnd::Drop, CpuPathEnd::Drain]),
            final_passes: size(src),
            isolated_checks: src.one_in(2),
            fresh_final_passes: src.one_in(2),
        }),
        moe: src.one_in(3).then(|| unmask_engine::moe::MoeSettings {
            policy: src.pick(&[MoePolicy::Cpu, MoePolicy::Naive, MoePolicy::StaticTiers]),
            renormalise_dropped: src.one_in(2),
            cpu_lane: src.one_in(2),
        }),
    }
}

impl Target for Settings {
    fn name(&self) -> &'static str {
        "decode_settings"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![
            // Valid: gen 32, block 8, steps 32, mostly defaults.
            vec![0, 1, 6, 1, 5, 1, 6, 1, 2, 0, 1, 0, 0, 0],
            vec![3; 64],
            vec![11; 96],
            (0..=255).collect(),
        ]
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        bytes::mutate(input, rng, corpus);
        input.truncate(1024);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let mut src = ByteSource::new(input);
        let cfg = &self.configs[src.index(self.configs.len())];
        let settings = decode_settings(&mut src, cfg.vocab);
        let len = src.pick(PROMPT_LENS);
        let mask = cfg.mask_token_id.unwrap_or(0);
        let vocab = cfg.vocab as u32;
        let prompt: Vec<u32> = (0..len)
            .map(|i| match src.u8() % 8 {
                0 => mask,
                1 => vocab,
                2 => u32::MAX,
                3 => vocab.saturating_sub(1),
                _ => (i as u32 * 7 + 3) % vocab.max(1),
            })
            .collect();
        let _ = settings.validate();
        settings.validate_for(cfg, &prompt)?;
        // Accepted settings feed the schedule arithmetic the decoders run first.
        let _ = (settings.num_blocks(), settings.steps_per_block(), settings.eos_id(cfg), settings.eot_id(cfg));
        Ok(())
    }
}
