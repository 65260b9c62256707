//! Simulated MoE prefill (time to first token) on a device profile, under three mappings:
//!
//! - [`PrefillPolicy::CpuOnly`]: everything on the profile's CPU cores, experts on exactly their
//!   routed rows;
//! - [`PrefillPolicy::NaiveNpu`]: attention, dense matmuls and the router on the NPU; per layer the
//!   scores go to the CPU for top-k and gather (an NPU → CPU → NPU round trip), then **one launch
//!   per active expert**, each a static graph for its rows padded up to the NPU's token ladder;
//! - [`PrefillPolicy::StaticTiersGrouped`]: the engine's MoE plan (`crate::moe`): static capacity
//!   tiers from a calibration ([`CapacityPlan`](crate::moe::CapacityPlan)), experts grouped by
//!   popularity ([`ExpertGroups`](crate::moe::ExpertGroups)), one launch per group at its static
//!   capacity, tokens over capacity dropped by saliency, and per layer a
//!   [`ResidencyPlan`] placing cold groups on a CPU lane that runs concurrently with the NPU.
//!
//! Routing comes from a seeded [`SyntheticRouter`] (the real models are not run); the plan is
//! calibrated on one seed and judged on another. Every figure is **simulated** by the operator cost
//! model ([`costs`]); the router's skew parameters are estimates.

pub(crate) mod costs;
pub(crate) mod router;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::memory::graph::Precision;
use crate::moe::capacity::enforce_capacity;
use crate::moe::ffn::StaticPlan;
use crate::moe::{CapacityTiers, DispatchCosts, GroupCost, MoeCalibration, MoeShape, Placement, ResidencyPlan};
use crate::trace::LanePower;

use super::cost::{ComputeTarget, ShapeBuckets};
use super::profile::DeviceProfile;
use costs::{ExpertCosts, Work};
pub use router::{PromptRouting, RouterParams, SyntheticRouter};

/// How the MoE layers of a prefill are mapped onto the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrefillPolicy {
    /// Every operator on the CPU cores.
    CpuOnly,
    /// Dense work on the NPU, one NPU launch per active expert.
    NaiveNpu,
    /// Static capacity tiers + grouped experts + load-aware residency.
    StaticTiersGrouped,
}

impl PrefillPolicy {
    /// The three policies, baselines first.
    pub const ALL: [PrefillPolicy; 3] = [Self::CpuOnly, Self::NaiveNpu, Self::StaticTiersGrouped];

    /// The spelling used in results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CpuOnly => "cpu-only",
            Self::NaiveNpu => "naive-npu",
            Self::StaticTiersGrouped => "static-tiers-grouped",
        }
    }
}

/// Settings of a simulated prefill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillSetup {
    /// The synthetic router (estimates).
    pub router: RouterParams,
    /// Seed of the calibration prompts.
    pub calibration_seed: u64,
    /// Seed of the evaluated prompts; must differ from the calibration seed.
    pub evaluation_seed: u64,
    /// Calibration prompts per prompt length.
    pub calibration_prompts: usize,
    /// Capacity ladder and headroom.
    pub tiers: CapacityTiers,
    /// Experts per group; `None`: [`PrefillSetup::default_group_size`].
    pub group_size: Option<usize>,
    /// NPU formats: W4A16 (4.5-bit weights with block scales, fp16 math), as the other 8B-class
    /// NPU simulations.
    pub npu_precision: Precision,
    /// CPU formats: Q4_0 weights with int8 dot products, as the other CPU baselines.
    pub cpu_precision: Precision,
    /// Cores of the CPU lane beside the NPU (top-k, gather, scatter, CPU-resident groups);
    /// `None`: the fastest cluster.
    pub cpu_lane_cores: Option<usize>,
}

impl Default for PrefillSetup {
    fn default() -> Self {
        PrefillSetup {
            router: RouterParams::default(),
            calibration_seed: 1,
            evaluation_seed: 2,
            calibration_prompts: 4,
            tiers: CapacityTiers::default(),
            group_size: None,
            npu_precision: Precision::npu_w4a16(),
            cpu_precision: Precision::cpu_q4_0(),
            cpu_lane_cores: None,
        }
    }
}

