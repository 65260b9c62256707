//! A [`Backend`] wrapper that records the shape of every forward of a decode run (tokens, attention
//! context, rows needing logits), split into the dense path and the CPU path of dual-path revision,
//! so that the run can be replayed with phone-scale layer shapes (`vnpu::replay::replay_dual_path`).

use std::sync::{Arc, Mutex, MutexGuard};

use super::vnpu::replay::{DecodeStepRecord, DualPathTrace};
use super::{Backend, CostProfile, CpuPathExecutor, CpuPathHost, ForwardStats};
use crate::error::Result;
use crate::model::{ForwardOutput, ForwardRequest, KvCache, ModelConfig};

#[derive(Debug, Default)]
struct LogInner {
    dense: Vec<DecodeStepRecord>,
    /// (index of the dense forward it ran next to, shape).
    revision: Vec<(usize, DecodeStepRecord)>,
}

/// The forwards recorded by a [`RecordingBackend`] and its revision executor (shared by both).
#[derive(Debug, Clone, Default)]
pub struct ForwardLog(Arc<Mutex<LogInner>>);

impl ForwardLog {
    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A poisoned log only means a recording thread panicked; its records are still valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Dense forwards so far.
    pub fn dense_forwards(&self) -> usize {
        self.lock().dense.len()
    }

    /// Takes the records so far as a trace (the log starts empty again).
    pub fn take_trace(&self, name: &str, answer_tokens: usize) -> DualPathTrace {
        let mut g = self.lock();
        DualPathTrace {
            name: name.to_owned(),
            dense: std::mem::take(&mut g.dense),
            revision: std::mem::take(&mut g.revision),
            answer_tokens,
        }
    }
}

/// Delegates every call to `inner` (the dense path) and appends each forward's shape to a
/// [`ForwardLog`]; its CPU-path executor, if any, is a [`RecordingCpuPath`] on the same log.
pub struct RecordingBackend {
    inner: Box<dyn Backend>,
    log: ForwardLog,
}

impl RecordingBackend {
    /// Wraps `inner` (the dense path).
    pub fn new(inner: Box<dyn Backend>) -> Self {
        RecordingBackend { inner, log: ForwardLog::default() }
    }

    /// The shared log.
    pub fn log(&self) -> ForwardLog {
        self.log.clone()
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }

    /// The wrapped backend, mutably.
    pub fn inner_mut(&mut self) -> &mut dyn Backend {
        self.inner.as_mut()
    }
}

/// The shape of one forward.
fn record_of(req: &ForwardRequest, out: &ForwardOutput) -> DecodeStepRecord {
    DecodeStepRecord { tokens: req.tokens.len(), context: out.context_len, logit_rows: req.logits_rows.len() }
}

impl Backend for RecordingBackend {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        self.inner.new_cache(capacity)
    }

    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let (out, stats) = self.inner.forward(req, cache)?;
        self.log.lock().dense.push(record_of(req, &out));
        Ok((out, stats))
    }

    fn cost_profile(&self) -> Option<CostProfile> {
        self.inner.cost_profile()
    }

    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        Some(self)
    }

    fn discard_timeline(&mut self) {
        self.inner.discard_timeline();
    }
}

impl CpuPathHost for RecordingBackend {
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>> {
        let inner = self.inner.cpu_path_host()?.cpu_path_executor()?;
        Some(Box::new(RecordingCpuPath { inner, log: self.log.clone(), pair: 0 }))
    }

    fn sync_cpu_path(&self) {
        if let Some(h) = self.inner.cpu_path_host() {
            h.sync_cpu_path();
        }
    }
}

/// The CPU-path executor of a [`RecordingBackend`]: records each forward with the index of the
/// dense forward its step pairs with.
pub struct RecordingCpuPath {
    inner: Box<dyn CpuPathExecutor>,
    log: ForwardLog,
    /// Index of the dense forward the current step pairs with.
    pair: usize,
}

impl Backend for RecordingCpuPath {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        self.inner.new_cache(capacity)
    }

    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let (out, stats) = self.inner.forward(req, cache)?;
        self.log.lock().revision.push((self.pair, record_of(req, &out)));
        Ok((out, stats))
    }

    fn cost_profile(&self) -> Option<CostProfile> {
        self.inner.cost_profile()
    }
}

impl CpuPathExecutor for RecordingCpuPath {
    fn begin_step(&mut self) {
        // The loop calls this just before the step's dense forward starts: that forward's index is
        // the number of dense forwards recorded so far.
        self.pair = self.log.dense_forwards();
        self.inner.begin_step();
    }
}
