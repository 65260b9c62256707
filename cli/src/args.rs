//! Command-line flags shared by `generate` and `chat`: model, decoding settings, backend.

use clap::Args;
use unmask_engine::decode::revision::{CpuPathEnd, CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{CacheMode, DreamAlg, Remasking};
use unmask_engine::run::{BackendSpec, SettingsOverrides};

/// Which model to run.
#[derive(Args, Debug, Clone)]
pub struct ModelArg {
    /// Model: a directory or .gguf path, a name from `unmask models list`, or an embedded model
    /// name (default: the embedded tiny-llada).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
}

/// Speculative decoding of an autoregressive model with a draft model.
#[derive(Args, Debug, Clone)]
pub struct DraftArgs {
    /// Draft model for speculative decoding (autoregressive targets only; same tokenizer as the
    /// target): a path, a store name or an embedded name such as `tiny-draft`. The output is
    /// the target's own (identical greedy tokens; the same distribution when sampling).
    #[arg(long, value_name = "MODEL")]
    pub draft: Option<String>,
    /// How drafting and verification are scheduled: `sync` (fixed-length drafts, in turn),
    /// `adaptive` (drafts stop by entropy and history), `async` (drafter and verifier on two
    /// threads with queues between them).
    #[arg(long, value_name = "SCHEDULE", requires = "draft")]
    pub spec_schedule: Option<unmask_engine::decode::spec_ar::SpecSchedule>,
    /// Drafts per verification (default 4).
    #[arg(long, value_name = "N", requires = "draft")]
    pub draft_len: Option<usize>,
}

impl DraftArgs {
    /// The speculative settings the flags ask for.
    pub fn settings(&self) -> unmask_engine::decode::spec_ar::SpecArSettings {
        let mut s = unmask_engine::decode::spec_ar::SpecArSettings::default();
        if let Some(x) = self.spec_schedule {
            s.schedule = x;
        }
        if let Some(n) = self.draft_len {
            s.draft_len = n;
        }
        s
    }
}

/// Where the forward passes run.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Execution backend: `cpu`, `vnpu[:DEVICE]` (the virtual NPU: real math here, simulated
    /// NPU time and energy) or `qnn[:LIBRARY]` (Qualcomm Hexagon NPU; dense models, W8A16).
    #[arg(long, default_value = "cpu")]
    pub backend: BackendSpec,
    /// Device profile of the virtual NPU (sm8650, sm8750, sm8850, ...; same as `--backend vnpu:DEVICE`).
    #[arg(long)]
    pub device: Option<String>,
    /// QNN backend library for `--backend qnn` (on a phone: libQnnHtp.so from the QAIRT SDK).
    #[arg(long)]
    pub qnn_lib: Option<std::path::PathBuf>,
    /// Context-binary cache directory for `--backend qnn`: graphs built once are reloaded by later runs.
    #[arg(long)]
    pub qnn_cache: Option<std::path::PathBuf>,
}

