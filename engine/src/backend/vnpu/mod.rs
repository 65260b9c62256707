//! The virtual NPU: a [`Backend`] that runs the real forward on this machine's CPU (outputs identical
//! to [`crate::backend::cpu::CpuBackend`]) while enforcing a phone NPU's rules (static shape buckets,
//! a bounded NPU-visible address space) and accounting the **simulated** time and energy the forward
//! would take on the device described by a [`DeviceProfile`].
//!
//! Every time this module reports as `simulated_*` is device time predicted by the cost model, not
//! measured; `wall_*` is measured here.

pub mod calibrate;
pub(crate) mod cost;
pub(crate) mod cpu_path;
pub(crate) mod moe_launches;
pub mod moe_prefill;
pub(crate) mod moe_residency;
pub mod pim;
pub mod profile;
pub mod replay;
pub(crate) mod sim;
pub mod spec_schedule;
pub mod validation;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::{Backend, CostProfile, CpuPathExecutor, CpuPathHost, ForwardStats};
use crate::error::Result;
use crate::memory::graph::{Precision, StepShape};
use crate::memory::plan::{MemoryPlan, PlacementPolicy};
use crate::memory::weight_stream::{forward_streamed, StagingPool, StreamPlan, StreamReport};
use crate::model::{ForwardOutput, ForwardRequest, KvCache, KvLayout, KvMode, ModelConfig, Transformer};
use crate::trace::{LanePower, Timeline, TraceEvent};

pub use cost::{op_cost, ComputeTarget, OpCost, ShapeBucket, ShapeBuckets};
pub use cpu_path::{CpuPath, CpuPathTotals, SharedLanes};
pub use profile::{Cited, CoreCluster, CpuSpec, DeviceProfile, MemorySpec, NpuSpec};
pub use sim::{LaunchSim, LogitRows, SimOptions, SimulatedStep, StepSimulator};

/// How the virtual NPU maps a model onto the device.
#[derive(Debug, Clone, PartialEq)]
pub struct VnpuConfig {
    /// Storage/compute formats on the device.
    pub precision: Precision,
    /// Memory placement policy.
    pub placement: PlacementPolicy,
    /// Which rows go through the LM head.
    pub logits: LogitRows,
    /// Layers per compiled graph (each graph is one launch).
    pub layers_per_graph: usize,
    /// NPU-visible budget; `None` = one session of the profile.
    pub budget_bytes: Option<u64>,
    /// Token buckets overriding the profile's.
    pub token_buckets: Option<Vec<usize>>,
    /// Context buckets overriding the profile's.
    pub context_buckets: Option<Vec<usize>>,
    /// Record per-operator events into the timeline.
    pub record_trace: bool,
    /// Layer shapes the simulator charges instead of the loaded model's (e.g. LLaDA-8B, to time a
    /// tiny model's decode at phone scale, CPU path included); the math stays the loaded model's,
    /// and the staging thread is off (its plan would be for the other shapes).
    pub timed_as: Option<ModelConfig>,
}

impl Default for VnpuConfig {
    fn default() -> Self {
        VnpuConfig {
            precision: Precision::npu_w4a16(),
            placement: PlacementPolicy::SwapOptimized,
            logits: LogitRows::RequestedRows,
            layers_per_graph: 1,
            budget_bytes: None,
            token_buckets: None,
            context_buckets: None,
            record_trace: true,
            timed_as: None,
        }
    }
}

impl VnpuConfig {
    /// The simulator options this config implies on `profile`.
    pub fn sim_options(&self, profile: &DeviceProfile) -> SimOptions {
        let base = ShapeBuckets::from_profile(profile);
        let buckets = ShapeBuckets::new(
            self.token_buckets.clone().unwrap_or(base.tokens),
            self.context_buckets.clone().unwrap_or(base.context),
        );
        let session = profile.npu.as_ref().map_or(u64::MAX, |n| n.session_va_bytes.value);
        SimOptions {
            precision: self.precision,
            placement: self.placement,
            logits: self.logits,
            layers_per_graph: self.layers_per_graph.max(1),
            budget_bytes: self.budget_bytes.unwrap_or(session),
            buckets,
        }
    }
}