impl PrefillSetup {
    /// About 16 groups per layer (8 experts per group for 128 experts), at least 2 experts each.
    pub fn default_group_size(n_experts: usize) -> usize {
        (n_experts / 16).max(2)
    }

    /// Experts per group for `shape`.
    pub fn group_size_for(&self, shape: &MoeShape) -> usize {
        self.group_size.unwrap_or_else(|| Self::default_group_size(shape.n_experts)).max(1)
    }

    /// A plan is never judged on the data it was fitted on.
    pub fn check(&self) -> Result<()> {
        if self.calibration_seed == self.evaluation_seed {
            return Err(EngineError::InvalidRequest(format!(
                "the calibration seed and the evaluation seed are both {}: the static plan would be judged on the prompts it was fitted to",
                self.calibration_seed
            )));
        }
        if self.calibration_prompts == 0 {
            return Err(EngineError::InvalidRequest("a calibration needs at least one prompt per length".into()));
        }
        Ok(())
    }
}

/// A model shape with its synthetic router, the calibration drawn from it and the static plan
/// built from that calibration.
#[derive(Debug, Clone)]
pub struct MoeWorkload {
    pub shape: MoeShape,
    pub setup: PrefillSetup,
    pub router: SyntheticRouter,
    pub calibration: MoeCalibration,
    pub plan: StaticPlan,
}

impl MoeWorkload {
    /// Calibrates on `setup.calibration_prompts` prompts of each length in `lengths` (calibration
    /// seed) and builds the static plan.
    pub fn calibrate(shape: MoeShape, setup: PrefillSetup, lengths: &[usize]) -> Result<Self> {
        setup.check()?;
        if lengths.is_empty() || lengths.contains(&0) {
            return Err(EngineError::InvalidRequest("calibration prompt lengths must be positive".into()));
        }
        let router = SyntheticRouter::new(&shape, setup.router)?;
        let calibration = router.calibrate(
            lengths,
            setup.calibration_prompts,
            setup.calibration_seed,
            crate::moe::calibration::DEFAULT_BUCKETS,
        )?;
        let plan = StaticPlan::from_calibration(&calibration, &setup.tiers, setup.group_size_for(&shape));
        plan.check(shape.n_layers, shape.n_experts)?;
        Ok(MoeWorkload { shape, setup, router, calibration, plan })
    }

    /// An evaluation prompt of `tokens` tokens (evaluation seed, never the calibration's).
    pub fn evaluation_prompt(&self, tokens: usize) -> PromptRouting {
        self.router.route_prompt(tokens, self.setup.evaluation_seed, 0)
    }
}

/// Joules by consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EnergySplit {
    /// NPU busy at active power, idle at idle power (0 when the NPU is not used).
    pub npu_j: f64,
    /// CPU cores busy at their active power (launch dispatch included) plus the CPU idle floor.
    pub cpu_j: f64,
    /// DMA engine streaming weights.
    pub dma_j: f64,
    /// DRAM traffic at the profile's energy per byte.
    pub dram_j: f64,
}

/// Where the prefill's time went (sums over layers, on the critical path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseTimes {
    /// Attention blocks and routers (launches included on the NPU).
    pub dense_s: f64,
    /// Top-k, gather and scatter on the CPU.
    pub routing_s: f64,
    /// Expert FFNs (launches, CPU lane and merge syncs included).
    pub experts_s: f64,
    /// Final norm and LM head.
    pub head_s: f64,
}

