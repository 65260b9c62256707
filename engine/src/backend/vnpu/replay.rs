//! Trace-driven scaling: replay a recorded decode run (tokens forwarded, context, rows needing logits
//! per step) with the layer shapes of 8B-class models on every device profile, giving **simulated**
//! latency and energy; plus the LLaDA-8B-on-SM8750 comparison (CPU baseline, naive NPU offload, NPU
//! with the memory runtime, Llama-3-8B AR).

use crate::error::Result;
use crate::memory::graph::{Precision, StepShape};
use crate::memory::plan::PlacementPolicy;
use crate::model::config::{Architecture, ModelConfig, RopeStyle};
use crate::trace::LanePower;

use super::cost::{ComputeTarget, ShapeBuckets};
use super::profile::DeviceProfile;
use super::sim::{LogitRows, SimOptions, StepSimulator};
use super::{simulator_for, VnpuConfig};

/// One recorded forward of a decode run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DecodeStepRecord {
    /// Tokens forwarded.
    pub tokens: usize,
    /// Attention context (cached prefix + block).
    pub context: usize,
    /// Rows that needed logits.
    pub logit_rows: usize,
}

/// A recorded (or synthesised) decode run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecodeTrace {
    /// Description ("llada block 32, 128 tokens").
    pub name: String,
    /// Forwards in order.
    pub steps: Vec<DecodeStepRecord>,
    /// Answer tokens the run produced.
    pub answer_tokens: usize,
}

impl DecodeTrace {
    /// Block decoding with a prefix KV cache (Fast-dLLM "prefix cache" style, blocks over the answer
    /// only): prefill the prompt; per block, `steps_per_block` forwards of the block over the cached
    /// prefix with logits for the still-masked rows; then one forward writing the block's KV.
    pub fn block_decoding(prompt: usize, answer: usize, block: usize, steps_per_block: usize) -> Self {
        let block = block.max(1);
        let mut steps = vec![DecodeStepRecord { tokens: prompt, context: prompt, logit_rows: 0 }];
        let mut done = 0;
        while done < answer {
            let b = block.min(answer - done);
            let ctx = prompt + done + b;
            let per_step = b.div_ceil(steps_per_block.clamp(1, b));
            let mut masked = b;
            while masked > 0 {
                steps.push(DecodeStepRecord { tokens: b, context: ctx, logit_rows: masked });
                masked -= per_step.min(masked);
            }
            steps.push(DecodeStepRecord { tokens: b, context: ctx, logit_rows: 0 });
            done += b;
        }
        DecodeTrace {
            name: format!(
                "block decoding: prompt {prompt}, answer {answer}, block {block}, {steps_per_block} steps/block"
            ),
            steps,
            answer_tokens: answer,
        }
    }

    /// Several runs one after the other (one workload).
    pub fn concat(name: &str, runs: impl IntoIterator<Item = DecodeTrace>) -> Self {
        let mut out = DecodeTrace { name: name.to_owned(), steps: Vec::new(), answer_tokens: 0 };
        for r in runs {
            out.steps.extend(r.steps);
            out.answer_tokens += r.answer_tokens;
        }
        out
    }

    /// Autoregressive decoding: prefill, then one token per forward.
    pub fn autoregressive(prompt: usize, answer: usize) -> Self {
        let mut steps = vec![DecodeStepRecord { tokens: prompt, context: prompt, logit_rows: 1 }];
        for i in 1..answer {
            steps.push(DecodeStepRecord { tokens: 1, context: prompt + i, logit_rows: 1 });
        }
        DecodeTrace { name: format!("autoregressive: prompt {prompt}, answer {answer}"), steps, answer_tokens: answer }
    }
}

/// A recorded run of the NPU-aware loop: its dense forwards and the CPU-path forwards of
/// dual-path revision, each paired with the dense forward it ran next to
/// (`backend::recorder::RecordingBackend`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DualPathTrace {
    /// Description.
    pub name: String,
    /// Dense forwards in order.
    pub dense: Vec<DecodeStepRecord>,
    /// (index into `dense`, shape) of every CPU-path forward.
    pub revision: Vec<(usize, DecodeStepRecord)>,
    /// Answer tokens the run produced.
    pub answer_tokens: usize,
}

