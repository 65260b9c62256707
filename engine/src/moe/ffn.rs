//! The MoE feed-forward under each [`MoePolicy`], and the counters runs report.

use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::capacity::{enforce_capacity, CapacityPlan, CapacityTiers};
use super::grouped::{run_group, swiglu_rows, swiglu_rows_serial, ExpertGroups};
use super::residency::{GroupCost, Placement, ResidencyCostModel, ResidencyPlan};
use super::routing::{saliency, Assignment, Routing};
use super::{Expert, MoeCalibration, MoePolicy};
use crate::error::{EngineError, Result};
use crate::kernels::linear::Linear;

/// Default experts per group (one launch each) under [`MoePolicy::StaticTiers`].
pub const DEFAULT_GROUP_SIZE: usize = 4;

/// One MoE layer's weights and router rule.
pub struct MoeLayer<'a> {
    pub router: &'a Linear,
    pub experts: &'a [Expert],
    pub top_k: usize,
    pub norm_topk_prob: bool,
}

/// The static plan [`MoePolicy::StaticTiers`] runs: capacities per bucket and groups per layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticPlan {
    pub capacities: CapacityPlan,
    /// Per layer.
    pub groups: Vec<ExpertGroups>,
    /// `popularity[layer][expert]`: calibrated share of the layer's routed tokens, from which load-aware
    /// residency predicts each group's rows (empty: uniform).
    #[serde(default)]
    pub popularity: Vec<Vec<f64>>,
}

impl StaticPlan {
    /// From a calibration: tiers from its loads, groups from its popularity (over all buckets).
    pub fn from_calibration(cal: &MoeCalibration, tiers: &CapacityTiers, group_size: usize) -> Self {
        let capacities = CapacityPlan::from_calibration(cal, tiers);
        let popularity: Vec<Vec<f64>> = (0..cal.n_layers).map(|li| cal.overall_popularity(li)).collect();
        let groups = popularity.iter().map(|p| ExpertGroups::by_popularity(p, group_size)).collect();
        StaticPlan { capacities, groups, popularity }
    }

    /// Without a calibration: uniform capacities, experts grouped in index order.
    pub fn uniform(n_layers: usize, n_experts: usize, top_k: usize, buckets: &[usize], group_size: usize) -> Self {
        let tiers = CapacityTiers::default();
        let capacities = CapacityPlan::uniform(n_layers, n_experts, top_k, buckets, &tiers);
        let groups = vec![ExpertGroups::by_popularity(&vec![1.0; n_experts], group_size); n_layers];
        let popularity = vec![vec![1.0 / n_experts.max(1) as f64; n_experts]; n_layers];
        StaticPlan { capacities, groups, popularity }
    }

    /// Checks the plan fits a model with `n_layers` MoE layers of `n_experts` experts.
    pub fn check(&self, n_layers: usize, n_experts: usize) -> Result<()> {
        let ok = self.groups.len() == n_layers
            && self.groups.iter().all(|g| g.is_partition_of(n_experts))
            && self
                .capacities
                .buckets
                .iter()
                .all(|b| b.per_layer.len() == n_layers && b.per_layer.iter().all(|l| l.len() == n_experts));
        if ok && !self.capacities.buckets.is_empty() {
            Ok(())
        } else {
            Err(EngineError::InvalidRequest(format!(
                "MoE static plan does not fit the model ({n_layers} layers x {n_experts} experts)"
            )))
        }
    }
}

/// How the model's MoE layers run.
#[derive(Debug, Clone, Default)]
pub struct MoeExecution {
    pub policy: MoePolicy,
    /// Required by [`MoePolicy::StaticTiers`].
    pub plan: Option<Arc<StaticPlan>>,
    /// Scale a token's remaining gate weights back to its original total when experts were dropped.
    pub renormalise_dropped: bool,
    /// Load-aware residency under [`MoePolicy::StaticTiers`]: with a device's cost model, each layer
    /// places its cold groups on a CPU lane (a second thread, concurrent with the grouped launches);
    /// `None` runs every group as a launch.
    pub residency: Option<Arc<dyn ResidencyCostModel>>,
}