/// A simulator for `cfg` on `profile`'s NPU (or, for CPU-only profiles, on all its CPU cores).
pub fn simulator_for(cfg: &ModelConfig, profile: &DeviceProfile, config: &VnpuConfig) -> Result<StepSimulator> {
    let target = if profile.has_npu() {
        ComputeTarget::npu(profile, &config.precision)?
    } else {
        ComputeTarget::cpu(profile, profile.cpu.total_cores(), &config.precision)
    };
    Ok(StepSimulator::new(cfg.clone(), target, config.sim_options(profile), LanePower::from_profile(profile)))
}

/// Totals over every forward run so far (simulated device time and energy, measured wall time).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct VnpuTotals {
    /// Forwards run.
    pub forwards: usize,
    /// Simulated device seconds.
    pub simulated_s: f64,
    /// Simulated joules.
    pub energy_j: f64,
    /// Measured wall seconds of the real forwards.
    pub wall_s: f64,
    /// Tokens asked for.
    pub tokens: usize,
    /// Tokens after bucket padding.
    pub padded_tokens: usize,
    /// Weight bytes really copied through the staging slots (measured, not simulated).
    pub staged_bytes: u64,
    /// Staging-slot fills.
    pub staged_remaps: usize,
    /// Measured seconds the staging thread spent copying.
    pub staging_copy_s: f64,
    /// Staging buffers allocated over all forwards (one-time growth of the fixed pool; later fills
    /// copy in place).
    pub staging_allocations: usize,
    /// Bytes of the fixed staging pool (two layer slots and a head slot).
    pub staging_pool_bytes: u64,
    /// Measured copy seconds that overlapped a layer's compute.
    pub staging_overlap_s: f64,
    /// The CPU path of dual-path revision (simulated on the profile's CPU cores).
    pub cpu_path: CpuPathTotals,
}

/// The virtual NPU backend.
pub struct VirtualNpu {
    model: Arc<Transformer>,
    profile: DeviceProfile,
    config: VnpuConfig,
    sim: StepSimulator,
    lanes: SharedLanes,
    totals: VnpuTotals,
    origin: Instant,
    stream_plans: HashMap<(ShapeBucket, usize), Arc<StreamPlan>>,
    last_stream: Option<StreamReport>,
    /// The fixed staging buffers the real forward streams through (made on first use).
    pool: Option<StagingPool>,
    /// Expert costs on this device (MoE padding rows, load-aware residency); `None` without an NPU.
    moe_costs: Option<moe_residency::ProfileResidency>,
}