impl DualPathTrace {
    /// The dense path alone, as a plain trace.
    pub fn dense_trace(&self) -> DecodeTrace {
        DecodeTrace { name: self.name.clone(), steps: self.dense.clone(), answer_tokens: self.answer_tokens }
    }

    /// Appends another run (several prompts replayed as one workload).
    pub fn extend(&mut self, other: DualPathTrace) {
        let base = self.dense.len();
        self.dense.extend(other.dense);
        self.revision.extend(other.revision.into_iter().map(|(i, r)| (base + i, r)));
        self.answer_tokens += other.answer_tokens;
    }
}

/// A [`DualPathTrace`] replayed: dense forwards on the NPU, CPU-path forwards on the phone's CPU,
/// in lockstep (each step as long as the longer path) and with the async schedule (all **simulated**).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DualPathReplay {
    /// Model shape.
    pub model: String,
    /// Device profile.
    pub device: String,
    /// End-to-end latency, seconds.
    pub simulated_latency_s: f64,
    /// Sum of the dense forwards alone, seconds.
    pub dense_s: f64,
    /// Sum of the CPU-path forwards alone, seconds.
    pub cpu_path_s: f64,
    /// Energy of both paths, joules.
    pub simulated_energy_j: f64,
    /// Dense forwards.
    pub dense_forwards: usize,
    /// CPU-path forwards.
    pub cpu_forwards: usize,
    /// Steps whose CPU path outlasted the dense forward.
    pub cpu_bound_steps: usize,
    /// Latency if the CPU path never held up the dense path: a step's CPU-path job is launched
    /// only when the CPU path is idle at the step's start, and runs across as many dense steps as
    /// it needs (its verdicts land at the first step boundary after it ends); jobs that find the
    /// CPU busy are dropped. This is the decoding loop's default (`CpuPathSchedule::Async`) re-timed
    /// on this device; `simulated_latency_s` is its `Lockstep` schedule.
    pub async_latency_s: f64,
    /// CPU-path jobs (steps with CPU forwards) the asynchronous schedule would run / drop.
    pub async_jobs_run: usize,
    /// See `async_jobs_run`.
    pub async_jobs_dropped: usize,
}

/// Replays `trace` with `npu` for the dense path and `cpu` (the cores the CPU path gets) for the
/// revision forwards.
pub fn replay_dual_path(
    trace: &DualPathTrace,
    npu: &mut StepSimulator,
    cpu: &mut StepSimulator,
    device: &str,
) -> Result<DualPathReplay> {
    let mut cpu_per_step = vec![0.0f64; trace.dense.len()];
    let mut r = DualPathReplay { model: model_name(npu.config()), device: device.to_owned(), ..Default::default() };
    for &(i, s) in &trace.revision {
        if s.tokens == 0 {
            continue;
        }
        let step = cpu.simulate(StepShape { tokens: s.tokens, context: s.context, logit_rows: s.logit_rows })?;
        r.cpu_path_s += step.time_s;
        r.simulated_energy_j += step.energy_j;
        r.cpu_forwards += 1;
        // A record past the last dense forward (the run ended while it ran) closes the run.
        let slot = i.min(trace.dense.len().saturating_sub(1));
        if let Some(c) = cpu_per_step.get_mut(slot) {
            *c += step.time_s;
        } else {
            r.simulated_latency_s += step.time_s;
        }
    }
    // Asynchronous schedule: the dense clock never waits; the CPU path takes a job when idle.
    let (mut clock, mut cpu_free) = (0.0f64, 0.0f64);
    for (s, &cpu_s) in trace.dense.iter().zip(&cpu_per_step) {
        let dense_s = if s.tokens == 0 {
            0.0
        } else {
            let step = npu.simulate(StepShape { tokens: s.tokens, context: s.context, logit_rows: s.logit_rows })?;
            r.simulated_energy_j += step.energy_j;
            r.dense_forwards += 1;
            step.time_s
        };
        r.dense_s += dense_s;
        if cpu_s > 0.0 {
            if cpu_free <= clock + 1e-12 {
                cpu_free = clock + cpu_s;
                r.async_jobs_run += 1;
            } else {
                r.async_jobs_dropped += 1;
            }
        }
        clock += dense_s;
        if cpu_s > dense_s {
            r.cpu_bound_steps += 1;
        }
        r.simulated_latency_s += dense_s.max(cpu_s);
    }
    r.async_latency_s = clock;
    Ok(r)
}