/// One simulated prefill. All times are **simulated** seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillResult {
    pub policy: PrefillPolicy,
    pub model: &'static str,
    pub device: String,
    pub prompt_tokens: usize,
    /// Time to first token.
    pub prefill_s: f64,
    pub phases: PhaseTimes,
    /// NPU computing (launch dispatch excluded).
    pub npu_busy_s: f64,
    /// CPU core-seconds: busy time × cores busy (launch dispatch on one core included).
    pub cpu_busy_core_s: f64,
    /// Host time spent dispatching NPU launches and merge syncs (one core).
    pub dispatch_s: f64,
    pub dma_busy_s: f64,
    /// Expert weights that did not fit the NPU-resident budget and were copied in (naive policy).
    pub streamed_weight_bytes: f64,
    pub dram_bytes: f64,
    pub energy_j: f64,
    pub energy: EnergySplit,
    /// NPU graph launches (dense blocks, experts or groups, head).
    pub launches: usize,
    /// Of which launches of expert or group graphs.
    pub expert_launches: usize,
    pub routed_pairs: usize,
    pub dropped_pairs: usize,
    /// Static rows computed for no token (NPU expert graphs only).
    pub padded_rows: usize,
    /// Groups placed on the NPU / on the CPU lane, summed over layers (static-tiers policy).
    pub npu_groups: usize,
    pub cpu_groups: usize,
    pub simulated: bool,
}

impl PrefillResult {
    /// Dropped share of the routed pairs.
    pub fn drop_rate(&self) -> f64 {
        self.dropped_pairs as f64 / self.routed_pairs.max(1) as f64
    }
}

/// The device's units as the prefill uses them.
struct Units<'a> {
    profile: &'a DeviceProfile,
    power: LanePower,
    /// All cores (the CPU-only policy).
    cpu_all: ComputeTarget,
    cpu_all_cores: usize,
    /// The lane beside the NPU.
    cpu_lane: ComputeTarget,
    cpu_lane_cores: usize,
}

impl<'a> Units<'a> {
    fn new(profile: &'a DeviceProfile, setup: &PrefillSetup) -> Self {
        let all = profile.cpu.total_cores();
        let lane = setup
            .cpu_lane_cores
            .unwrap_or_else(|| profile.cpu.clusters.first().map_or(1, |c| c.count.value))
            .clamp(1, all.max(1));
        Units {
            profile,
            power: LanePower::from_profile(profile),
            cpu_all: ComputeTarget::cpu(profile, all, &setup.cpu_precision),
            cpu_all_cores: all,
            cpu_lane: ComputeTarget::cpu(profile, lane, &setup.cpu_precision),
            cpu_lane_cores: lane,
        }
    }
}

/// Running totals of one simulated prefill.
#[derive(Default)]
struct Tally {
    time_s: f64,
    phases: PhaseTimes,
    npu_busy_s: f64,
    cpu_core_s: f64,
    cpu_j: f64,
    dispatch_s: f64,
    dma_busy_s: f64,
    streamed: f64,
    dram: f64,
    launches: usize,
    expert_launches: usize,
    dropped: usize,
    padded: usize,
    npu_groups: usize,
    cpu_groups: usize,
}

impl Tally {
    /// CPU work on `cores` cores of `target` (busy accounting only; the caller places it in time).
    fn cpu_busy(&mut self, w: Work, target: &ComputeTarget, cores: usize) {
        self.cpu_core_s += w.time_s * cores as f64;
        self.cpu_j += w.time_s * target.active_w;
        self.dram += w.dram_bytes;
    }
    /// NPU work (busy accounting only).
    fn npu_busy(&mut self, w: Work) {
        self.npu_busy_s += w.time_s;
        self.dram += w.dram_bytes;
    }
    /// `n` launches dispatched by one host core.
    fn dispatch(&mut self, n: usize, launch_s: f64, host_w: f64) {
        let s = n as f64 * launch_s;
        self.dispatch_s += s;
        self.cpu_core_s += s;
        self.cpu_j += s * host_w;
    }
}