impl BackendArgs {
    /// The backend the flags name (`--device`, `--qnn-lib` and `--qnn-cache` refine `--backend`).
    pub fn spec(&self) -> anyhow::Result<BackendSpec> {
        let mut spec = self.backend.clone();
        match &mut spec {
            BackendSpec::Vnpu { device } => {
                if let Some(d) = &self.device {
                    *device = d.to_lowercase();
                }
            }
            BackendSpec::Qnn { library, cache_dir } => {
                if let Some(l) = &self.qnn_lib {
                    *library = l.clone();
                }
                cache_dir.clone_from(&self.qnn_cache);
            }
            BackendSpec::Cpu => {}
        }
        let stray = match &spec {
            BackendSpec::Vnpu { .. } => self.qnn_lib.is_some() || self.qnn_cache.is_some(),
            BackendSpec::Qnn { .. } => self.device.is_some(),
            BackendSpec::Cpu => self.device.is_some() || self.qnn_lib.is_some() || self.qnn_cache.is_some(),
        };
        if stray {
            return Err(crate::exit::fail(
                crate::exit::USAGE,
                format!(
                    "--device applies to --backend vnpu, --qnn-lib/--qnn-cache to --backend qnn (backend is {spec})"
                ),
            ));
        }
        Ok(spec)
    }
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
    pub remasking: Option<Remasking>,
    /// Classifier-free guidance scale (0 = off).
    #[arg(long)]
    pub cfg_scale: Option<f64>,
    /// Confidence threshold for parallel decoding (commit every token above it, >= 1 per step).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// KV cache between denoising steps.
    #[arg(long, value_enum)]
    pub cache: Option<CacheMode>,
    /// RNG seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Dream position-selection algorithm.
    #[arg(long, value_enum)]
    pub alg: Option<DreamAlg>,
    /// Dream: temperature of position sampling (0 = top positions).
    #[arg(long)]
    pub alg_temp: Option<f64>,
    /// Nucleus sampling mass.
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Top-k sampling.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Stop once a block ends in EOS (saves the steps of trailing EOS padding) [default: true;
    /// upstream LLaDA/Dream always fill the whole canvas].
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
    /// Speculative: accept a draft as drafted when its own confidence is at least this, whether
    /// or not the block's fresh forward agrees (aggressive; off = the top-k rule).
    #[arg(long, requires = "speculative", value_name = "P", help_heading = "NPU-aware decoding")]
    pub spec_accept_confidence: Option<f64>,
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
    /// Revision: positions before the current block that stay revisable, re-checked with the
    /// later blocks as context [default: 0 = a block settles when it completes].
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_lookback: Option<usize>,
    /// Revision: `async` = the dense path never waits for the CPU path (verdicts land when its
    /// job ends, on the simulated device clock; deterministic); `lockstep` = every step waits for
    /// it; `threaded` = the CPU path runs on its own thread and core for the whole run and its
    /// verdicts land at the first step boundary after they arrive in real time (not deterministic).
    #[arg(long, requires = "revision", value_enum, default_value_t = CpuPathSchedule::Async, help_heading = "NPU-aware decoding")]
    pub revision_schedule: CpuPathSchedule,
    /// Revision: a CPU-path job still running when the run ends is dropped (`drop`) or waited for
    /// and applied (`drain`).
    #[arg(long, requires = "revision", value_enum, default_value_t = CpuPathEnd::Drop, help_heading = "NPU-aware decoding")]
    pub revision_at_end: CpuPathEnd,
    /// Revision: when the run ends, the dense path re-checks the still-revisable visible tokens
    /// up to N times (one forward each, the whole answer as context; stops after a pass that
    /// changes nothing) [default: 0].
    #[arg(long, value_name = "N", requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_final_passes: Option<usize>,
    /// Revision: never re-check two neighbouring tokens in one forward (the ones skipped are
    /// checked next, least recently checked first), so each is judged with its neighbour as
    /// context; final passes then continue until every visible token had a quiet check.
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_isolated_checks: bool,
    /// Revision: final passes forward the whole canvas without the KV cache (every position's
    /// K/V recomputed from the finished answer; a longer window per pass).
    #[arg(long, requires = "revision", help_heading = "NPU-aware decoding")]
    pub revision_fresh_final_passes: bool,
    /// How mixture-of-experts layers run: `cpu` (exact, dynamic shapes), `naive` (one launch per
    /// expert) or `static-tiers` (static capacity tiers from `unmask moe calibrate`, tokens over
    /// capacity dropped by saliency, experts grouped into one launch per group). Dense models ignore it.
    #[arg(long, value_name = "POLICY", help_heading = "Mixture of experts")]
    pub moe: Option<unmask_engine::moe::MoePolicy>,
    /// static-tiers: keep a token's remaining gate weights as routed when some of its experts were
    /// dropped (default: scale them back to the original total).
    #[arg(long, requires = "moe", help_heading = "Mixture of experts")]
    pub moe_keep_weights: bool,
    /// static-tiers on a virtual NPU: launch every expert group, none on the CPU lane (default:
    /// load-aware residency runs cold groups on a second thread beside the NPU's launches).
    #[arg(long, requires = "moe", help_heading = "Mixture of experts")]
    pub moe_no_cpu_lane: bool,
}

impl DecodeArgs {
    /// What the flags set; the model's defaults and the engine's fill the rest
    /// ([`unmask_engine::run::effective_settings`]).
    pub fn overrides(&self) -> SettingsOverrides {
        let speculative = self.speculative.then(|| {
            let d = SpeculativeSettings::default();
            SpeculativeSettings {
                trigger: self.spec_trigger.unwrap_or(d.trigger),
                max_lookahead: self.spec_lookahead.unwrap_or(d.max_lookahead),
                accept_top_k: self.spec_accept_top_k.unwrap_or(d.accept_top_k),
                accept_confidence: self.spec_accept_confidence,
                accept_drafts: d.accept_drafts && !self.spec_no_accept,
                token_buckets: if self.spec_buckets.is_empty() { d.token_buckets } else { self.spec_buckets.clone() },
            }
        });
        let revision = self.revision.then(|| {
            let d = RevisionSettings::default();
            RevisionSettings {
                visible_threshold: self.revision_visible_threshold.unwrap_or(d.visible_threshold),
                stable_threshold: self.revision_stable_threshold.unwrap_or(d.stable_threshold),
                revise_margin: self.revision_margin.unwrap_or(d.revise_margin),
                stable_checks: self.revision_stable_checks.unwrap_or(d.stable_checks),
                max_checks: self.revision_max_checks.unwrap_or(d.max_checks),
                lookback: self.revision_lookback.unwrap_or(d.lookback),
                schedule: self.revision_schedule,
                at_end: self.revision_at_end,
                final_passes: self.revision_final_passes.unwrap_or(d.final_passes),
                isolated_checks: self.revision_isolated_checks,
                fresh_final_passes: self.revision_fresh_final_passes,
            }
        });
        SettingsOverrides {
            gen_length: self.gen_length,
            block_length: self.block_length,
            steps: self.steps,
            temperature: self.temperature,
            remasking: self.remasking,
            cfg_scale: self.cfg_scale,
            threshold: self.threshold,
            cache: self.cache,
            seed: self.seed,
            alg: self.alg,
            alg_temp: self.alg_temp,
            top_p: self.top_p,
            top_k: self.top_k,
            early_stop_eos: self.early_stop_eos,
            logits_eos_inf: self.logits_eos_inf.then_some(true),
            confidence_eos_eot_inf: self.confidence_eos_eot_inf.then_some(true),
            eps: self.eps,
            eos_token_id: self.eos_token_id,
            eot_token_id: self.eot_token_id,
            speculative,
            revision,
            moe: self.moe.map(|policy| unmask_engine::moe::MoeSettings {
                policy,
                renormalise_dropped: !self.moe_keep_weights,
                cpu_lane: !self.moe_no_cpu_lane,
            }),
        }
    }
}