/// `trace` replayed with `preset`'s shapes on `device`: the NPU with the swap-optimized memory
/// runtime for the dense path, every CPU core but the NPU's driver for the CPU path.
pub fn replay_dual_path_on(trace: &DualPathTrace, preset: ModelPreset, device: &str) -> Result<DualPathReplay> {
    let profile = DeviceProfile::builtin(device)?;
    let cfg = preset.config();
    let mut npu = simulator_for(&cfg, &profile, &npu_config(PlacementPolicy::SwapOptimized))?;
    let mut cpu = cpu_simulator(&cfg, &profile, super::cpu_path::cpu_path_cores(&profile));
    replay_dual_path(trace, &mut npu, &mut cpu, &profile.name)
}

/// Published model shapes: the 7–8B models the replay compares, and the autoregressive models of
/// the validation set (`validation.rs`), whose published phone measurements the cost model is
/// checked against. Shapes are the models' HF `config.json` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ModelPreset {
    /// LLaDA-8B-Instruct (dllm-decoding.md §1).
    Llada8B,
    /// Dream-v0-7B (dllm-decoding.md §1).
    Dream7B,
    /// Llama-3-8B (hidden 4096, 32 layers, 32/8 heads, FFN 14336, vocab 128256); Llama-3.1-8B has
    /// the same shapes.
    Llama3_8B,
    /// Llama-3.2-1B (hidden 2048, 16 layers, 32/8 heads of 64, FFN 8192, vocab 128256, tied).
    Llama32_1B,
    /// Llama-3.2-3B (hidden 3072, 28 layers, 24/8 heads of 128, FFN 8192, vocab 128256, tied).
    Llama32_3B,
    /// Llama-2-7B (hidden 4096, 32 layers, 32/32 heads, FFN 11008, vocab 32000).
    Llama2_7B,
    /// Mistral-7B-v0.3 (hidden 4096, 32 layers, 32/8 heads, FFN 14336, vocab 32768).
    Mistral7B,
    /// Qwen2-7B and Qwen2.5-7B (hidden 3584, 28 layers, 28/4 heads, FFN 18944, vocab 152064, q/k/v bias).
    Qwen2_7B,
    /// Qwen3-1.7B (hidden 2048, 28 layers, 16/8 heads of 128, FFN 6144, vocab 151936, tied, QK norm).
    Qwen3_1_7B,
    /// Phi-3.5-mini (hidden 3072, 32 layers, 32/32 heads of 96, FFN 8192, vocab 32064).
    Phi35Mini,
    /// Baichuan2-7B (hidden 4096, 32 layers, 32/32 heads, FFN 11008, vocab 125696).
    Baichuan2_7B,
    /// Granite-3.1-8B (hidden 4096, 40 layers, 32/8 heads, FFN 12800, vocab 49155).
    Granite31_8B,
}

impl ModelPreset {
    /// The presets the replay matrix covers.
    pub const ALL: [ModelPreset; 3] = [ModelPreset::Llada8B, ModelPreset::Dream7B, ModelPreset::Llama3_8B];