/// Simulates the prefill of `routing` (one prompt, every layer) on `profile` under `policy`.
pub fn simulate_prefill(
    workload: &MoeWorkload,
    profile: &DeviceProfile,
    routing: &PromptRouting,
    policy: PrefillPolicy,
) -> Result<PrefillResult> {
    let shape = &workload.shape;
    let experts_ok =
        routing.layers.iter().all(|l| l.per_expert.len() == shape.n_experts && l.tokens == routing.tokens());
    if routing.layers.len() != shape.n_layers || routing.tokens() == 0 || !experts_ok {
        return Err(EngineError::InvalidRequest(format!(
            "{}: the routing covers {} layers of {} tokens, the model has {} layers of {} experts",
            shape.name,
            routing.layers.len(),
            routing.tokens(),
            shape.n_layers,
            shape.n_experts
        )));
    }
    // The workload's fields are public: a plan swapped in by hand must still fit the shape.
    workload.plan.check(shape.n_layers, shape.n_experts)?;
    let units = Units::new(profile, &workload.setup);
    let mut t = Tally::default();
    let npu_used = match policy {
        PrefillPolicy::CpuOnly => {
            cpu_only(workload, &units, routing, &mut t);
            false
        }
        PrefillPolicy::NaiveNpu => {
            naive_npu(workload, &units, routing, &mut t)?;
            true
        }
        PrefillPolicy::StaticTiersGrouped => {
            static_tiers_grouped(workload, &units, routing, &mut t)?;
            true
        }
    };
    let p = &units.power;
    let npu_j =
        if npu_used { p.npu_active_w * t.npu_busy_s + p.npu_idle_w * (t.time_s - t.npu_busy_s).max(0.0) } else { 0.0 };
    let energy = EnergySplit {
        npu_j,
        cpu_j: t.cpu_j + profile.cpu.idle_w.value * t.time_s,
        dma_j: p.dma_w * t.dma_busy_s,
        dram_j: p.dram_j_per_byte * t.dram,
    };
    Ok(PrefillResult {
        policy,
        model: shape.name,
        device: profile.name.clone(),
        prompt_tokens: routing.tokens(),
        prefill_s: t.time_s,
        phases: t.phases,
        npu_busy_s: t.npu_busy_s,
        cpu_busy_core_s: t.cpu_core_s,
        dispatch_s: t.dispatch_s,
        dma_busy_s: t.dma_busy_s,
        streamed_weight_bytes: t.streamed,
        dram_bytes: t.dram,
        energy_j: energy.npu_j + energy.cpu_j + energy.dma_j + energy.dram_j,
        energy,
        launches: t.launches,
        expert_launches: t.expert_launches,
        routed_pairs: routing.pairs(),
        dropped_pairs: t.dropped,
        padded_rows: t.padded,
        npu_groups: t.npu_groups,
        cpu_groups: t.cpu_groups,
        simulated: true,
    })
}

/// Everything on the CPU: the cost model's CPU target over all cores, one operator after another.
fn cpu_only(w: &MoeWorkload, u: &Units, routing: &PromptRouting, t: &mut Tally) {
    let (shape, prec) = (&w.shape, &w.setup.cpu_precision);
    let (cpu, cores) = (&u.cpu_all, u.cpu_all_cores);
    let n = routing.tokens();
    let dense = costs::dense_block(cpu, shape, prec, n, n);
    let mut experts = ExpertCosts::new(cpu, shape, prec);
    for layer in &routing.layers {
        let pairs = layer.pairs();
        let route = costs::top_k(cpu, shape, n)
            .plus(costs::gather(cpu, shape, n, pairs))
            .plus(costs::scatter(cpu, shape, n, pairs));
        let ffn = layer.counts().into_iter().fold(Work::default(), |acc, rows| acc.plus(experts.at(rows)));
        for piece in [dense, route, ffn] {
            t.cpu_busy(piece, cpu, cores);
        }
        t.phases.dense_s += dense.time_s;
        t.phases.routing_s += route.time_s;
        t.phases.experts_s += ffn.time_s;
    }
    let head = costs::head(cpu, shape, prec);
    t.cpu_busy(head, cpu, cores);
    t.phases.head_s = head.time_s;
    t.time_s = t.phases.dense_s + t.phases.routing_s + t.phases.experts_s + t.phases.head_s;
}

/// The NPU side shared by both NPU policies: targets, the dense block's launches and the head.
struct NpuSide {
    npu: ComputeTarget,
    launch_s: f64,
    host_w: f64,
    /// Per layer: the dense block's launches and work (prompt split/padded to the token ladder).
    dense_launches: usize,
    dense: Work,
    head: Work,
    /// Token ladder for expert graphs (no context dimension).
    expert_buckets: ShapeBuckets,
    /// NPU-resident bytes available to one layer's experts.
    expert_budget_per_layer: u64,
}