/// Counters summed over forwards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MoeStats {
    /// MoE layer executions.
    pub layer_runs: u64,
    /// (token, expert) pairs the router chose.
    pub routed: u64,
    /// Pairs dropped for capacity.
    pub dropped: u64,
    /// Padding rows computed by static shapes.
    pub padded_rows: u64,
    /// Expert launches (per expert or per group).
    pub launches: u64,
    /// Token rows that lost every expert.
    pub tokens_without_expert: u64,
    /// `expert_tokens[layer][expert]`: routed tokens (before capacity), for calibration.
    pub expert_tokens: Vec<Vec<u64>>,
    /// `layer_launches[layer]`: expert launches (per expert or per group) of that layer.
    #[serde(default)]
    pub layer_launches: Vec<u64>,
    /// Groups load-aware residency ran on the CPU lane instead of launching them.
    #[serde(default)]
    pub cpu_lane_groups: u64,
    /// `layer_cpu_groups[layer]`: those groups per layer.
    #[serde(default)]
    pub layer_cpu_groups: Vec<u64>,
    /// `layer_cpu_lane_s[layer]`: the device cost model's seconds for that layer's CPU lane (its
    /// groups' kept rows plus the merge), summed over forwards. A simulated figure.
    #[serde(default)]
    pub layer_cpu_lane_s: Vec<f64>,
}

impl MoeStats {
    /// Fraction of routed pairs dropped.
    pub fn drop_rate(&self) -> f64 {
        if self.routed == 0 {
            0.0
        } else {
            self.dropped as f64 / self.routed as f64
        }
    }

    /// Adds another set of counters into this one.
    pub fn merge(&mut self, o: &MoeStats) {
        self.layer_runs += o.layer_runs;
        self.routed += o.routed;
        self.dropped += o.dropped;
        self.padded_rows += o.padded_rows;
        // Launches are summed through the per-layer counts below.
        self.tokens_without_expert += o.tokens_without_expert;
        for (li, row) in o.expert_tokens.iter().enumerate() {
            let counts: Vec<usize> = row.iter().map(|&c| c as usize).collect();
            self.add_counts(li, &counts);
        }
        for (li, &n) in o.layer_launches.iter().enumerate() {
            self.add_launches(li, n);
        }
        for (li, (&g, &s)) in o.layer_cpu_groups.iter().zip(&o.layer_cpu_lane_s).enumerate() {
            self.add_cpu_lane(li, g, s);
        }
    }

    fn add_cpu_lane(&mut self, layer: usize, groups: u64, seconds: f64) {
        if self.layer_cpu_groups.len() <= layer {
            self.layer_cpu_groups.resize(layer + 1, 0);
            self.layer_cpu_lane_s.resize(layer + 1, 0.0);
        }
        self.layer_cpu_groups[layer] += groups;
        self.layer_cpu_lane_s[layer] += seconds;
        self.cpu_lane_groups += groups;
    }

    fn add_launches(&mut self, layer: usize, n: u64) {
        if self.layer_launches.len() <= layer {
            self.layer_launches.resize(layer + 1, 0);
        }
        self.layer_launches[layer] += n;
        self.launches += n;
    }

    fn add_counts(&mut self, layer: usize, counts: &[usize]) {
        if self.expert_tokens.len() <= layer {
            self.expert_tokens.resize(layer + 1, Vec::new());
        }
        let row = &mut self.expert_tokens[layer];
        if row.len() < counts.len() {
            row.resize(counts.len(), 0);
        }
        for (r, &c) in row.iter_mut().zip(counts) {
            *r += c as u64;
        }
    }
}