    /// Every preset, replay and validation models.
    pub const EVERY: [ModelPreset; 12] = [
        ModelPreset::Llada8B,
        ModelPreset::Dream7B,
        ModelPreset::Llama3_8B,
        ModelPreset::Llama32_1B,
        ModelPreset::Llama32_3B,
        ModelPreset::Llama2_7B,
        ModelPreset::Mistral7B,
        ModelPreset::Qwen2_7B,
        ModelPreset::Qwen3_1_7B,
        ModelPreset::Phi35Mini,
        ModelPreset::Baichuan2_7B,
        ModelPreset::Granite31_8B,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            ModelPreset::Llada8B => "LLaDA-8B",
            ModelPreset::Dream7B => "Dream-7B",
            ModelPreset::Llama3_8B => "Llama-3-8B",
            ModelPreset::Llama32_1B => "Llama-3.2-1B",
            ModelPreset::Llama32_3B => "Llama-3.2-3B",
            ModelPreset::Llama2_7B => "Llama-2-7B",
            ModelPreset::Mistral7B => "Mistral-7B",
            ModelPreset::Qwen2_7B => "Qwen2-7B",
            ModelPreset::Qwen3_1_7B => "Qwen3-1.7B",
            ModelPreset::Phi35Mini => "Phi-3.5-mini",
            ModelPreset::Baichuan2_7B => "Baichuan2-7B",
            ModelPreset::Granite31_8B => "Granite-3.1-8B",
        }
    }

    /// The key data files use (`llama-3-8b`, `qwen2-7b`, ...).
    pub fn key(self) -> &'static str {
        match self {
            ModelPreset::Llada8B => "llada-8b",
            ModelPreset::Dream7B => "dream-7b",
            ModelPreset::Llama3_8B => "llama-3-8b",
            ModelPreset::Llama32_1B => "llama-3.2-1b",
            ModelPreset::Llama32_3B => "llama-3.2-3b",
            ModelPreset::Llama2_7B => "llama-2-7b",
            ModelPreset::Mistral7B => "mistral-7b",
            ModelPreset::Qwen2_7B => "qwen2-7b",
            ModelPreset::Qwen3_1_7B => "qwen3-1.7b",
            ModelPreset::Phi35Mini => "phi-3.5-mini",
            ModelPreset::Baichuan2_7B => "baichuan2-7b",
            ModelPreset::Granite31_8B => "granite-3.1-8b",
        }
    }

    /// The preset with key `key`.
    pub fn from_key(key: &str) -> Option<ModelPreset> {
        ModelPreset::EVERY.into_iter().find(|p| p.key() == key)
    }

    /// Parameters of the matrices (embedding and LM head counted once each; tied heads once).
    pub fn parameters(self) -> u64 {
        let c = self.config();
        let (h, q, kv) = (c.hidden as u64, c.q_dim() as u64, c.kv_dim() as u64);
        let per_layer = h * q + 2 * h * kv + q * h + 3 * h * c.ffn as u64;
        let emb = c.vocab as u64 * h * if c.tie_embeddings { 1 } else { 2 };
        c.n_layers as u64 * per_layer + emb
    }

    /// The layer shapes as a [`ModelConfig`].
    pub fn config(self) -> ModelConfig {
        let base = |arch, hidden, n_layers, n_heads, n_kv_heads, ffn, vocab, theta: f32, eps| ModelConfig {
            arch,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim: hidden / n_heads,
            ffn,
            vocab,
            max_seq: 8192,
            rope_theta: theta,
            rope_style: RopeStyle::RotateHalf,
            rotary_dim: hidden / n_heads,
            rms_eps: eps,
            qkv_bias: false,
            qk_norm: false,
            moe: None,
            causal: !arch_is_diffusion(arch),
            shift_logits: false,
            tie_embeddings: false,
            mask_token_id: arch_mask(arch),
            bos_token_id: None,
            eos_token_id: None,
            eot_token_id: None,
            pad_token_id: None,
        };
        let llama = Architecture::Llama;
        match self {
            ModelPreset::Llada8B => {
                let mut c = base(Architecture::Llada, 4096, 32, 32, 32, 12288, 126464, 500000.0, 1e-5);
                c.max_seq = 4096;
                c
            }
            ModelPreset::Dream7B => {
                let mut c = base(Architecture::Dream, 3584, 28, 28, 4, 18944, 152064, 1e6, 1e-6);
                c.qkv_bias = true;
                c.shift_logits = true;
                c
            }
            ModelPreset::Llama3_8B => base(llama, 4096, 32, 32, 8, 14336, 128256, 500000.0, 1e-5),
            ModelPreset::Llama32_1B => {
                let mut c = base(llama, 2048, 16, 32, 8, 8192, 128256, 500000.0, 1e-5);
                c.tie_embeddings = true;
                c
            }
            ModelPreset::Llama32_3B => {
                let mut c = base(llama, 3072, 28, 24, 8, 8192, 128256, 500000.0, 1e-5);
                c.tie_embeddings = true;
                c
            }
            ModelPreset::Llama2_7B => base(llama, 4096, 32, 32, 32, 11008, 32000, 10000.0, 1e-5),
            ModelPreset::Mistral7B => base(llama, 4096, 32, 32, 8, 14336, 32768, 1e6, 1e-5),
            ModelPreset::Qwen2_7B => {
                let mut c = base(Architecture::Qwen2, 3584, 28, 28, 4, 18944, 152064, 1e6, 1e-6);
                c.qkv_bias = true;
                c
            }
            ModelPreset::Qwen3_1_7B => {
                let mut c = base(Architecture::Qwen3, 2048, 28, 16, 8, 6144, 151936, 1e6, 1e-6);
                c.qk_norm = true;
                c.tie_embeddings = true;
                c
            }
            ModelPreset::Phi35Mini => base(llama, 3072, 32, 32, 32, 8192, 32064, 10000.0, 1e-5),
            ModelPreset::Baichuan2_7B => base(llama, 4096, 32, 32, 32, 11008, 125696, 10000.0, 1e-6),
            ModelPreset::Granite31_8B => base(llama, 4096, 40, 32, 8, 12800, 49155, 1e7, 1e-5),
        }
    }
}

