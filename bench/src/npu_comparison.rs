//! The phone comparison of the `npu` suite: one diffusion decode workload replayed on the phone's
//! CPU, with naive NPU offload, with the swap-optimized memory runtime, and an autoregressive model
//! on the NPU, all **simulated** on the virtual NPU's cost model.

use unmask_engine::backend::vnpu::profile::DeviceProfile;
use unmask_engine::backend::vnpu::replay::{
    ar_npu_simulator, cpu_simulator, npu_config, replay, DecodeTrace, ModelPreset, ReplayResult,
};
use unmask_engine::backend::vnpu::simulator_for;
use unmask_engine::memory::PlacementPolicy;
use unmask_engine::Result;

/// One decode workload of a diffusion model against its baselines on one device, all **simulated**.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceComparison {
    /// Device profile.
    pub device: String,
    /// (a) the diffusion model on the phone's CPU (all cores), the same forwards (prefix-KV reuse
    /// included).
    pub cpu_prefix_kv: ReplayResult,
    /// (b) naive NPU offload (one session, map/unmap per use, logits over the whole bucket).
    pub npu_naive: ReplayResult,
    /// (c) the NPU with the swap-optimized memory runtime (one session; the product's setting).
    pub npu_memory_runtime: ReplayResult,
    /// (d) the autoregressive model on the NPU, deployed as the validated published runs are.
    pub ar_npu: ReplayResult,
    /// NPU sessions (d) uses.
    pub ar_sessions: usize,
    /// (a) / (c) latency.
    pub speedup_vs_cpu: f64,
    /// (d) / (c) latency.
    pub speedup_vs_ar: f64,
    /// (b) / (c) latency.
    pub speedup_vs_naive: f64,
}

/// Compares `dllm` (forwards of a diffusion decode, replayed at `dllm_preset`'s shapes) with the
/// same forwards on the phone CPU, with naive NPU offload, and with `ar` (autoregressive decoding of
/// the same prompts and answer lengths at `ar_preset`'s shapes) on `device`.
pub fn compare_trace(
    dllm: &DecodeTrace,
    ar: &DecodeTrace,
    dllm_preset: ModelPreset,
    ar_preset: ModelPreset,
    device: &str,
) -> Result<TraceComparison> {
    let profile = DeviceProfile::builtin(device)?;
    let cfg = dllm_preset.config();
    let cores = profile.cpu.total_cores();
    let a = replay(dllm, &mut cpu_simulator(&cfg, &profile, cores), &profile.name, &format!("cpu x{cores} prefix-KV"))?;
    let b = replay(
        dllm,
        &mut simulator_for(&cfg, &profile, &npu_config(PlacementPolicy::Naive))?,
        &profile.name,
        "npu naive offload",
    )?;
    let c = replay(
        dllm,
        &mut simulator_for(&cfg, &profile, &npu_config(PlacementPolicy::SwapOptimized))?,
        &profile.name,
        "npu memory runtime",
    )?;
    let (mut ar_sim, ar_sessions) = ar_npu_simulator(&ar_preset.config(), &profile, ar)?;
    let d = replay(ar, &mut ar_sim, &profile.name, &format!("npu AR, {ar_sessions} session(s)"))?;
    Ok(TraceComparison {
        device: profile.name.clone(),
        speedup_vs_cpu: a.simulated_latency_s / c.simulated_latency_s,
        speedup_vs_ar: d.simulated_latency_s / c.simulated_latency_s,
        speedup_vs_naive: b.simulated_latency_s / c.simulated_latency_s,
        cpu_prefix_kv: a,
        npu_naive: b,
        npu_memory_runtime: c,
        ar_npu: d,
        ar_sessions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_is_positive_and_orders_the_setups() {
        // A 100-token prompt (not a bucket size, so naive offload pays padding), 128-token answers.
        let dllm = DecodeTrace::block_decoding(100, 128, 32, 32);
        let ar = DecodeTrace::autoregressive(100, 128);
        let c = compare_trace(&dllm, &ar, ModelPreset::Llada8B, ModelPreset::Llama3_8B, "sm8750").unwrap();
        for x in [&c.cpu_prefix_kv, &c.npu_naive, &c.npu_memory_runtime, &c.ar_npu] {
            assert!(
                x.simulated_latency_s > 0.0 && x.simulated_latency_s.is_finite() && x.simulated_energy_j > 0.0,
                "{x:?}"
            );
        }
        assert!(c.npu_memory_runtime.simulated_latency_s <= c.npu_naive.simulated_latency_s, "{c:?}");
        assert!(c.npu_memory_runtime.simulated_latency_s < c.cpu_prefix_kv.simulated_latency_s, "{c:?}");
        assert!(c.npu_naive.map_calls > 0 && c.npu_memory_runtime.map_calls == 0);
        assert!(c.npu_naive.padded_tokens > c.npu_naive.tokens, "the 100-token prompt pads to 128");
        assert!(c.ar_sessions >= 1);
        let ratio = c.cpu_prefix_kv.simulated_latency_s / c.npu_memory_runtime.simulated_latency_s;
        assert!((c.speedup_vs_cpu - ratio).abs() < 1e-12);
    }
}
