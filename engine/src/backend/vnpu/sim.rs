//! Simulated execution of one forward: build the layer graph for the padded shape, plan memory,
//! cost every operator, and list-schedule operators (NPU or CPU lane), swap-in transfers (DMA lane)
//! and launches / map calls (host CPU lane). All times here are **simulated** seconds.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::memory::graph::{LayerGraph, Precision, StepShape};
use crate::memory::plan::{plan_memory, MemoryPlan, PlacementPolicy};
use crate::model::ModelConfig;
use crate::trace::{Lane, LanePower, TraceEvent};

use super::cost::{op_cost, ComputeTarget, OpCost, ShapeBucket, ShapeBuckets};

/// Which rows go through the LM head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogitRows {
    /// Every row of the padded bucket (a static graph without logit skipping).
    BucketRows,
    /// Only the rows the decoder asked for (padded to the matrix tile by the cost model).
    RequestedRows,
}

/// How a forward is mapped onto the device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimOptions {
    /// Storage/compute formats.
    pub precision: Precision,
    /// Memory placement policy.
    pub placement: PlacementPolicy,
    /// LM head rows.
    pub logits: LogitRows,
    /// Layers per compiled graph (one launch each; the head is its own graph).
    pub layers_per_graph: usize,
    /// NPU-visible bytes available.
    pub budget_bytes: u64,
    /// Static shapes.
    pub buckets: ShapeBuckets,
}

/// Simulated cost of one launch (one shape bucket).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LaunchSim {
    /// Shape the launch ran at.
    pub bucket: ShapeBucket,
    /// Rows through the LM head.
    pub logit_rows: usize,
    /// Simulated wall time of the launch, seconds.
    pub time_s: f64,
    /// Busy time of the compute unit, seconds.
    pub compute_busy_s: f64,
    /// Busy time of the DMA engine, seconds.
    pub dma_busy_s: f64,
    /// Busy time of the host CPU core driving the device (launches, map calls), seconds.
    pub host_busy_s: f64,
    /// Transfer time hidden behind compute, seconds.
    pub overlap_s: f64,
    /// DRAM bytes moved.
    pub dram_bytes: f64,
    /// Useful FLOPs.
    pub flops: f64,
    /// FLOPs including padding.
    pub padded_flops: f64,
    /// Bytes swapped in.
    pub streamed_bytes: u64,
    /// Buffers swapped in.
    pub remaps: usize,
    /// Map/unmap calls.
    pub map_calls: usize,
    /// Graph launches.
    pub launches: usize,
    /// Highest NPU-visible footprint, bytes.
    pub peak_resident_bytes: u64,
    /// Energy, joules.
    pub energy_j: f64,
    /// Events relative to the launch start.
    pub events: Vec<TraceEvent>,
}

/// Simulated cost of one forward (one or more launches).
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedStep {
    /// Launches in order.
    pub launches: Vec<Arc<LaunchSim>>,
    /// Tokens asked for.
    pub tokens: usize,
    /// Tokens after bucket padding.
    pub padded_tokens: usize,
    /// Simulated time, seconds.
    pub time_s: f64,
    /// Simulated energy, joules.
    pub energy_j: f64,
}

/// Simulates forwards of one model on one compute target, caching launches by shape.
#[derive(Debug)]
pub struct StepSimulator {
    cfg: ModelConfig,
    target: ComputeTarget,
    options: SimOptions,
    power: LanePower,
    cache: HashMap<(ShapeBucket, usize), Arc<LaunchSim>>,
}

impl StepSimulator {
    /// A simulator for `cfg` on `target`.
    pub fn new(cfg: ModelConfig, target: ComputeTarget, options: SimOptions, power: LanePower) -> Self {
        StepSimulator { cfg, target, options, power, cache: HashMap::new() }
    }
    /// The options in force.
    pub fn options(&self) -> &SimOptions {
        &self.options
    }
    /// The compute target.
    pub fn target(&self) -> &ComputeTarget {
        &self.target
    }
    /// The model shape being simulated.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The memory plan the device would use for a launch of this shape.
    pub fn plan_for(&self, bucket: ShapeBucket, logit_rows: usize) -> Result<(LayerGraph, MemoryPlan)> {
        let shape = StepShape { tokens: bucket.tokens, context: bucket.context, logit_rows };
        let graph = LayerGraph::build(&self.cfg, shape, &self.options.precision);
        let plan = plan_memory(&graph, self.options.budget_bytes, self.options.placement)?;
        Ok((graph, plan))
    }

