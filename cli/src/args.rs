//! Command-line flags shared by `generate` and `chat`: model, decoding settings, backend.

use clap::{Args, ValueEnum};
use unmask_engine::decode::revision::{CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{CacheMode, DecodeSettings, DreamAlg, Remasking};
use unmask_engine::model::GenerationDefaults;

/// Which model to run.
#[derive(Args, Debug, Clone)]
pub struct ModelArg {
    /// Model: a directory or .gguf path, a name from `unmask models list`, or an embedded model
    /// name (default: the embedded tiny-llada).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
}

/// Where the forward passes run.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Execution backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    pub backend: BackendKind,
    /// Device profile for the virtual NPU (e.g. sm8650, sm8750, sm8850).
    #[arg(long, default_value = "sm8750")]
    pub device: String,
    /// QNN backend library for `--backend qnn` (on a phone: libQnnHtp.so from the QAIRT SDK).
    #[arg(long, default_value = "libQnnHtp.so")]
    pub qnn_lib: std::path::PathBuf,
    /// Context-binary cache directory for `--backend qnn`: graphs built once are reloaded by later runs.
    #[arg(long)]
    pub qnn_cache: Option<std::path::PathBuf>,
}

/// Execution backends the CLI can build.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// This machine's CPU cores.
    Cpu,
    /// The virtual NPU: real math on the CPU, simulated NPU timing and energy.
    Vnpu,
    /// Qualcomm Hexagon NPU through the QNN library (`--qnn-lib`); dense models, W8A16.
    Qnn,
}

/// Every decoding knob; unset flags fall back to the model's generation_config.json, then to
/// the engine defaults.
#[derive(Args, Debug, Clone, Default)]
pub struct DecodeArgs {
    /// Tokens to generate.
    #[arg(long)]
    pub gen_length: Option<usize>,
    /// Semi-autoregressive block length (divides gen-length).
    #[arg(long)]
    pub block_length: Option<usize>,
    /// Total denoising steps (a multiple of the number of blocks).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Sampling temperature (0 = greedy).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// LLaDA remasking strategy.
    #[arg(long, value_enum)]
    pub remasking: Option<RemaskingArg>,
    /// Classifier-free guidance scale (0 = off).
    #[arg(long)]
    pub cfg_scale: Option<f64>,
    /// Confidence threshold for parallel decoding (commit every token above it, >= 1 per step).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// KV cache between denoising steps.
    #[arg(long, value_enum)]
    pub cache: Option<CacheArg>,
    /// RNG seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Dream position-selection algorithm.
    #[arg(long, value_enum)]
    pub alg: Option<AlgArg>,
    /// Dream: temperature of position sampling (0 = top positions).
    #[arg(long)]
    pub alg_temp: Option<f64>,
    /// Nucleus sampling mass.
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Top-k sampling.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Stop once a block ends in EOS (saves the steps of trailing EOS padding).
    #[arg(long)]
    pub early_stop_eos: Option<bool>,
    /// Forbid EOS while choosing tokens (LLaDA `logits_eos_inf`).
    #[arg(long)]
    pub logits_eos_inf: bool,
    /// LLaDA `confidence_eos_eot_inf`: EOS/EOT never win the confidence ranking.
    #[arg(long)]
    pub confidence_eos_eot_inf: bool,
    /// Dream: last timestep of linspace(1, eps, steps+1).
    #[arg(long)]
    pub eps: Option<f64>,
    /// EOS token id (default: the model's).
    #[arg(long)]
    pub eos_token_id: Option<u32>,
    /// EOT token id (default: the model's).
    #[arg(long)]
    pub eot_token_id: Option<u32>,
    /// Multi-block speculative decoding: a sliding window that pulls masked tokens of later blocks
    /// into the forward (drafts) when the current block runs short (LLaDA-family models).
    #[arg(long, help_heading = "NPU-aware decoding")]
    pub speculative: bool,
    /// Speculative: look ahead when fewer than this many masks remain in the block [default: 4].
    #[arg(long, requires = "speculative", help_heading = "NPU-aware decoding")]
    pub spec_trigger: Option<usize>,
    /// Speculative: future positions pulled into the window, before bucket padding [default: 32].
    #[arg(long, requires = "speculative", help_heading = "NPU-aware decoding")]
    pub spec_lookahead: Option<usize>,
    /// Speculative: a draft is accepted only inside the top-K confidence set [default: 2].
    #[arg(long, requires = "speculative", help_heading = "NPU-aware decoding")]
    pub spec_accept_top_k: Option<usize>,
    /// Speculative: show drafts but never accept them.
    #[arg(long, requires = "speculative", help_heading = "NPU-aware decoding")]
    pub spec_no_accept: bool,
    /// Speculative: token buckets to pad windows to when the backend has no cost profile
    /// (comma-separated, e.g. 16,32,64; default: exact windows).
    #[arg(long, requires = "speculative", value_delimiter = ',', help_heading = "NPU-aware decoding")]
    pub spec_buckets: Vec<usize>,
    /// Dual-path progressive revision: committed tokens stay revisable (visible) until stable; a
    /// CPU path re-checks them concurrently with the dense path (LLaDA-family models).
    #[arg(long, help_heading = "NPU-aware decoding")]
    pub revision: bool,
    /// Revision: a visible token re-checked below this probability may be revised [default: 0.7].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_visible_threshold: Option<f64>,
    /// Revision: commits at or above this are stable at once; re-checks at or above confirm [default: 0.9].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_stable_threshold: Option<f64>,
    /// Revision: how much more probable a replacement must be [default: 0.2].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_margin: Option<f64>,
    /// Revision: consecutive confirmations that make a visible token stable [default: 2].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_stable_checks: Option<usize>,
    /// Revision: visible positions the CPU path re-checks per step [default: 4].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_max_checks: Option<usize>,
    /// Revision: `async` = the dense path never waits for the CPU path (verdicts land when its
    /// job ends, on the simulated device clock); `lockstep` = every step waits for it.
    #[arg(long, requires = "revision", value_enum, default_value_t = ScheduleArg::Async, help_heading = "NPU-aware decoding")]
    pub revision_schedule: ScheduleArg,
}

