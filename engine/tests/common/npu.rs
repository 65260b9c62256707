//! Shared by the NPU-aware decoding tests: the tiny golden LLaDA (random weights, vocab 256,
//! mask 255, eos 254) behind a fake static-shape backend that records every forward.

#![allow(dead_code)]

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::{Backend, CostProfile, CpuPathExecutor, CpuPathHost, ForwardStats};
use unmask_engine::decode::dual_path::{self, DualPathStats};
use unmask_engine::decode::{CancelFlag, Canvas, DecodeOutput, DecodeSettings, StepFrame};
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::model::{
    load_transformer, ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig, Transformer,
};
use unmask_engine::tensor::TensorSource;
use unmask_engine::Result;

pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name)
}

pub fn model(name: &str) -> Arc<Transformer> {
    Arc::new(load_transformer(&golden(name)).expect("load tiny model").0)
}

pub fn prompt(name: &str, i: usize) -> Vec<u32> {
    let g = SafetensorsSource::open(&golden(name).join("golden.safetensors")).unwrap();
    let t = g.get("input_ids").unwrap();
    let seq = t.shape[1];
    t.to_i64_vec().unwrap()[i * seq..(i + 1) * seq].iter().map(|&x| x as u32).collect()
}

/// One recorded forward.
#[derive(Debug, Clone)]
pub struct Fwd {
    pub thread: ThreadId,
    pub start: usize,
    pub len: usize,
    /// Absolute positions of the requested logits rows.
    pub rows: Vec<usize>,
    pub kv: KvMode,
    pub began: Instant,
    pub ended: Instant,
}

/// A CPU backend dressed as a static-shape accelerator: optional cost profile, optional
/// revision twin (sharing the log), optional artificial latency so overlaps are observable.
pub struct FakeNpu {
    inner: CpuBackend,
    model: Arc<Transformer>,
    pub profile: Option<CostProfile>,
    pub log: Arc<Mutex<Vec<Fwd>>>,
    pub delay: Duration,
    /// Delay of the CPU-path twin's forwards (`None`: `delay`).
    pub cpu_delay: Option<Duration>,
    pub twin: bool,
}

impl FakeNpu {
    pub fn new(model: Arc<Transformer>, buckets: Option<Vec<usize>>) -> Self {
        FakeNpu {
            inner: CpuBackend::new(Arc::clone(&model)),
            model,
            profile: buckets.map(|b| CostProfile { token_buckets: b, launch_overhead_s: 1e-3 }),
            log: Arc::default(),
            delay: Duration::ZERO,
            cpu_delay: None,
            twin: true,
        }
    }
    pub fn forwards(&self) -> Vec<Fwd> {
        self.log.lock().unwrap().clone()
    }
}

impl Backend for FakeNpu {
    fn name(&self) -> String {
        "fake-npu".into()
    }
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        self.inner.new_cache(capacity)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let began = Instant::now();
        std::thread::sleep(self.delay);
        let r = self.inner.forward(req, cache)?;
        let start = req.positions.first().copied().unwrap_or(0);
        self.log.lock().unwrap().push(Fwd {
            thread: std::thread::current().id(),
            start,
            len: req.tokens.len(),
            rows: req.logits_rows.iter().map(|&r| start + r).collect(),
            kv: req.kv,
            began,
            ended: Instant::now(),
        });
        Ok(r)
    }
    fn cost_profile(&self) -> Option<CostProfile> {
        self.profile.clone()
    }
    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        Some(self)
    }
}

impl CpuPathHost for FakeNpu {
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>> {
        self.twin.then(|| {
            Box::new(FakeNpu {
                inner: CpuBackend::new(Arc::clone(&self.model)),
                model: Arc::clone(&self.model),
                profile: None,
                log: Arc::clone(&self.log),
                delay: self.cpu_delay.unwrap_or(self.delay),
                cpu_delay: None,
                twin: false,
            }) as Box<dyn CpuPathExecutor>
        })
    }
}

impl CpuPathExecutor for FakeNpu {}

/// Runs the NPU-aware loop and collects its frames.
pub fn run_npu(be: &mut dyn Backend, p: &[u32], s: &DecodeSettings) -> (DecodeOutput, DualPathStats, Vec<StepFrame>) {
    let mut frames = Vec::new();
    let mut sink = |f: &StepFrame| {
        frames.push(f.clone());
        ControlFlow::Continue(())
    };
    let (out, stats) = dual_path::run(be, p, s, &CancelFlag::new(), &mut sink).expect("decode");
    (out, stats, frames)
}

/// Canvas states before each step, rebuilt by replaying the frames.
pub fn states_before_steps(p: &[u32], s: &DecodeSettings, mask: u32, frames: &[StepFrame]) -> Vec<Canvas> {
    let mut canvas = Canvas::new(p, s.gen_length, mask);
    let mut out = Vec::new();
    for f in frames {
        out.push(canvas.clone());
        for c in &f.changes {
            if !c.speculative {
                canvas.apply(c, f.step);
            }
        }
    }
    out
}