    /// Simulates a forward of `shape.tokens` tokens over `shape.context` positions with
    /// `shape.logit_rows` rows needing logits.
    pub fn simulate(&mut self, shape: StepShape) -> Result<SimulatedStep> {
        let buckets = self.options.buckets.fit(shape.tokens, shape.context)?;
        let mut rows_left = shape.logit_rows;
        let mut tokens_left = shape.tokens;
        let mut launches = Vec::with_capacity(buckets.len());
        for b in buckets {
            let real = tokens_left.min(b.tokens);
            tokens_left -= real;
            let rows = match self.options.logits {
                LogitRows::BucketRows => b.tokens,
                LogitRows::RequestedRows => rows_left.min(real),
            };
            rows_left -= rows.min(rows_left);
            let key = (b, rows);
            let launch = match self.cache.get(&key) {
                Some(l) => l.clone(),
                None => {
                    let l = Arc::new(self.simulate_launch(b, rows)?);
                    self.cache.insert(key, l.clone());
                    l
                }
            };
            launches.push(launch);
        }
        let time_s = launches.iter().map(|l| l.time_s).sum();
        let energy_j = launches.iter().map(|l| l.energy_j).sum();
        let padded_tokens = launches.iter().map(|l| l.bucket.tokens).sum();
        Ok(SimulatedStep { launches, tokens: shape.tokens, padded_tokens, time_s, energy_j })
    }

    fn simulate_launch(&self, bucket: ShapeBucket, logit_rows: usize) -> Result<LaunchSim> {
        let (graph, plan) = self.plan_for(bucket, logit_rows)?;
        let costs: Vec<OpCost> = graph.ops.iter().map(|op| op_cost(&self.target, &graph, op)).collect();
        Ok(schedule(&graph, &plan, &costs, &self.target, &self.options, &self.power, bucket, logit_rows))
    }
}

/// Resident footprint outside the staging window.
fn base_resident(plan: &MemoryPlan) -> u64 {
    plan.kv_bytes + plan.activation_bytes + plan.resident_weight_bytes
}

