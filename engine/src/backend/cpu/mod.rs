//! The multi-threaded CPU backend: runs the engine's own kernels directly.

use std::sync::Arc;
use std::time::Instant;

use super::{Backend, CpuPathExecutor, CpuPathHost, ForwardStats};
use crate::error::Result;
use crate::model::{BatchItem, ForwardOutput, ForwardRequest, KvCache, ModelConfig, Transformer};

/// Executes forwards on this machine's cores.
pub struct CpuBackend {
    model: Arc<Transformer>,
}

impl CpuBackend {
    /// Wraps a loaded transformer (shared, so several backends can run the same weights).
    pub fn new(model: Arc<Transformer>) -> Self {
        crate::threads::init(0);
        CpuBackend { model }
    }
    /// The model this backend runs.
    pub fn model(&self) -> &Arc<Transformer> {
        &self.model
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("cpu:{}t", crate::threads::count())
    }
    fn config(&self) -> &ModelConfig {
        &self.model.config
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        self.model.new_cache(capacity)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let t0 = Instant::now();
        let out = self.model.forward(req, cache)?;
        let stats = ForwardStats {
            wall_s: t0.elapsed().as_secs_f64(),
            simulated_s: None,
            energy_j: None,
            tokens: req.tokens.len(),
            padded_tokens: req.tokens.len(),
            flops: out.flops,
        };
        Ok((out, stats))
    }
    fn forward_batch(&mut self, items: &mut [BatchItem<'_>]) -> Vec<Result<(ForwardOutput, ForwardStats)>> {
        let t0 = Instant::now();
        let outs = self.model.forward_batch(items);
        // Each sequence waited for the whole packed forward: that is its wall time.
        let wall_s = t0.elapsed().as_secs_f64();
        outs.into_iter()
            .zip(items.iter())
            .map(|(out, it)| {
                out.map(|out| {
                    let n = it.req.tokens.len();
                    let stats = ForwardStats {
                        wall_s,
                        simulated_s: None,
                        energy_j: None,
                        tokens: n,
                        padded_tokens: n,
                        flops: out.flops,
                    };
                    (out, stats)
                })
            })
            .collect()
    }
    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        Some(self)
    }
}

impl CpuPathHost for CpuBackend {
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>> {
        // Shares the weights (Arc); the CPU path needs only its own call stack and buffers.
        Some(Box::new(CpuBackend { model: Arc::clone(&self.model) }))
    }
}

impl CpuPathExecutor for CpuBackend {}
