//! The phone CPU next to the virtual NPU: the executor dual-path revision runs on, and the shared
//! timeline both paths write to.
//!
//! The CPU path runs on its own thread while the dense forward of the same step runs on the NPU.
//! Its tasks are queued as they finish and placed on the timeline when the NPU side next records
//! (or the timeline is read): each starts no earlier than the dense forward it ran beside and
//! after the CPU path's previous task. The next dense forward starts when the NPU side is free
//! (asynchronous schedule: a CPU task may span several dense forwards), or after every task so
//! far when the loop called [`Lanes::sync`] (lockstep schedule: the step boundary waits).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, CpuPathExecutor, ForwardStats};
use crate::error::Result;
use crate::memory::graph::StepShape;
use crate::model::{ForwardOutput, ForwardRequest, KvCache, KvLayout, ModelConfig, Transformer};
use crate::trace::{Lane, Timeline, TraceEvent};

use super::profile::DeviceProfile;
use super::replay::cpu_simulator;
use super::sim::StepSimulator;

/// Totals of the CPU path (simulated on the profile's CPU cores, wall measured here).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CpuPathTotals {
    /// Forwards the CPU path ran.
    pub forwards: usize,
    /// Simulated seconds of those forwards.
    pub simulated_s: f64,
    /// Simulated joules.
    pub energy_j: f64,
    /// Measured wall seconds.
    pub wall_s: f64,
}

/// A CPU-path task waiting to be placed on the timeline.
#[derive(Debug, Clone)]
struct PendingTask {
    /// Index of the dense forward it ran beside.
    pair: usize,
    name: String,
    dur_sim: f64,
    wall_start: f64,
    wall_dur: f64,
    bytes: u64,
}

/// The timeline shared by the NPU (dense) side and the CPU path.
#[derive(Debug)]
pub struct Lanes {
    timeline: Timeline,
    /// Simulated start of every dense forward so far.
    dense_starts: Vec<f64>,
    /// Simulated time the CPU path's cores are free again.
    cpu_free: f64,
    /// Cores the CPU path occupies (lanes `CPU 1..=cores`; `CPU 0` drives the NPU).
    cores: usize,
    pending: Vec<PendingTask>,
    totals: CpuPathTotals,
    /// The next dense forward waits for the CPU path (set by [`Lanes::sync`], used once).
    barrier: bool,
    /// Latest end of the events scanned so far (all / all but the CPU path's), and how many were
    /// scanned: the timeline only grows, so each dense forward scans only what is new (a full
    /// scan per forward made long runs quadratic).
    ends: TimelineEnds,
}

/// Running maxima over a prefix of the timeline's events.
#[derive(Debug, Default)]
struct TimelineEnds {
    scanned: usize,
    all: f64,
    npu_side: f64,
}

impl TimelineEnds {
    fn update(&mut self, timeline: &Timeline) {
        // Events are only appended or discarded as a whole (the maxima are kept then).
        self.scanned = self.scanned.min(timeline.events.len());
        for e in &timeline.events[self.scanned..] {
            let end = e.start_sim + e.dur_sim;
            self.all = self.all.max(end);
            if e.category != "cpu_path" {
                self.npu_side = self.npu_side.max(end);
            }
        }
        self.scanned = timeline.events.len();
    }
}

impl Lanes {
    fn new(device: String, cores: usize) -> Self {
        Lanes {
            timeline: Timeline::new(device),
            dense_starts: Vec::new(),
            cpu_free: 0.0,
            cores: cores.max(1),
            pending: Vec::new(),
            totals: CpuPathTotals::default(),
            barrier: false,
            ends: TimelineEnds::default(),
        }
    }
    /// Places queued CPU-path tasks whose dense forward is recorded next to it.
    pub fn flush(&mut self) {
        let recorded = self.dense_starts.len();
        let (ready, wait): (Vec<PendingTask>, Vec<PendingTask>) =
            std::mem::take(&mut self.pending).into_iter().partition(|t| t.pair < recorded);
        self.pending = wait;
        for t in ready {
            let start = self.cpu_free.max(self.dense_starts[t.pair]);
            for core in 1..=self.cores {
                self.timeline.push(TraceEvent {
                    lane: Lane::Cpu(core),
                    name: t.name.clone(),
                    category: "cpu_path".into(),
                    start_sim: start,
                    dur_sim: t.dur_sim,
                    wall_start: t.wall_start,
                    wall_dur: t.wall_dur,
                    // DRAM traffic counted once, not per core.
                    bytes: if core == 1 { t.bytes } else { 0 },
                });
            }
            self.cpu_free = start + t.dur_sim;
        }
    }
    /// The timeline (call [`Lanes::flush`] first for queued CPU tasks to appear).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }
    /// The timeline, for the NPU side to append to.
    pub fn timeline_mut(&mut self) -> &mut Timeline {
        &mut self.timeline
    }
    /// Records where the next dense forward starts and returns it: when the NPU side's events
    /// end, or after every event so far (CPU-path tasks included) after a [`Lanes::sync`].
    pub fn begin_dense(&mut self) -> f64 {
        self.flush();
        self.ends.update(&self.timeline);
        let t0 = if std::mem::take(&mut self.barrier) { self.ends.all } else { self.ends.npu_side };
        self.dense_starts.push(t0);
        t0
    }
    /// Drops the recorded events and counter samples; the clocks (where the next dense forward
    /// and CPU-path task may start) are kept, so later events continue the same time line.
    pub fn discard_timeline(&mut self) {
        self.flush();
        self.ends.update(&self.timeline);
        self.timeline.events.clear();
        self.timeline.counters.clear();
        self.ends.scanned = 0;
    }
    /// Events and counter samples recorded so far.
    pub fn timeline_len(&self) -> (usize, usize) {
        (self.timeline.events.len(), self.timeline.counters.len())
    }
    /// Latest simulated end of any event on the timeline ([`Timeline::end_sim`] without rescanning
    /// what earlier calls saw).
    pub fn end_sim(&mut self) -> f64 {
        self.ends.update(&self.timeline);
        self.ends.all
    }
    /// The next dense forward waits for every CPU-path task so far (a lockstep step boundary).
    pub fn sync(&mut self) {
        self.barrier = true;
    }
    /// Index the next dense forward will get.
    pub fn next_dense(&self) -> usize {
        self.dense_starts.len()
    }
    /// Totals of the CPU path.
    pub fn cpu_path_totals(&self) -> CpuPathTotals {
        self.totals
    }
}