impl NpuSide {
    fn new(w: &MoeWorkload, u: &Units, tokens: usize) -> Result<Self> {
        let (shape, prec) = (&w.shape, &w.setup.npu_precision);
        let npu = ComputeTarget::npu(u.profile, prec)?;
        let spec = u.profile.npu.as_ref().ok_or_else(|| EngineError::Backend {
            backend: "vnpu".into(),
            reason: format!("profile `{}` has no NPU", u.profile.name),
        })?;
        let buckets = ShapeBuckets::from_profile(u.profile);
        let chunks = buckets.fit(tokens, tokens)?;
        let dense = chunks
            .iter()
            .fold(Work::default(), |acc, c| acc.plus(costs::dense_block(&npu, shape, prec, c.tokens, c.context)));
        let budget = spec.session_va_bytes.value.saturating_mul(spec.max_sessions.value as u64);
        let dense_bytes = costs::dense_weight_bytes(shape, prec) * shape.n_layers as u64
            + prec.weight_bytes(shape.vocab, shape.hidden);
        let expert_budget_per_layer = budget.saturating_sub(dense_bytes) / shape.n_layers.max(1) as u64;
        Ok(NpuSide {
            launch_s: npu.launch_overhead_s,
            host_w: u.power.active_w(crate::trace::Lane::Cpu(0)),
            dense_launches: chunks.len(),
            dense,
            head: costs::head(&npu, shape, prec),
            expert_buckets: ShapeBuckets::new(buckets.tokens.clone(), Vec::new()),
            expert_budget_per_layer,
            npu,
        })
    }

    /// One layer's dense block: its launches, then the work; returns the layer's dense time.
    fn run_dense(&self, t: &mut Tally) -> f64 {
        t.launches += self.dense_launches;
        t.dispatch(self.dense_launches, self.launch_s, self.host_w);
        t.npu_busy(self.dense);
        let s = self.dense_launches as f64 * self.launch_s + self.dense.time_s;
        t.phases.dense_s += s;
        s
    }

    /// The head: one launch.
    fn run_head(&self, t: &mut Tally) -> f64 {
        t.launches += 1;
        t.dispatch(1, self.launch_s, self.host_w);
        t.npu_busy(self.head);
        let s = self.launch_s + self.head.time_s;
        t.phases.head_s = s;
        s
    }
}

/// Top-k and gather before the experts, scatter after, on the CPU lane (the NPU waits: the
/// router's scores must come back before any expert graph can be fed).
fn routing_on_cpu_lane(w: &MoeWorkload, u: &Units, tokens: usize, pairs: usize, t: &mut Tally) -> f64 {
    let (shape, lane) = (&w.shape, &u.cpu_lane);
    let work = costs::top_k(lane, shape, tokens)
        .plus(costs::gather(lane, shape, tokens, pairs))
        .plus(costs::scatter(lane, shape, tokens, pairs));
    t.cpu_busy(work, lane, u.cpu_lane_cores);
    t.phases.routing_s += work.time_s;
    work.time_s
}

/// Naive offload: per active expert one static graph at its rows padded up to the token ladder
/// (split into several launches beyond the largest bucket), launched one after another. Expert
/// weights beyond the NPU-resident budget are copied in by the DMA engine while experts run.
fn naive_npu(w: &MoeWorkload, u: &Units, routing: &PromptRouting, t: &mut Tally) -> Result<()> {
    let (shape, prec) = (&w.shape, &w.setup.npu_precision);
    let n = routing.tokens();
    let side = NpuSide::new(w, u, n)?;
    let mut experts = ExpertCosts::new(&side.npu, shape, prec);
    let layer_expert_bytes = costs::expert_weight_bytes(shape, prec) * shape.n_experts as u64;
    let overflow = layer_expert_bytes.saturating_sub(side.expert_budget_per_layer) as f64;
    let stream_s = overflow / side.npu.dma_bytes_per_s;
    for layer in &routing.layers {
        t.time_s += side.run_dense(t);
        t.time_s += routing_on_cpu_lane(w, u, n, layer.pairs(), t);
        let mut lane = 0.0;
        for rows in layer.counts().into_iter().filter(|&r| r > 0) {
            for chunk in side.expert_buckets.fit(rows, 0)? {
                let work = experts.at(chunk.tokens);
                t.npu_busy(work);
                t.launches += 1;
                t.expert_launches += 1;
                t.dispatch(1, side.launch_s, side.host_w);
                lane += side.launch_s + work.time_s;
            }
            let padded_to: usize = side.expert_buckets.fit(rows, 0)?.iter().map(|c| c.tokens).sum();
            t.padded += padded_to.saturating_sub(rows);
        }
        // Streaming the non-resident experts overlaps with the launches (double buffering).
        t.dma_busy_s += stream_s;
        t.streamed += overflow;
        t.dram += 2.0 * overflow;
        let experts_s = lane.max(stream_s);
        t.phases.experts_s += experts_s;
        t.time_s += experts_s;
    }
    t.time_s += side.run_head(t);
    Ok(())
}