/// Runs MoE layer `li` on the normed rows `xn` (`n × h`) and adds the result into the residual
/// rows `x`. Saliency for capacity dropping is the L2 norm of `x` before the add. Returns FLOPs.
#[allow(clippy::too_many_arguments)]
pub fn moe_ffn(
    layer: &MoeLayer,
    exec: &MoeExecution,
    li: usize,
    x: &mut [f32],
    xn: &[f32],
    n: usize,
    h: usize,
    stats: &mut MoeStats,
) -> Result<f64> {
    let e = layer.experts.len();
    if e == 0 || layer.top_k == 0 {
        return Err(EngineError::InvalidRequest(format!("MoE layer {li} has no experts to route to")));
    }
    let mut scores = vec![0.0f32; n * e];
    layer.router.forward(xn, n, &mut scores);
    let mut flops = 2.0 * (n * h * e) as f64;
    let mut routing = Routing::from_scores(&mut scores, n, e, layer.top_k, layer.norm_topk_prob);
    let counts = routing.counts();
    stats.layer_runs += 1;
    stats.routed += routing.pairs() as u64;
    stats.add_counts(li, &counts);
    match exec.policy {
        MoePolicy::Cpu => {
            let outs: Vec<(usize, Vec<f32>, f64)> = routing
                .per_expert
                .par_iter()
                .enumerate()
                .filter(|(_, r)| !r.is_empty())
                .map(|(ei, r)| {
                    let xin = gather(xn, h, r.iter().map(|a| a.token));
                    let mut y = vec![0.0f32; r.len() * h];
                    let f = swiglu_rows(&layer.experts[ei], &xin, r.len(), &mut y);
                    (ei, y, f)
                })
                .collect();
            stats.add_launches(li, 1);
            for (ei, y, f) in outs {
                flops += f;
                scatter_add(x, h, &y, &routing.per_expert[ei]);
            }
        }
        MoePolicy::Naive => {
            for (ei, r) in routing.per_expert.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
                let xin = gather(xn, h, r.iter().map(|a| a.token));
                let mut y = vec![0.0f32; r.len() * h];
                flops += swiglu_rows(&layer.experts[ei], &xin, r.len(), &mut y);
                stats.add_launches(li, 1);
                scatter_add(x, h, &y, r);
            }
        }
        MoePolicy::StaticTiers => {
            let plan = exec.plan.as_deref().ok_or_else(|| {
                EngineError::InvalidRequest("the static-tiers MoE policy needs a plan (calibration or uniform)".into())
            })?;
            let caps = plan.capacities.capacities(n, li)?;
            let groups = plan
                .groups
                .get(li)
                .ok_or_else(|| EngineError::InvalidRequest(format!("MoE static plan has no groups for layer {li}")))?;
            let sal = saliency(x, n, h);
            let report = enforce_capacity(&mut routing, &caps, &sal, exec.renormalise_dropped);
            stats.dropped += report.dropped as u64;
            stats.padded_rows += report.padded as u64;
            stats.tokens_without_expert += report.tokens_without_expert as u64;
            let placement = match &exec.residency {
                Some(model) => {
                    place_groups(model.as_ref(), layer.experts, groups, &caps, plan.popularity.get(li), n, layer.top_k)
                }
                None => vec![Placement::Npu; groups.groups.len()],
            };
            let active = |g: &[usize]| g.iter().any(|&e| !routing.per_expert[e].is_empty());
            let cpu_lane: Vec<&[usize]> = groups
                .groups
                .iter()
                .zip(&placement)
                .filter(|(g, p)| **p == Placement::Cpu && active(g))
                .map(|(g, _)| g.as_slice())
                .collect();
            let per_expert = &routing.per_expert;
            // The CPU lane runs on its own thread while this one launches the resident groups.
            let cpu_out = std::thread::scope(|scope| {
                let lane = (!cpu_lane.is_empty())
                    .then(|| scope.spawn(|| run_cpu_lane(layer.experts, &cpu_lane, per_expert, xn, h)));
                for (group, p) in groups.groups.iter().zip(&placement) {
                    if *p == Placement::Npu && active(group) {
                        flops += run_group(layer.experts, group, &caps, per_expert, xn, h, x);
                        stats.add_launches(li, 1);
                    }
                }
                lane.map(|t| t.join()).transpose()
            })
            .map_err(|_| EngineError::Backend {
                backend: "cpu".into(),
                reason: "the MoE CPU-lane thread panicked".into(),
            })?;
            if let Some(outs) = cpu_out {
                for (ei, y, f) in outs {
                    flops += f;
                    scatter_add(x, h, &y, &routing.per_expert[ei]);
                }
                if let Some(model) = &exec.residency {
                    let ex = &layer.experts[0];
                    let (hh, ff) = (ex.gate.k_in, ex.gate.n_out);
                    let lane_s: f64 = cpu_lane
                        .iter()
                        .flat_map(|g| g.iter())
                        .map(|&e| model.cpu_expert(routing.per_expert[e].len(), hh, ff).0)
                        .sum::<f64>()
                        + model.sync_s();
                    stats.add_cpu_lane(li, cpu_lane.len() as u64, lane_s);
                }
            }
        }
    }
    Ok(flops)
}