/// A handle to the shared lanes.
#[derive(Debug, Clone)]
pub struct SharedLanes(Arc<Mutex<Lanes>>);

impl SharedLanes {
    /// Lanes for `device` with a CPU path of `cores` cores.
    pub fn new(device: String, cores: usize) -> Self {
        SharedLanes(Arc::new(Mutex::new(Lanes::new(device, cores))))
    }
    /// Locks the lanes with queued CPU tasks placed. A panic on the other side cannot leave the
    /// timeline half-written (every push is a single call), so a poisoned lock is still usable.
    pub fn lock(&self) -> MutexGuard<'_, Lanes> {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.flush();
        g
    }
    fn next_dense(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).next_dense()
    }
    fn queue(&self, t: PendingTask, sim_s: f64, energy_j: f64) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.totals.forwards += 1;
        g.totals.simulated_s += sim_s;
        g.totals.energy_j += energy_j;
        g.totals.wall_s += t.wall_dur;
        g.pending.push(t);
    }
}

/// The executor of dual-path revision on a virtual-NPU device: the real forward on this machine's
/// CPU, timed as the profile's CPU cores would run it, recorded on the shared timeline.
pub struct CpuPath {
    inner: CpuBackend,
    sim: StepSimulator,
    lanes: SharedLanes,
    origin: Instant,
    profile: String,
    /// Dense forward the current step's tasks run beside.
    pair: usize,
}

impl CpuPath {
    /// A CPU path on `profile`'s CPU cores (all but the one driving the NPU) for `model`, timed
    /// with the layer shapes of `timing` (normally `model.config`).
    pub fn new(model: Arc<Transformer>, timing: &ModelConfig, profile: &DeviceProfile, lanes: SharedLanes, origin: Instant) -> Self {
        let cores = cpu_path_cores(profile);
        let sim = cpu_simulator(timing, profile, cores);
        let pair = lanes.next_dense();
        CpuPath { inner: CpuBackend::new(model), sim, lanes, origin, profile: profile.name.clone(), pair }
    }
}

/// Cores the CPU path gets on `profile`: every core but the one driving the NPU.
pub fn cpu_path_cores(profile: &DeviceProfile) -> usize {
    profile.cpu.total_cores().saturating_sub(1).max(1)
}

impl Backend for CpuPath {
    fn name(&self) -> String {
        format!("vnpu-cpu-path:{}", self.profile)
    }
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::with_layout(self.inner.config(), capacity, KvLayout::Tiled)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let n = req.tokens.len();
        let shape = StepShape {
            tokens: n,
            context: super::VirtualNpu::context_of(req, cache.as_deref()),
            logit_rows: req.logits_rows.len(),
        };
        let step = if n > 0 { Some(self.sim.simulate(shape)?) } else { None };
        let wall_start = self.origin.elapsed().as_secs_f64();
        let (out, mut stats) = self.inner.forward(req, cache)?;
        let (sim_s, energy) = step.as_ref().map_or((0.0, 0.0), |s| (s.time_s, s.energy_j));
        let bytes = step.as_ref().map_or(0.0, |s| s.launches.iter().map(|l| l.dram_bytes).sum::<f64>());
        self.lanes.queue(
            PendingTask {
                pair: self.pair,
                name: format!("revision forward {n} tok"),
                dur_sim: sim_s,
                wall_start,
                wall_dur: stats.wall_s,
                bytes: bytes as u64,
            },
            sim_s,
            energy,
        );
        stats.simulated_s = Some(sim_s);
        stats.energy_j = Some(energy);
        Ok((out, stats))
    }
}

impl CpuPathExecutor for CpuPath {
    fn begin_step(&mut self) {
        self.pair = self.lanes.next_dense();
    }
}

impl std::fmt::Debug for CpuPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPath").field("profile", &self.profile).finish()
    }
}