/// The engine's static plan: capacities for the prompt's bucket, tokens over capacity dropped by
/// saliency, groups placed per layer by [`ResidencyPlan::decide`] from the calibrated loads, then
/// timed with the evaluation prompt's loads: NPU groups at their static capacity (one launch
/// each), CPU groups on their kept rows, the two lanes concurrent, one merge sync.
fn static_tiers_grouped(w: &MoeWorkload, u: &Units, routing: &PromptRouting, t: &mut Tally) -> Result<()> {
    let (shape, npu_prec) = (&w.shape, &w.setup.npu_precision);
    let n = routing.tokens();
    let side = NpuSide::new(w, u, n)?;
    let mut npu_experts = ExpertCosts::new(&side.npu, shape, npu_prec);
    let mut cpu_experts = ExpertCosts::new(&u.cpu_lane, shape, &w.setup.cpu_precision);
    let expert_bytes = costs::expert_weight_bytes(shape, npu_prec);
    // Merging the CPU lane's outputs costs one more host round trip (estimate: the dispatch cost).
    let sync_s = side.launch_s;
    let bucket = w.calibration.bucket_of(n);
    for (li, layer) in routing.layers.iter().enumerate() {
        t.time_s += side.run_dense(t);
        let caps = w.plan.capacities.capacities(n, li)?;
        let groups = w.plan.groups.get(li).ok_or_else(|| {
            EngineError::InvalidRequest(format!("{}: the static plan has no groups for layer {li}", shape.name))
        })?;
        let mut kept = layer.clone();
        let report = enforce_capacity(&mut kept, &caps, &routing.saliency, true);
        t.dropped += report.dropped;
        t.time_s += routing_on_cpu_lane(w, u, n, kept.pairs(), t);
        // Placement is decided from the calibration (the plan's prediction), not from this prompt.
        let pop = w.calibration.popularity(bucket, li);
        let expected = |e: usize| -> usize {
            let mean = pop.get(e).copied().unwrap_or(0.0) * (n * shape.top_k) as f64;
            (mean.round() as usize).min(caps.get(e).copied().unwrap_or(0))
        };
        let cap_of = |e: usize| caps.get(e).copied().unwrap_or(0);
        let group_costs: Vec<GroupCost> = groups
            .groups
            .iter()
            .map(|g| GroupCost {
                npu_s: g.iter().map(|&e| npu_experts.at(cap_of(e)).time_s).sum(),
                cpu_s: g.iter().map(|&e| cpu_experts.at(expected(e)).time_s).sum(),
                popularity: g.iter().map(|&e| pop.get(e).copied().unwrap_or(0.0)).sum(),
                weight_bytes: expert_bytes * g.len() as u64,
                npu_j: g.iter().map(|&e| npu_experts.at(cap_of(e)).time_s).sum::<f64>() * u.power.npu_active_w,
                cpu_j: g.iter().map(|&e| cpu_experts.at(expected(e)).time_s).sum::<f64>() * u.cpu_lane.active_w,
                stream_s: (expert_bytes * g.len() as u64) as f64 / side.npu.dma_bytes_per_s,
            })
            .collect();
        let dispatch = DispatchCosts { launch_s: side.launch_s, sync_s, host_w: side.host_w };
        let placement = ResidencyPlan::decide(&group_costs, dispatch, side.expert_budget_per_layer);
        let kept_rows = kept.counts();
        let (mut npu_lane, mut cpu_lane, mut dma_lane) = (0.0, 0.0, 0.0);
        for (gi, (g, p)) in groups.groups.iter().zip(&placement.placement).enumerate() {
            match p {
                Placement::Npu => {
                    // Weights beyond the resident budget are copied in while other groups run.
                    if placement.streamed.get(gi).copied().unwrap_or(false) {
                        let bytes = (expert_bytes * g.len() as u64) as f64;
                        dma_lane += bytes / side.npu.dma_bytes_per_s;
                        t.streamed += bytes;
                        t.dram += 2.0 * bytes;
                    }
                    let work = g.iter().fold(Work::default(), |acc, &e| acc.plus(npu_experts.at(cap_of(e))));
                    t.npu_busy(work);
                    t.launches += 1;
                    t.expert_launches += 1;
                    t.npu_groups += 1;
                    t.dispatch(1, side.launch_s, side.host_w);
                    t.padded += g.iter().map(|&e| cap_of(e).saturating_sub(kept_rows[e])).sum::<usize>();
                    npu_lane += side.launch_s + work.time_s;
                }
                Placement::Cpu => {
                    let work = g.iter().fold(Work::default(), |acc, &e| acc.plus(cpu_experts.at(kept_rows[e])));
                    t.cpu_busy(work, &u.cpu_lane, u.cpu_lane_cores);
                    t.cpu_groups += 1;
                    cpu_lane += work.time_s;
                }
            }
        }
        if placement.placement.contains(&Placement::Cpu) {
            t.dispatch(1, sync_s, side.host_w);
            cpu_lane += sync_s;
        }
        t.dma_busy_s += dma_lane;
        let experts_s = npu_lane.max(dma_lane).max(cpu_lane);
        t.phases.experts_s += experts_s;
        t.time_s += experts_s;
    }
    t.time_s += side.run_head(t);
    Ok(())
}