fn arch_is_diffusion(a: Architecture) -> bool {
    a.is_diffusion()
}

fn arch_mask(a: Architecture) -> Option<u32> {
    a.published_mask().map(|(id, _)| id)
}

/// Totals of one replay.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReplayResult {
    /// Model shape.
    pub model: String,
    /// Device profile.
    pub device: String,
    /// Execution setup ("npu swap-optimized", "cpu x8", ...).
    pub setup: String,
    /// Forwards replayed.
    pub steps: usize,
    /// Answer tokens.
    pub answer_tokens: usize,
    /// Simulated latency, seconds.
    pub simulated_latency_s: f64,
    /// Simulated energy, joules.
    pub simulated_energy_j: f64,
    /// Answer tokens per simulated second (simulated throughput).
    pub tokens_per_s: f64,
    /// Tokens forwarded.
    pub tokens: usize,
    /// Tokens after bucket padding.
    pub padded_tokens: usize,
    /// Largest NPU-visible footprint, bytes.
    pub peak_resident_bytes: u64,
    /// Bytes swapped in over the run.
    pub streamed_bytes: u64,
    /// Map calls over the run.
    pub map_calls: usize,
    /// Graph launches over the run.
    pub launches: usize,
    /// Transfer time hidden behind compute, seconds.
    pub overlap_s: f64,
    /// Busy time of the DMA engine (staging copies), seconds.
    pub dma_busy_s: f64,
    /// Busy time of the compute unit, seconds.
    pub compute_busy_s: f64,
    /// Busy time of the host core driving the device (launches, map calls), seconds.
    pub host_busy_s: f64,
    /// NPU-visible budget the memory plan was held to, bytes (`u64::MAX` on the CPU).
    pub budget_bytes: u64,
}

/// Replays `trace` on `sim` (whose model and device name the result).
pub fn replay(trace: &DecodeTrace, sim: &mut StepSimulator, device: &str, setup: &str) -> Result<ReplayResult> {
    let mut r = ReplayResult {
        model: model_name(sim.config()),
        device: device.to_owned(),
        setup: setup.to_owned(),
        steps: trace.steps.len(),
        answer_tokens: trace.answer_tokens,
        simulated_latency_s: 0.0,
        simulated_energy_j: 0.0,
        tokens_per_s: 0.0,
        tokens: 0,
        padded_tokens: 0,
        peak_resident_bytes: 0,
        streamed_bytes: 0,
        map_calls: 0,
        launches: 0,
        overlap_s: 0.0,
        dma_busy_s: 0.0,
        compute_busy_s: 0.0,
        host_busy_s: 0.0,
        budget_bytes: sim.options().budget_bytes,
    };
    for s in &trace.steps {
        if s.tokens == 0 {
            continue;
        }
        let step = sim.simulate(StepShape { tokens: s.tokens, context: s.context, logit_rows: s.logit_rows })?;
        r.simulated_latency_s += step.time_s;
        r.simulated_energy_j += step.energy_j;
        r.tokens += step.tokens;
        r.padded_tokens += step.padded_tokens;
        for l in &step.launches {
            r.peak_resident_bytes = r.peak_resident_bytes.max(l.peak_resident_bytes);
            r.streamed_bytes += l.streamed_bytes;
            r.map_calls += l.map_calls;
            r.launches += l.launches;
            r.overlap_s += l.overlap_s;
            r.dma_busy_s += l.dma_busy_s;
            r.compute_busy_s += l.compute_busy_s;
            r.host_busy_s += l.host_busy_s;
        }
    }
    r.tokens_per_s = if r.simulated_latency_s > 0.0 { r.answer_tokens as f64 / r.simulated_latency_s } else { 0.0 };
    Ok(r)
}