impl VirtualNpu {
    /// Wraps a loaded transformer for simulation on `profile`.
    pub fn new(model: Arc<Transformer>, profile: DeviceProfile, config: VnpuConfig) -> Result<Self> {
        crate::threads::init(0);
        let sim = simulator_for(config.timed_as.as_ref().unwrap_or(&model.config), &profile, &config)?;
        let lanes = SharedLanes::new(profile.display_name.clone(), cpu_path::cpu_path_cores(&profile));
        let moe_costs = moe_residency::ProfileResidency::new(&profile, &config.precision)?;
        Ok(VirtualNpu {
            model,
            profile,
            config,
            sim,
            lanes,
            totals: VnpuTotals::default(),
            origin: Instant::now(),
            stream_plans: HashMap::new(),
            last_stream: None,
            pool: None,
            moe_costs,
        })
    }
    /// The device profile.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }
    /// The configuration.
    pub fn vnpu_config(&self) -> &VnpuConfig {
        &self.config
    }
    /// Shape buckets in force.
    pub fn shape_buckets(&self) -> &ShapeBuckets {
        &self.sim.options().buckets
    }
    /// A copy of the events recorded so far (simulated device time), the CPU path's tasks included.
    pub fn timeline(&self) -> Timeline {
        self.lanes.lock().timeline().clone()
    }
    /// Events and counter samples on the timeline so far (a cheap mark, no copy).
    pub fn timeline_len(&self) -> (usize, usize) {
        self.lanes.lock().timeline_len()
    }
    /// Totals over all forwards (the CPU path's in `cpu_path`).
    pub fn totals(&self) -> VnpuTotals {
        VnpuTotals { cpu_path: self.lanes.lock().cpu_path_totals(), ..self.totals }
    }
    /// What the last forward streamed through the staging slots (`None` when every weight it
    /// needed was resident).
    pub fn last_stream_report(&self) -> Option<&StreamReport> {
        self.last_stream.as_ref()
    }
    /// The weights a forward of this shape streams (from the memory plan of its first bucket).
    pub fn stream_plan(&mut self, shape: StepShape) -> Result<Arc<StreamPlan>> {
        let buckets = self.sim.options().buckets.fit(shape.tokens, shape.context)?;
        let b = buckets.first().copied().unwrap_or(ShapeBucket { tokens: shape.tokens, context: shape.context });
        let rows = match self.sim.options().logits {
            LogitRows::BucketRows => b.tokens,
            LogitRows::RequestedRows => shape.logit_rows.min(b.tokens),
        };
        if let Some(p) = self.stream_plans.get(&(b, rows)) {
            return Ok(Arc::clone(p));
        }
        let (graph, plan) = self.sim.plan_for(b, rows)?;
        let p = Arc::new(StreamPlan::from_memory_plan(&graph, &plan, self.model.config.n_layers));
        self.stream_plans.insert((b, rows), Arc::clone(&p));
        Ok(p)
    }
    /// The timeline as Chrome trace / Perfetto JSON.
    pub fn chrome_trace(&self) -> serde_json::Value {
        crate::trace::to_chrome_trace(self.lanes.lock().timeline(), &LanePower::from_profile(&self.profile))
    }
    /// The memory plan a forward of this shape would use.
    pub fn memory_plan(&self, tokens: usize, context: usize, logit_rows: usize) -> Result<MemoryPlan> {
        let b = self.sim.options().buckets.fit(tokens, context)?;
        let first = b.first().copied().unwrap_or(ShapeBucket { tokens, context });
        Ok(self.sim.plan_for(first, logit_rows)?.1)
    }
    /// One-off simulated start-up: power-up plus loading one cached context binary per graph and
    /// token bucket (compile time is offline and reported in the profile, not charged).
    pub fn simulated_startup_s(&self) -> f64 {
        let Some(n) = &self.profile.npu else { return 0.0 };
        let graphs = self.graphs_per_forward() * self.shape_buckets().tokens.len().max(1);
        n.power_up_s.value + graphs as f64 * n.graph_load_s.value
    }
    fn graphs_per_forward(&self) -> usize {
        self.sim.config().n_layers.div_ceil(self.sim.options().layers_per_graph) + 1
    }
    pub(crate) fn context_of(req: &ForwardRequest, cache: Option<&KvCache>) -> usize {
        let block: HashSet<usize> = req.positions.iter().copied().collect();
        let cached = match (cache, req.kv) {
            (Some(c), KvMode::Read | KvMode::ReadWrite) => {
                c.valid_positions().into_iter().filter(|p| !block.contains(p)).count()
            }
            _ => 0,
        };
        cached + req.tokens.len()
    }
    fn record(&mut self, step: &SimulatedStep, wall_start: f64, wall_s: f64, stream: Option<&StreamReport>) {
        let n_layers = self.model.config.n_layers;
        let record_ops = self.config.record_trace;
        let mut lanes = self.lanes.lock();
        // Starts after every earlier event, the CPU path's tasks of the previous step included.
        let t0 = lanes.begin_dense();
        let timeline = lanes.timeline_mut();
        let mut offset = 0.0;
        let lane = self.sim.target().lane;
        timeline.push(TraceEvent {
            lane,
            name: format!("forward {} tok (bucket {})", step.tokens, step.padded_tokens),
            category: TraceEvent::SUMMARY.into(),
            start_sim: t0,
            dur_sim: step.time_s,
            wall_start,
            wall_dur: wall_s,
            bytes: 0,
        });
        for (li, l) in step.launches.iter().enumerate() {
            // The real forward streams by the first launch's plan.
            let stream = stream.filter(|_| li == 0);
            timeline.push_counter("npu_visible_bytes", t0 + offset, l.peak_resident_bytes as f64);
            if record_ops {
                for e in &l.events {
                    let mut e = e.clone();
                    // Per-op wall time is not measured (the real forward runs as one call), so
                    // operators carry none: only measured spans (the forward itself, the staging
                    // thread's copies) appear on the trace's measured-wall-time process.
                    e.wall_start = 0.0;
                    e.wall_dur = 0.0;
                    // Transfers were really performed by the staging thread: use its measured spans.
                    if let Some((start, dur)) = stream.and_then(|r| measured_copy(r, &l.events, &e, n_layers)) {
                        e.wall_start = wall_start + start;
                        e.wall_dur = dur;
                    }
                    e.start_sim += t0 + offset;
                    timeline.push(e);
                }
            }
            offset += l.time_s;
        }
    }
}