/// CPU-path schedule of revision.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScheduleArg {
    #[default]
    Async,
    Lockstep,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum RemaskingArg {
    LowConfidence,
    Random,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum CacheArg {
    None,
    Prefix,
    Dual,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum AlgArg {
    Origin,
    MaskgitPlus,
    TopkMargin,
    Entropy,
}

impl DecodeArgs {
    /// Settings: flags over model defaults over engine defaults.
    pub fn settings(&self, defaults: &GenerationDefaults) -> DecodeSettings {
        let mut s = DecodeSettings { early_stop_eos: true, ..DecodeSettings::default() };
        if let Some(v) = defaults.gen_length {
            s.gen_length = v;
        }
        if let Some(v) = defaults.block_length {
            s.block_length = v;
        }
        if let Some(v) = defaults.steps {
            s.steps = v;
        }
        if let Some(v) = defaults.temperature {
            s.temperature = v as f64;
        }
        if defaults.remasking.as_deref() == Some("random") {
            s.remasking = Remasking::Random;
        }
        if let Some(v) = self.gen_length {
            s.gen_length = v;
            // Keep the model's step density when only the length changes.
            if self.steps.is_none() && self.threshold.is_none() {
                let per_token = defaults.steps.zip(defaults.gen_length).map(|(st, g)| st as f64 / g as f64).unwrap_or(1.0);
                s.steps = ((v as f64 * per_token).round() as usize).max(1);
            }
            if self.block_length.is_none() && v % s.block_length != 0 {
                s.block_length = v;
            }
        }
        if let Some(v) = self.block_length {
            s.block_length = v;
        }
        if let Some(v) = self.steps {
            s.steps = v;
        }
        if self.steps.is_none() && self.threshold.is_none() {
            // Round steps to a multiple of the block count so a length change stays valid.
            let nb = (s.gen_length / s.block_length.max(1)).max(1);
            s.steps = (s.steps.div_ceil(nb)).max(1) * nb;
        }
        if let Some(v) = self.temperature {
            s.temperature = v;
        }
        if let Some(v) = self.remasking {
            s.remasking = match v {
                RemaskingArg::LowConfidence => Remasking::LowConfidence,
                RemaskingArg::Random => Remasking::Random,
            };
        }
        if let Some(v) = self.cfg_scale {
            s.cfg_scale = v;
        }
        if self.threshold.is_some() {
            s.threshold = self.threshold;
        }
        if let Some(v) = self.cache {
            s.cache = match v {
                CacheArg::None => CacheMode::None,
                CacheArg::Prefix => CacheMode::Prefix,
                CacheArg::Dual => CacheMode::Dual,
            };
        }
        if let Some(v) = self.seed {
            s.seed = v;
        }
        if let Some(v) = self.alg {
            s.alg = match v {
                AlgArg::Origin => DreamAlg::Origin,
                AlgArg::MaskgitPlus => DreamAlg::MaskgitPlus,
                AlgArg::TopkMargin => DreamAlg::TopkMargin,
                AlgArg::Entropy => DreamAlg::Entropy,
            };
        }
        if self.alg_temp.is_some() {
            s.alg_temp = self.alg_temp;
        }
        if self.top_p.is_some() {
            s.top_p = self.top_p;
        }
        if self.top_k.is_some() {
            s.top_k = self.top_k;
        }
        if let Some(v) = self.early_stop_eos {
            s.early_stop_eos = v;
        }
        if let Some(v) = self.eps {
            s.eps = v;
        }
        if self.eos_token_id.is_some() {
            s.eos_token_id = self.eos_token_id;
        }
        if self.eot_token_id.is_some() {
            s.eot_token_id = self.eot_token_id;
        }
        if self.speculative {
            let mut sp = SpeculativeSettings::default();
            if let Some(v) = self.spec_trigger {
                sp.trigger = v;
            }
            if let Some(v) = self.spec_lookahead {
                sp.max_lookahead = v;
            }
            if let Some(v) = self.spec_accept_top_k {
                sp.accept_top_k = v;
            }
            sp.accept_drafts &= !self.spec_no_accept;
            if !self.spec_buckets.is_empty() {
                sp.token_buckets = self.spec_buckets.clone();
            }
            s.speculative = Some(sp);
        }
        if self.revision {
            let mut r = RevisionSettings::default();
            if let Some(v) = self.revision_visible_threshold {
                r.visible_threshold = v;
            }
            if let Some(v) = self.revision_stable_threshold {
                r.stable_threshold = v;
            }
            if let Some(v) = self.revision_margin {
                r.revise_margin = v;
            }
            if let Some(v) = self.revision_stable_checks {
                r.stable_checks = v;
            }
            if let Some(v) = self.revision_max_checks {
                r.max_checks = v;
            }
            r.schedule = match self.revision_schedule {
                ScheduleArg::Async => CpuPathSchedule::Async,
                ScheduleArg::Lockstep => CpuPathSchedule::Lockstep,
            };
            s.revision = Some(r);
        }
        s.logits_eos_inf |= self.logits_eos_inf;
        s.confidence_eos_eot_inf |= self.confidence_eos_eot_inf;
        s
    }
}