/// The three policies on one prompt length, with the ratios the suite reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyComparison {
    pub model: &'static str,
    pub device: String,
    pub prompt_tokens: usize,
    pub cpu_only: PrefillResult,
    pub naive_npu: PrefillResult,
    pub ours: PrefillResult,
    /// naive / ours prefill time.
    pub speedup_vs_naive_npu: f64,
    /// CPU-only / ours prefill time.
    pub speedup_vs_cpu: f64,
    /// naive / ours energy.
    pub energy_ratio_vs_naive_npu: f64,
    /// CPU-only / ours energy.
    pub energy_ratio_vs_cpu: f64,
    /// CPU-only / ours CPU core-seconds.
    pub cpu_busy_ratio_vs_cpu: f64,
    pub simulated: bool,
}

/// Simulates the evaluation prompt of `tokens` tokens under every policy on `profile`.
pub fn compare_policies(workload: &MoeWorkload, profile: &DeviceProfile, tokens: usize) -> Result<PolicyComparison> {
    let routing = workload.evaluation_prompt(tokens);
    let run = |p| simulate_prefill(workload, profile, &routing, p);
    let (cpu_only, naive_npu, ours) =
        (run(PrefillPolicy::CpuOnly)?, run(PrefillPolicy::NaiveNpu)?, run(PrefillPolicy::StaticTiersGrouped)?);
    let ratio = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
    Ok(PolicyComparison {
        model: workload.shape.name,
        device: profile.name.clone(),
        prompt_tokens: tokens,
        speedup_vs_naive_npu: ratio(naive_npu.prefill_s, ours.prefill_s),
        speedup_vs_cpu: ratio(cpu_only.prefill_s, ours.prefill_s),
        energy_ratio_vs_naive_npu: ratio(naive_npu.energy_j, ours.energy_j),
        energy_ratio_vs_cpu: ratio(cpu_only.energy_j, ours.energy_j),
        cpu_busy_ratio_vs_cpu: ratio(cpu_only.cpu_busy_core_s, ours.cpu_busy_core_s),
        cpu_only,
        naive_npu,
        ours,
        simulated: true,
    })
}

#[cfg(test)]
mod tests;