impl VirtualNpu {
    /// Puts a forward's MoE launches on the NPU lane right after its layer graphs and returns
    /// their energy: the NPU idles powered while a host core dispatches.
    fn record_moe_launches(&mut self, c: &moe_launches::MoeLaunchCharge) -> f64 {
        let mut lanes = self.lanes.lock();
        let t0 = lanes.end_sim();
        let timeline = lanes.timeline_mut();
        for e in &c.events {
            let mut e = e.clone();
            e.start_sim += t0;
            timeline.push(e);
        }
        let host_w = self.profile.cpu.clusters.first().map_or(0.0, |k| k.active_w_per_core.value);
        let npu_idle_w = self.profile.npu.as_ref().map_or(0.0, |n| n.idle_w.value);
        let npu_active_w = self.profile.npu.as_ref().map_or(0.0, |n| n.active_w.value);
        // Dispatch keeps a host core busy beside an idle NPU; padding rows are NPU compute; the CPU
        // lane is one more busy core for its own seconds.
        (c.time_s - c.npu_compute_s) * (host_w + npu_idle_w) + c.npu_compute_s * npu_active_w + c.cpu_lane_s * host_w
    }
}

impl Backend for VirtualNpu {
    fn name(&self) -> String {
        format!("vnpu:{}", self.profile.name)
    }
    fn discard_timeline(&mut self) {
        self.lanes.lock().discard_timeline();
    }
    fn config(&self) -> &ModelConfig {
        &self.model.config
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        // The NPU keeps K/V in 32×32 tiles; the CPU path reads and writes them in place.
        KvCache::with_layout(&self.model.config, capacity, KvLayout::Tiled)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let n = req.tokens.len();
        let shape = StepShape {
            tokens: n,
            context: Self::context_of(req, cache.as_deref()),
            logit_rows: req.logits_rows.len(),
        };
        // Check the device's rules before running: a shape without a graph or a plan that does not
        // fit the NPU-visible space fails here, as it would on the phone.
        let step = if n > 0 { Some(self.sim.simulate(shape)?) } else { None };
        let stream = if n > 0 && self.config.timed_as.is_none() {
            Some(self.stream_plan(shape)?).filter(|p| !p.is_empty())
        } else {
            None
        };
        let wall_start = self.origin.elapsed().as_secs_f64();
        let t0 = Instant::now();
        // Weights the plan swaps in are really copied by the staging thread and read from the copies.
        let (out, report) = match &stream {
            Some(p) => {
                if self.pool.is_none() {
                    self.pool = Some(StagingPool::new(&self.model.weights)?);
                }
                let pool = self.pool.as_mut().expect("staging pool just made");
                let (out, r) = forward_streamed(&self.model, req, cache, p, pool)?;
                (out, Some(r))
            }
            None => (self.model.forward(req, cache)?, None),
        };
        let wall_s = t0.elapsed().as_secs_f64();
        if let Some(r) = &report {
            self.totals.staged_bytes += r.bytes;
            self.totals.staged_remaps += r.remaps;
            self.totals.staging_copy_s += r.copy_s;
            self.totals.staging_overlap_s += r.overlap_s;
            self.totals.staging_allocations += r.allocations;
            self.totals.staging_pool_bytes = r.pool_bytes;
        }
        let moe = out.moe.as_ref().and_then(|m| {
            let mut c =
                moe_launches::charge(m, self.model.moe_execution().policy, self.sim.target().launch_overhead_s)?;
            if let (Some(costs), Some(mc)) = (&self.moe_costs, &self.model.config.moe) {
                let rows = usize::try_from(m.padded_rows).unwrap_or(usize::MAX);
                c.add_padding(
                    m.padded_rows,
                    crate::moe::ResidencyCostModel::npu_expert(costs, rows, self.model.config.hidden, mc.expert_ffn).0,
                );
            }
            Some(c)
        });
        let (sim_s, energy, padded) = match &step {
            Some(s) => {
                self.record(s, wall_start, wall_s, report.as_ref());
                let (extra_s, extra_j) = match &moe {
                    Some(c) => (c.time_s, self.record_moe_launches(c)),
                    None => (0.0, 0.0),
                };
                (s.time_s + extra_s, s.energy_j + extra_j, s.padded_tokens)
            }
            None => (0.0, 0.0, 0),
        };
        self.last_stream = report;
        self.totals.forwards += 1;
        self.totals.simulated_s += sim_s;
        self.totals.energy_j += energy;
        self.totals.wall_s += wall_s;
        self.totals.tokens += n;
        self.totals.padded_tokens += padded;
        let stats = ForwardStats {
            wall_s,
            simulated_s: Some(sim_s),
            energy_j: Some(energy),
            tokens: n,
            padded_tokens: padded,
            flops: out.flops,
        };
        Ok((out, stats))
    }
    fn cost_profile(&self) -> Option<CostProfile> {
        // Launch overhead per forward = one execute per graph partition.
        let launch = self.sim.target().launch_overhead_s * self.graphs_per_forward() as f64;
        Some(CostProfile { token_buckets: self.shape_buckets().tokens.clone(), launch_overhead_s: launch })
    }
    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        Some(self)
    }
    fn moe_residency(&self) -> Option<Arc<dyn crate::moe::ResidencyCostModel>> {
        Some(Arc::new(self.moe_costs.clone()?))
    }
}