#[allow(clippy::too_many_arguments)]
fn schedule(
    graph: &LayerGraph,
    plan: &MemoryPlan,
    costs: &[OpCost],
    target: &ComputeTarget,
    opts: &SimOptions,
    power: &LanePower,
    bucket: ShapeBucket,
    logit_rows: usize,
) -> LaunchSim {
    let host = Lane::Cpu(0);
    let mut events: Vec<TraceEvent> = Vec::new();
    let ev = |lane: Lane, name: String, cat: &str, start: f64, dur: f64, bytes: u64| TraceEvent {
        lane,
        name,
        category: cat.to_owned(),
        start_sim: start,
        dur_sim: dur,
        wall_start: 0.0,
        wall_dur: 0.0,
        bytes,
    };
    let dma_rate = target.dma_bytes_per_s;
    let (map_s, unmap_s) = (target.map_cost_s, target.unmap_cost_s);
    let lpg = opts.layers_per_graph.max(1);
    let mut t_unit = 0.0f64; // compute unit free at
    let mut t_dma = 0.0f64; // DMA engine free at
    let mut slot_free = vec![0.0f64; plan.staging_slots.max(1)];
    let mut next_slot = 0usize;
    let mut current_graph: Option<usize> = None;
    let (mut compute_busy, mut dma_busy, mut host_busy, mut dram) = (0.0, 0.0, 0.0, 0.0);
    let (mut flops, mut padded) = (0.0, 0.0);
    let mut launches = 0usize;
    let mut map_calls = 0usize;
    let head_graph = graph.ops.iter().filter_map(|o| o.layer).max().map_or(0, |l| l / lpg + 1);
    for (i, (op, c)) in graph.ops.iter().zip(costs).enumerate() {
        let gi = op.layer.map_or(head_graph, |l| l / lpg);
        if current_graph != Some(gi) && target.launch_overhead_s > 0.0 {
            // One graph execute per partition: the host pays the RPC round trip before the unit starts.
            events.push(ev(host, format!("launch graph {gi}"), "launch", t_unit, target.launch_overhead_s, 0));
            t_unit += target.launch_overhead_s;
            host_busy += target.launch_overhead_s;
            launches += 1;
        }
        current_graph = Some(gi);
        let streamed: u64 = plan.per_op_streamed[i].iter().map(|&b| graph.buffers[b].bytes).sum();
        let mut ready = 0.0f64;
        let mut unmap_after = false;
        if streamed > 0 {
            let copy_s = streamed as f64 / dma_rate;
            dram += 2.0 * streamed as f64;
            match plan.policy.maps_per_use() {
                false => {
                    // Staging: the copy may start once the DMA is free and its slot was released
                    // by the operator `slots` swaps back (two slots: double buffering).
                    let start = t_dma.max(slot_free[next_slot]);
                    events.push(ev(Lane::Dma, format!("stage {}", op.name), "transfer", start, copy_s, streamed));
                    t_dma = start + copy_s;
                    dma_busy += copy_s;
                    ready = t_dma;
                }
                true => {
                    // Synchronous: map, copy, compute, unmap, nothing overlaps.
                    events.push(ev(host, format!("map {}", op.name), "map", t_unit, map_s, 0));
                    host_busy += map_s;
                    let cs = t_unit + map_s;
                    events.push(ev(Lane::Dma, format!("copy {}", op.name), "transfer", cs, copy_s, streamed));
                    dma_busy += copy_s;
                    ready = cs + copy_s;
                    t_dma = ready;
                    map_calls += 1;
                    unmap_after = true;
                }
            }
        }
        let start = t_unit.max(ready);
        let cat = match op.kind {
            crate::memory::OpKind::Matmul { .. } => "matmul",
            crate::memory::OpKind::Attention { .. } => "attention",
            crate::memory::OpKind::Vector { .. } => "vector",
        };
        events.push(ev(target.lane, op.name.clone(), cat, start, c.time_s, c.dram_bytes as u64));
        t_unit = start + c.time_s;
        compute_busy += c.time_s;
        dram += c.dram_bytes;
        flops += c.flops;
        padded += c.padded_flops;
        if streamed > 0 && !plan.policy.maps_per_use() {
            slot_free[next_slot] = t_unit;
            next_slot = (next_slot + 1) % slot_free.len();
        }
        if unmap_after {
            events.push(ev(host, format!("unmap {}", op.name), "map", t_unit, unmap_s, 0));
            t_unit += unmap_s;
            host_busy += unmap_s;
        }
    }
    let time_s = t_unit.max(t_dma);
    let overlap_s = overlap_with_compute(&events, target.lane);
    let unit_idle = (time_s - compute_busy).max(0.0);
    let host_w = power.active_w(host);
    let energy_j = compute_busy * target.active_w
        + unit_idle * target.idle_w
        + dma_busy * power.dma_w
        + if target.lane == host { 0.0 } else { host_busy * host_w }
        + dram * power.dram_j_per_byte;
    LaunchSim {
        bucket,
        logit_rows,
        time_s,
        compute_busy_s: compute_busy,
        dma_busy_s: dma_busy,
        host_busy_s: host_busy,
        overlap_s,
        dram_bytes: dram,
        flops,
        padded_flops: padded,
        streamed_bytes: plan.streamed_bytes_per_step,
        remaps: plan.remaps_per_step,
        map_calls,
        launches,
        peak_resident_bytes: plan.peak_resident_bytes.max(base_resident(plan)),
        energy_j,
        events,
    }
}

/// Transfer time (DMA lane) that ran while the compute lane was busy.
fn overlap_with_compute(events: &[TraceEvent], compute: Lane) -> f64 {
    let mut a: Vec<(f64, f64)> =
        events.iter().filter(|e| e.lane == Lane::Dma).map(|e| (e.start_sim, e.start_sim + e.dur_sim)).collect();
    let mut b: Vec<(f64, f64)> =
        events.iter().filter(|e| e.lane == compute).map(|e| (e.start_sim, e.start_sim + e.dur_sim)).collect();
    a.sort_by(|x, y| x.0.total_cmp(&y.0));
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (mut i, mut j, mut total) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let s = a[i].0.max(b[j].0);
        let e = a[i].1.min(b[j].1);
        if e > s {
            total += e - s;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}