fn model_name(cfg: &ModelConfig) -> String {
    ModelPreset::EVERY
        .iter()
        .find(|p| p.config() == *cfg)
        .map_or_else(|| format!("{:?} h{} L{}", cfg.arch, cfg.hidden, cfg.n_layers), |p| p.name().to_owned())
}

/// NPU replay setup: naive offload (per-use map/unmap, LM head over the whole bucket) or the
/// swap-optimized memory runtime (packed activations, double-buffered staging, logits only for the
/// requested rows).
pub fn npu_config(placement: PlacementPolicy) -> VnpuConfig {
    let logits = match placement {
        PlacementPolicy::Naive => LogitRows::BucketRows,
        _ => LogitRows::RequestedRows,
    };
    VnpuConfig { placement, logits, record_trace: false, ..VnpuConfig::default() }
}

/// The phone's CPU running the model (Q4_0 weights, int8 dot products, no shape or memory limits).
pub fn cpu_simulator(cfg: &ModelConfig, profile: &DeviceProfile, cores: usize) -> StepSimulator {
    let precision = Precision::cpu_q4_0();
    let target = ComputeTarget::cpu(profile, cores, &precision);
    let options = SimOptions {
        precision,
        placement: PlacementPolicy::SwapOptimized,
        logits: LogitRows::RequestedRows,
        layers_per_graph: cfg.n_layers,
        budget_bytes: u64::MAX,
        buckets: ShapeBuckets::dynamic(),
    };
    StepSimulator::new(cfg.clone(), target, options, LanePower::from_profile(profile))
}

/// A simulator for autoregressive decoding of `cfg` on `profile`'s NPU as the validated published
/// deployments run it (`validation.rs`): W4A16, the fewest whole sessions that hold the model
/// without streaming (at the trace's largest forward), the product's other defaults. Returns the
/// simulator and the sessions.
pub fn ar_npu_simulator(cfg: &ModelConfig, profile: &DeviceProfile, trace: &DecodeTrace) -> Result<(StepSimulator, usize)> {
    let npu = profile.npu.as_ref().ok_or_else(|| crate::error::EngineError::Backend {
        backend: "vnpu".into(),
        reason: format!("profile `{}` has no NPU", profile.name),
    })?;
    let base = npu_config(PlacementPolicy::SwapOptimized);
    let widest = StepShape {
        tokens: trace.steps.iter().map(|s| s.tokens).max().unwrap_or(1),
        context: trace.steps.iter().map(|s| s.context).max().unwrap_or(1),
        logit_rows: 1,
    };
    let sessions = super::validation::sessions_needed(cfg, widest, profile, &base.precision);
    let config = VnpuConfig { budget_bytes: Some(sessions as u64 * npu.session_va_bytes.value), ..base };
    Ok((simulator_for(cfg, profile, &config)?, sessions))
}

/// One memory-runtime variant replayed (all **simulated**).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PolicyReplay {
    /// The variant.
    pub policy: PlacementPolicy,
    /// What it switches off.
    pub label: String,
    /// The replay.
    pub result: ReplayResult,
    /// Latency over the full runtime's.
    pub slowdown_vs_full: f64,
}

/// `trace` at `preset`'s shapes on `device`'s NPU with the product's one-session budget, for the
/// full memory runtime and each part switched off ([`PlacementPolicy::ABLATIONS`]); logits for
/// the requested rows in every variant, so only the memory runtime differs.
pub fn memory_runtime_ablation(trace: &DecodeTrace, preset: ModelPreset, device: &str) -> Result<Vec<PolicyReplay>> {
    let profile = DeviceProfile::builtin(device)?;
    let cfg = preset.config();
    let mut out: Vec<PolicyReplay> = Vec::new();
    for policy in PlacementPolicy::ABLATIONS {
        let config = VnpuConfig { placement: policy, logits: LogitRows::RequestedRows, record_trace: false, ..VnpuConfig::default() };
        let r = replay(trace, &mut simulator_for(&cfg, &profile, &config)?, &profile.name, policy.label())?;
        let full = out.first().map_or(r.simulated_latency_s, |f| f.result.simulated_latency_s);
        out.push(PolicyReplay { policy, label: policy.label().to_owned(), slowdown_vs_full: r.simulated_latency_s / full, result: r });
    }
    Ok(out)
}