/// Places one layer's groups by [`ResidencyPlan::decide`], predicting each expert's rows from the
/// calibrated popularity (`n * top_k` pairs shared by popularity, capped at the capacity): the
/// placement follows the plan, not this forward's routing, as a compiled graph set would.
fn place_groups(
    model: &dyn ResidencyCostModel,
    experts: &[super::Expert],
    groups: &ExpertGroups,
    caps: &[usize],
    popularity: Option<&Vec<f64>>,
    n: usize,
    top_k: usize,
) -> Vec<Placement> {
    let Some(ex) = experts.first() else { return vec![Placement::Npu; groups.groups.len()] };
    let (h, f) = (ex.gate.k_in, ex.gate.n_out);
    let uniform = 1.0 / experts.len() as f64;
    let pop = |e: usize| popularity.and_then(|p| p.get(e)).copied().unwrap_or(uniform);
    let cap = |e: usize| caps.get(e).copied().unwrap_or(0);
    let expected = |e: usize| ((pop(e) * (n * top_k) as f64).round() as usize).min(cap(e));
    // Weights at 2 bytes per parameter (the NPU's f16 copy).
    let expert_bytes = (3 * h * f * 2) as u64;
    let costs: Vec<GroupCost> = groups
        .groups
        .iter()
        .map(|g| {
            let (mut c, mut e) =
                (GroupCost { npu_s: 0.0, cpu_s: 0.0, popularity: 0.0, weight_bytes: 0, npu_j: 0.0, cpu_j: 0.0, stream_s: 0.0 }, 0);
            for &x in g {
                let (ns, nj) = model.npu_expert(cap(x), h, f);
                let (cs, cj) = model.cpu_expert(expected(x), h, f);
                c.npu_s += ns;
                c.npu_j += nj;
                c.cpu_s += cs;
                c.cpu_j += cj;
                c.popularity += pop(x);
                e += 1;
            }
            c.weight_bytes = expert_bytes * e;
            c
        })
        .collect();
    ResidencyPlan::decide(&costs, model.dispatch(), model.npu_budget_bytes()).placement
}

/// The CPU lane: each expert of each group on exactly its kept rows, one after another on this
/// thread (no padding: the CPU has no static shapes). Returns (expert, outputs, FLOPs).
fn run_cpu_lane(
    experts: &[super::Expert],
    groups: &[&[usize]],
    routed: &[Vec<Assignment>],
    xn: &[f32],
    h: usize,
) -> Vec<(usize, Vec<f32>, f64)> {
    let mut outs = Vec::new();
    for &e in groups.iter().flat_map(|g| g.iter()) {
        let r = &routed[e];
        if r.is_empty() {
            continue;
        }
        let xin = gather(xn, h, r.iter().map(|a| a.token));
        let mut y = vec![0.0f32; r.len() * h];
        let f = swiglu_rows_serial(&experts[e], &xin, r.len(), &mut y);
        outs.push((e, y, f));
    }
    outs
}

fn gather(xn: &[f32], h: usize, tokens: impl Iterator<Item = usize>) -> Vec<f32> {
    let mut out = Vec::new();
    for t in tokens {
        out.extend_from_slice(&xn[t * h..(t + 1) * h]);
    }
    out
}

