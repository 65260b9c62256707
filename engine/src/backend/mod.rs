//! Execution backends. Decoding reaches them only through [`Backend`].

pub mod batch;
pub mod cpu;
pub mod qnn;
pub mod recorder;
pub mod revision;
pub mod vnpu;

use crate::error::Result;
use crate::model::{BatchItem, ForwardOutput, ForwardRequest, KvCache, ModelConfig};
pub use revision::{CpuPathExecutor, CpuPathHost};

/// Static shape buckets and launch cost a backend prefers (drives speculative window sizing).
#[derive(Debug, Clone, PartialEq)]
pub struct CostProfile {
    /// Token counts graphs are compiled for; a call pads up to the next bucket. Empty = dynamic.
    pub token_buckets: Vec<usize>,
    /// Fixed cost per forward launch, seconds.
    pub launch_overhead_s: f64,
}

/// What one forward cost, as the backend accounts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForwardStats {
    /// Measured wall time on this machine, seconds.
    pub wall_s: f64,
    /// Simulated device time, seconds (virtual NPU only).
    pub simulated_s: Option<f64>,
    /// Simulated energy, joules (virtual NPU only).
    pub energy_j: Option<f64>,
    /// Tokens in the block before padding.
    pub tokens: usize,
    /// Tokens after padding to the shape bucket.
    pub padded_tokens: usize,
    pub flops: f64,
}

/// The level of work decoding asks for: "run the layer stack on a block with this KV cache;
/// logits for these rows".
pub trait Backend: Send {
    /// Short name for logs and traces ("cpu", "vnpu:sm8750", ...).
    fn name(&self) -> String;
    /// The model's configuration.
    fn config(&self) -> &ModelConfig;
    /// A cache for `capacity` positions, in whatever layout the backend keeps.
    fn new_cache(&self, capacity: usize) -> KvCache;
    /// Runs one forward.
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)>;
    /// Runs the blocks of several independent decodes; each gets what [`Backend::forward`] would
    /// give it alone. The default runs them one after the other; a backend that can pack them
    /// into one forward (the CPU) overrides it.
    fn forward_batch(&mut self, items: &mut [BatchItem<'_>]) -> Vec<Result<(ForwardOutput, ForwardStats)>> {
        items.iter_mut().map(|it| self.forward(&it.req, it.cache.as_deref_mut())).collect()
    }
    /// Shape buckets and launch cost; `None` for dynamic-shape backends like the CPU.
    fn cost_profile(&self) -> Option<CostProfile> {
        None
    }
    /// The backend's support for the CPU path of dual-path revision; `None` = revision runs
    /// inline after the dense forward.
    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        None
    }
    /// The device cost model load-aware MoE residency places expert groups with; `None` when the
    /// backend has no NPU beside a CPU lane (every group then runs as a launch).
    fn moe_residency(&self) -> Option<std::sync::Arc<dyn crate::moe::ResidencyCostModel>> {
        None
    }
    /// MoE counters since the last call, for backends that run MoE layers themselves instead of
    /// through the transformer's forward (whose counters the run reads otherwise).
    fn take_moe_stats(&mut self) -> Option<crate::moe::MoeStats> {
        None
    }
    /// Drops the trace events recorded so far (backends that record a timeline); the simulated
    /// clock keeps running. Long-lived backends call it between runs so the trace stays one
    /// run long instead of growing with every forward ever made.
    fn discard_timeline(&mut self) {}
}