impl CpuPathHost for VirtualNpu {
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>> {
        // The revision path runs on the phone's CPU cores, next to the NPU: a CPU executor on the
        // same weights, timed on the profile's CPU and recorded on this device's timeline.
        let timing = self.config.timed_as.as_ref().unwrap_or(&self.model.config);
        Some(Box::new(CpuPath::new(Arc::clone(&self.model), timing, &self.profile, self.lanes.clone(), self.origin)))
    }
    fn sync_cpu_path(&self) {
        self.lanes.lock().sync();
    }
}

/// Measured (start, duration) of a simulated transfer event `e` of `events`: the staging thread's
/// copy of the layer it belongs to, split among that layer's transfers by bytes.
fn measured_copy(r: &StreamReport, events: &[TraceEvent], e: &TraceEvent, n_layers: usize) -> Option<(f64, f64)> {
    let layer_of = |name: &str| -> Option<usize> {
        let target = name.strip_prefix("stage ")?;
        if target == "lm_head" {
            return Some(n_layers);
        }
        target.strip_prefix('l')?.split_once('.')?.0.parse().ok()
    };
    if e.category != "transfer" {
        return None;
    }
    let li = layer_of(&e.name)?;
    let span = r.copy_spans.iter().find(|(l, _)| *l == li)?.1;
    let same: Vec<&TraceEvent> =
        events.iter().filter(|x| x.category == "transfer" && layer_of(&x.name) == Some(li)).collect();
    let total: u64 = same.iter().map(|x| x.bytes).sum();
    let before: u64 = same.iter().take_while(|x| x.name != e.name).map(|x| x.bytes).sum();
    let (frac0, frac) =
        if total > 0 { (before as f64 / total as f64, e.bytes as f64 / total as f64) } else { (0.0, 1.0) };
    let len = span.end - span.start;
    Some((span.start + frac0 * len, frac * len))
}