fn scatter_add(x: &mut [f32], h: usize, y: &[f32], routed: &[Assignment]) {
    for (row, a) in y.chunks_exact(h).zip(routed) {
        for (xi, yi) in x[a.token * h..(a.token + 1) * h].iter_mut().zip(row) {
            *xi += a.weight * yi;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn lin(rng: &mut rand_chacha::ChaCha8Rng, n: usize, k: usize) -> Linear {
        let s = 1.0 / (k as f32).sqrt();
        Linear::from_f32("w", n, k, (0..n * k).map(|_| rng.random_range(-s..s)).collect())
    }

    /// Launches cost 1 ms; an expert costs 1 us per row on the NPU and 100 us on the CPU.
    #[derive(Debug)]
    struct LaunchBound;
    impl ResidencyCostModel for LaunchBound {
        fn launch_s(&self) -> f64 {
            1e-3
        }
        fn sync_s(&self) -> f64 {
            1e-4
        }
        fn npu_expert(&self, rows: usize, _h: usize, _f: usize) -> (f64, f64) {
            (rows as f64 * 1e-6, 0.0)
        }
        fn cpu_expert(&self, rows: usize, _h: usize, _f: usize) -> (f64, f64) {
            (rows as f64 * 1e-4, 0.0)
        }
    }

    fn run(policy: MoePolicy, plan: Option<StaticPlan>, n: usize) -> (Vec<f32>, MoeStats) {
        run_with(policy, plan, n, None)
    }

    fn run_with(
        policy: MoePolicy,
        plan: Option<StaticPlan>,
        n: usize,
        residency: Option<Arc<dyn ResidencyCostModel>>,
    ) -> (Vec<f32>, MoeStats) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (h, f, e) = (16, 24, 6);
        let router = lin(&mut rng, e, h);
        let experts: Vec<Expert> = (0..e)
            .map(|_| Expert { gate: lin(&mut rng, f, h), up: lin(&mut rng, f, h), down: lin(&mut rng, h, f) })
            .collect();
        let xn: Vec<f32> = (0..n * h).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut x: Vec<f32> = (0..n * h).map(|_| rng.random_range(-1.0..1.0)).collect();
        let layer = MoeLayer { router: &router, experts: &experts, top_k: 2, norm_topk_prob: true };
        let exec = MoeExecution { policy, plan: plan.map(Arc::new), renormalise_dropped: true, residency };
        let mut stats = MoeStats::default();
        moe_ffn(&layer, &exec, 0, &mut x, &xn, n, h, &mut stats).unwrap();
        (x, stats)
    }

    #[test]
    fn policies_agree_when_nothing_is_dropped() {
        let n = 20;
        let (cpu, s_cpu) = run(MoePolicy::Cpu, None, n);
        let (naive, s_naive) = run(MoePolicy::Naive, None, n);
        // Capacity = every token: nothing dropped, only padding.
        let mut full = StaticPlan::uniform(1, 6, 2, &[n], 3);
        full.capacities.buckets[0].per_layer[0] = vec![n; 6];
        let (tiers, s_tiers) = run(MoePolicy::StaticTiers, Some(full), n);
        for (a, b) in cpu.iter().zip(&naive).chain(cpu.iter().zip(&tiers)) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert_eq!(s_cpu.routed, 40);
        assert_eq!(s_cpu.launches, 1);
        assert!(s_naive.launches >= 2 && s_naive.launches <= 6);
        assert_eq!(s_tiers.launches, 2, "two groups of three");
        assert_eq!(s_tiers.dropped, 0);
        assert_eq!(s_tiers.padded_rows, 6 * 20 - 40);
        assert_eq!(s_cpu.expert_tokens[0].iter().sum::<u64>(), 40);
    }

    #[test]
    fn residency_runs_cold_groups_on_a_second_thread_with_the_same_result() {
        let n = 20;
        let mut full = StaticPlan::uniform(1, 6, 2, &[n], 2);
        full.capacities.buckets[0].per_layer[0] = vec![n; 6];
        // Calibrated popularity: experts 0 and 1 take almost every token, the rest are cold.
        full.popularity[0] = vec![0.45, 0.45, 0.03, 0.03, 0.02, 0.02];
        full.groups[0] = ExpertGroups::by_popularity(&full.popularity[0], 2);
        let (resident, s0) = run_with(MoePolicy::StaticTiers, Some(full.clone()), n, None);
        let (with_lane, s1) = run_with(MoePolicy::StaticTiers, Some(full), n, Some(Arc::new(LaunchBound)));
        for (a, b) in resident.iter().zip(&with_lane) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        // The hot group's 20 padded rows cost more than a launch on the CPU, so it stays; the two cold
        // groups (predicted 1-2 rows each) move to the CPU lane when they have routed tokens.
        assert!(s1.cpu_lane_groups >= 1, "{s1:?}");
        assert_eq!(s1.launches + s1.cpu_lane_groups, s0.launches);
        assert_eq!(s1.layer_cpu_groups, vec![s1.cpu_lane_groups]);
        assert!(s1.layer_cpu_lane_s[0] >= 1e-4);
        let mut merged = MoeStats::default();
        merged.merge(&s1);
        merged.merge(&s1);
        assert_eq!(merged.cpu_lane_groups, 2 * s1.cpu_lane_groups);
        assert_eq!(merged.launches, 2 * s1.launches);
    }

    #[test]
    fn small_capacities_drop_and_change_the_output() {
        let n = 20;
        let mut plan = StaticPlan::uniform(1, 6, 2, &[n], 3);
        plan.capacities.buckets[0].per_layer[0] = vec![2; 6];
        let (cpu, _) = run(MoePolicy::Cpu, None, n);
        let (tiers, s) = run(MoePolicy::StaticTiers, Some(plan), n);
        // Six experts x capacity 2 keep at most 12 of the 40 routed pairs.
        assert_eq!(s.routed, 40);
        assert!(s.dropped >= 28, "{}", s.dropped);
        assert!(s.drop_rate() > 0.5);
        assert!(cpu.iter().zip(&tiers).any(|(a, b)| (a - b).abs() > 1e-4));
    }

    #[test]
    fn static_tiers_without_a_plan_is_an_error() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let router = lin(&mut rng, 2, 4);
        let experts = vec![Expert { gate: lin(&mut rng, 4, 4), up: lin(&mut rng, 4, 4), down: lin(&mut rng, 4, 4) }; 2];
        let layer = MoeLayer { router: &router, experts: &experts, top_k: 1, norm_topk_prob: false };
        let exec =
            MoeExecution { policy: MoePolicy::StaticTiers, plan: None, renormalise_dropped: false, residency: None };
        let (mut x, xn) = (vec![0.0; 8], vec![0.5; 8]);
        let err = moe_ffn(&layer, &exec, 0, &mut x, &xn, 2, 4, &mut MoeStats::default()).unwrap_err();
        assert!(err.to_string().contains("needs a plan"), "{err}");
    }
}
