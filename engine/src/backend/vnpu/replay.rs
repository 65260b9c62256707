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

/// Published 7–8B model shapes for replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ModelPreset {
    /// LLaDA-8B-Instruct (dllm-decoding.md §1).
    Llada8B,
    /// Dream-v0-7B (dllm-decoding.md §1).
    Dream7B,
    /// Llama-3-8B (hidden 4096, 32 layers, 32/8 heads, FFN 14336, vocab 128256).
    Llama3_8B,
}

impl ModelPreset {
    /// All presets.
    pub const ALL: [ModelPreset; 3] = [ModelPreset::Llada8B, ModelPreset::Dream7B, ModelPreset::Llama3_8B];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            ModelPreset::Llada8B => "LLaDA-8B",
            ModelPreset::Dream7B => "Dream-7B",
            ModelPreset::Llama3_8B => "Llama-3-8B",
        }
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
            ModelPreset::Llama3_8B => base(Architecture::Llama, 4096, 32, 32, 8, 14336, 128256, 500000.0, 1e-5),
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
        }
    }
    r.tokens_per_s = if r.simulated_latency_s > 0.0 { r.answer_tokens as f64 / r.simulated_latency_s } else { 0.0 };
    Ok(r)
}

fn model_name(cfg: &ModelConfig) -> String {
    ModelPreset::ALL
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
        PlacementPolicy::SwapOptimized => LogitRows::RequestedRows,
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

/// `trace` replayed with every preset on every built-in NPU profile (swap-optimized runtime) and on
/// each profile's CPU.
pub fn replay_matrix(trace: &DecodeTrace) -> Result<Vec<ReplayResult>> {
    let mut out = Vec::new();
    for name in DeviceProfile::list_builtin() {
        let profile = DeviceProfile::builtin(name)?;
        for preset in ModelPreset::ALL {
            let cfg = preset.config();
            if profile.has_npu() {
                let mut sim = simulator_for(&cfg, &profile, &npu_config(PlacementPolicy::SwapOptimized))?;
                out.push(replay(trace, &mut sim, name, "npu swap-optimized")?);
            }
            let cores = profile.cpu.total_cores();
            let mut cpu = cpu_simulator(&cfg, &profile, cores);
            out.push(replay(trace, &mut cpu, name, &format!("cpu x{cores}"))?);
        }
    }
    Ok(out)
}

/// Settings of the LLaDA-8B comparison.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ComparisonSettings {
    /// Device profile.
    pub device: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Block length of block decoding.
    pub block: usize,
    /// Denoising steps per block (block / steps = tokens committed per step).
    pub steps_per_block: usize,
}

impl Default for ComparisonSettings {
    /// SM8750, a 100-token prompt (not a bucket size, so prefill pays padding), block 32 and the LLaDA
    /// reference schedule of one token per step (steps = gen_length).
    fn default() -> Self {
        ComparisonSettings { device: "sm8750".into(), prompt_tokens: 100, block: 32, steps_per_block: 32 }
    }
}

/// One answer length of the comparison, all **simulated**.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ComparisonRow {
    /// Answer tokens.
    pub answer_tokens: usize,
    /// (a) LLaDA-8B on the phone's CPU, block decoding with prefix-KV reuse.
    pub cpu_prefix_kv: ReplayResult,
    /// (b) LLaDA-8B naive NPU offload.
    pub npu_naive: ReplayResult,
    /// (c) LLaDA-8B on the NPU with the swap-optimized memory runtime.
    pub npu_memory_runtime: ReplayResult,
    /// (d) Llama-3-8B autoregressive on the NPU with the memory runtime.
    pub llama3_ar_npu: ReplayResult,
    /// (a) / (b) latency.
    pub speedup_naive_vs_cpu: f64,
    /// (a) / (c) latency.
    pub speedup_runtime_vs_cpu: f64,
    /// (b) / (c) latency.
    pub speedup_runtime_vs_naive: f64,
    /// (d) / (c) latency.
    pub speedup_runtime_vs_ar: f64,
}

/// The comparison for LLaDA-8B shapes at each answer length.
pub fn llada_comparison(settings: &ComparisonSettings, answer_lengths: &[usize]) -> Result<Vec<ComparisonRow>> {
    let profile = DeviceProfile::builtin(&settings.device)?;
    let llada = ModelPreset::Llada8B.config();
    let llama = ModelPreset::Llama3_8B.config();
    let cores = profile.cpu.total_cores();
    let mut rows = Vec::new();
    for &answer in answer_lengths {
        let dllm =
            DecodeTrace::block_decoding(settings.prompt_tokens, answer, settings.block, settings.steps_per_block);
        let ar = DecodeTrace::autoregressive(settings.prompt_tokens, answer);
        let a = replay(
            &dllm,
            &mut cpu_simulator(&llada, &profile, cores),
            &profile.name,
            &format!("cpu x{cores} prefix-KV"),
        )?;
        let b = replay(
            &dllm,
            &mut simulator_for(&llada, &profile, &npu_config(PlacementPolicy::Naive))?,
            &profile.name,
            "npu naive offload",
        )?;
        let c = replay(
            &dllm,
            &mut simulator_for(&llada, &profile, &npu_config(PlacementPolicy::SwapOptimized))?,
            &profile.name,
            "npu memory runtime",
        )?;
        let d = replay(
            &ar,
            &mut simulator_for(&llama, &profile, &npu_config(PlacementPolicy::SwapOptimized))?,
            &profile.name,
            "npu memory runtime, AR",
        )?;
        rows.push(ComparisonRow {
            answer_tokens: answer,
            speedup_naive_vs_cpu: a.simulated_latency_s / b.simulated_latency_s,
            speedup_runtime_vs_cpu: a.simulated_latency_s / c.simulated_latency_s,
            speedup_runtime_vs_naive: b.simulated_latency_s / c.simulated_latency_s,
            speedup_runtime_vs_ar: d.simulated_latency_s / c.simulated_latency_s,
            cpu_prefix_kv: a,
            npu_naive: b,
            npu_memory_runtime: c,
            llama3_ar_npu: d,
        });
    }
    Ok(rows)
}

/// The comparison the issue asks for: LLaDA-8B, 128/256/512-token answers, SM8750, default settings.
pub fn llada_sm8750_comparison() -> Result<Vec<ComparisonRow>> {
    llada_comparison(&ComparisonSettings::default(), &[128, 256, 512])
}
