//! The host side of an MoE layer on QNN: routing (router FullyConnected, softmax top-k), static
//! capacities and saliency dropping (`moe::capacity`), gathering each expert group's tokens into
//! its unified buffer and scattering the group graph's outputs back with the gate weights.
//!
//! Capacities come from the model's MoE execution: under [`MoePolicy::StaticTiers`] its plan's
//! capacities for the forward's token count (as the CPU forward uses them, so the same pairs are
//! dropped), capped at the QNN token bucket (no expert can receive more rows than the block has);
//! under any other policy every expert gets the whole token bucket, so nothing is dropped.

use std::sync::Arc;

use super::lower_moe::Segment;
use crate::error::{EngineError, Result};
use crate::model::weights::FeedForward;
use crate::model::{ModelConfig, Transformer};
use crate::moe::capacity::{enforce_capacity, DropReport};
use crate::moe::ffn::{MoeExecution, StaticPlan, DEFAULT_GROUP_SIZE};
use crate::moe::routing::{saliency, Routing};
use crate::moe::{ExpertGroups, MoePolicy, MoeStats};

/// Capacities and groups one forward runs its MoE layers under.
pub struct MoeShapes {
    plan: Option<Arc<StaticPlan>>,
    /// Groups when there is no static plan: experts in index order, [`DEFAULT_GROUP_SIZE`] each.
    fallback: ExpertGroups,
    n_experts: usize,
    /// Scale a token's remaining gate weights back when capacity dropped some of its experts.
    pub renormalise: bool,
}

impl MoeShapes {
    /// From the model's MoE execution (read per forward: it can change between forwards).
    pub fn new(exec: &MoeExecution, n_layers: usize, n_experts: usize) -> Result<Self> {
        let plan = match exec.policy {
            MoePolicy::StaticTiers => {
                let plan = exec.plan.clone().ok_or_else(|| {
                    EngineError::InvalidRequest(
                        "the static-tiers MoE policy needs a plan (calibration or uniform)".into(),
                    )
                })?;
                plan.check(n_layers, n_experts)?;
                Some(plan)
            }
            MoePolicy::Cpu | MoePolicy::Naive => None,
        };
        Ok(MoeShapes {
            plan,
            fallback: ExpertGroups::by_popularity(&vec![1.0; n_experts], DEFAULT_GROUP_SIZE),
            n_experts,
            renormalise: exec.renormalise_dropped,
        })
    }

    /// Per-expert capacities of `layer` for a forward of `tokens` rows in a token bucket of
    /// `bucket` rows (each in `0..=bucket`).
    pub fn capacities(&self, tokens: usize, layer: usize, bucket: usize) -> Result<Vec<usize>> {
        match &self.plan {
            Some(p) => Ok(p.capacities.capacities(tokens, layer)?.into_iter().map(|c| c.min(bucket)).collect()),
            None => Ok(vec![bucket; self.n_experts]),
        }
    }

    /// The expert groups of `layer`.
    pub fn groups(&self, layer: usize) -> Result<&ExpertGroups> {
        match &self.plan {
            Some(p) => p
                .groups
                .get(layer)
                .ok_or_else(|| EngineError::InvalidRequest(format!("MoE static plan has no groups for layer {layer}"))),
            None => Ok(&self.fallback),
        }
    }
}

/// One MoE layer's routing after capacity, with what it did.
pub struct Routed {
    /// Per expert, the kept tokens (ascending rows) and their gate weights.
    pub routing: Routing,
    /// What capacity enforcement dropped and padded.
    pub report: DropReport,
    /// Tokens per expert before capacity (for calibration counters).
    pub counts: Vec<usize>,
}

/// Routes the `n` normed rows `xn` of layer `layer` (router on the host, f32) and enforces
/// `capacities`, dropping the least salient tokens (saliency = L2 norm of the residual rows `x`
/// entering the feed-forward, as on the CPU).
pub fn route(
    model: &Transformer,
    layer: usize,
    xn: &[f32],
    x: &[f32],
    n: usize,
    capacities: &[usize],
    renormalise: bool,
) -> Result<Routed> {
    let c = &model.config;
    let (router, moe) = match (&model.weights.layers.get(layer).map(|l| &l.ffn), &c.moe) {
        (Some(FeedForward::Moe { router, .. }), Some(m)) => (router, m),
        _ => return Err(EngineError::InvalidRequest(format!("layer {layer} is not an MoE layer"))),
    };
    let (h, e) = (c.hidden, moe.n_experts);
    if e == 0 || moe.top_k == 0 || router.n_out != e {
        return Err(EngineError::InvalidRequest(format!("MoE layer {layer} has no experts to route to")));
    }
    if xn.len() < n * h || x.len() < n * h {
        return Err(EngineError::Backend {
            backend: "qnn".into(),
            reason: format!("MoE layer {layer}: {} normed / {} residual values for {n} rows", xn.len(), x.len()),
        });
    }
    let mut scores = vec![0.0f32; n * e];
    router.forward(&xn[..n * h], n, &mut scores);
    let mut routing = Routing::from_scores(&mut scores, n, e, moe.top_k, moe.norm_topk_prob);
    let counts = routing.counts();
    let report = enforce_capacity(&mut routing, capacities, &saliency(x, n, h), renormalise);
    Ok(Routed { routing, report, counts })
}

/// The segments of `group` in the unified buffer: members with a non-zero capacity, in group
/// order. A member of capacity 0 can hold no token, so it has no segment.
pub fn segments(group: &[usize], capacities: &[usize]) -> Vec<Segment> {
    group
        .iter()
        .filter_map(|&e| capacities.get(e).copied().filter(|&c| c > 0).map(|rows| Segment { expert: e, rows }))
        .collect()
}

/// Whether any member of `group` kept a token.
pub fn has_tokens(group: &[usize], routing: &Routing) -> bool {
    group.iter().any(|&e| routing.per_expert.get(e).is_some_and(|r| !r.is_empty()))
}

/// The unified buffer `[Σ rows, h]`: each segment's routed rows of `xn`, zero-padded.
pub fn gather(segs: &[Segment], routing: &Routing, xn: &[f32], h: usize) -> Vec<f32> {
    let total: usize = segs.iter().map(|s| s.rows).sum();
    let mut buf = vec![0.0f32; total * h];
    let mut at = 0;
    for s in segs {
        let routed = routing.per_expert.get(s.expert).map_or(&[][..], Vec::as_slice);
        // `enforce_capacity` keeps at most `rows` tokens per expert; `take` makes that local.
        for (i, a) in routed.iter().take(s.rows).enumerate() {
            let dst = (at + i) * h;
            buf[dst..dst + h].copy_from_slice(&xn[a.token * h..(a.token + 1) * h]);
        }
        at += s.rows;
    }
    buf
}

/// Adds each used row of the group output `y` (`[Σ rows, h]`) into its token's residual row of
/// `x`, scaled by the gate weight; padding rows are never read.
pub fn scatter_add(segs: &[Segment], routing: &Routing, y: &[f32], x: &mut [f32], h: usize) {
    let mut at = 0;
    for s in segs {
        let routed = routing.per_expert.get(s.expert).map_or(&[][..], Vec::as_slice);
        for (i, a) in routed.iter().take(s.rows).enumerate() {
            let row = &y[(at + i) * h..(at + i + 1) * h];
            for (xi, yi) in x[a.token * h..(a.token + 1) * h].iter_mut().zip(row) {
                *xi += a.weight * yi;
            }
        }
        at += s.rows;
    }
}

/// The counters of one MoE layer execution, in the CPU forward's terms (`launches` = groups run).
pub fn layer_stats(layer: usize, routed: &Routed, launches: usize) -> MoeStats {
    let mut expert_tokens = vec![Vec::new(); layer];
    expert_tokens.push(routed.counts.iter().map(|&c| c as u64).collect());
    MoeStats {
        layer_runs: 1,
        routed: routed.counts.iter().sum::<usize>() as u64,
        dropped: routed.report.dropped as u64,
        padded_rows: routed.report.padded as u64,
        launches: launches as u64,
        tokens_without_expert: routed.report.tokens_without_expert as u64,
        expert_tokens,
        layer_launches: {
            let mut l = vec![0; layer + 1];
            l[layer] = launches as u64;
            l
        },
        ..Default::default()
    }
}

/// `(layers, experts)` of a model whose every layer is MoE, as the static plan needs.
pub fn moe_shape(model: &Transformer, c: &ModelConfig) -> Result<(usize, usize)> {
    model.moe_shape().ok_or_else(|| EngineError::Unsupported {
        backend: "qnn".into(),
        what: format!("{:?} with a mix of dense and MoE layers", c.arch),
    })
}

#[cfg(test)]
mod tests {
    use super::super::lower_moe::Segment;
    use super::*;
    use crate::moe::routing::Assignment;

    fn routing(lists: Vec<Vec<(usize, f32)>>, tokens: usize) -> Routing {
        let per_expert = lists
            .into_iter()
            .map(|l| l.into_iter().map(|(token, weight)| Assignment { token, weight }).collect())
            .collect();
        Routing { per_expert, tokens, top_k: 1 }
    }

    #[test]
    fn gather_pads_segments_and_scatter_weights_rows_back() {
        let h = 2;
        let xn = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0];
        // Expert 2 holds tokens 0 and 2, expert 0 token 1; expert 1 is closed (capacity 0).
        let r = routing(vec![vec![(1, 0.5)], vec![], vec![(0, 1.0), (2, 2.0)]], 3);
        let segs = segments(&[2, 1, 0], &[2, 0, 3]);
        assert_eq!(segs, vec![Segment { expert: 2, rows: 3 }, Segment { expert: 0, rows: 2 }]);
        let buf = gather(&segs, &r, &xn, h);
        assert_eq!(buf, vec![1.0, 1.0, 3.0, 3.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0]);
        // Identity "experts" plus garbage in the padding rows, which must not be read.
        let mut y = buf.clone();
        y[4] = 99.0;
        y[9] = 99.0;
        let mut x = vec![0.0; 6];
        scatter_add(&segs, &r, &y, &mut x, h);
        assert_eq!(x, vec![1.0, 1.0, 1.0, 1.0, 6.0, 6.0]);
        assert!(has_tokens(&[1, 2], &r));
        assert!(!has_tokens(&[1], &r));
    }

    #[test]
    fn without_a_static_plan_every_expert_holds_the_bucket() {
        let exec = MoeExecution::default();
        let s = MoeShapes::new(&exec, 2, 6).unwrap();
        assert_eq!(s.capacities(5, 1, 8).unwrap(), vec![8; 6]);
        assert_eq!(s.groups(0).unwrap().groups, vec![vec![0, 1, 2, 3], vec![4, 5]]);
        let tiers =
            MoeExecution { policy: MoePolicy::StaticTiers, plan: None, renormalise_dropped: true, residency: None };
        assert!(MoeShapes::new(&tiers, 2, 6).is_err());
        let plan = Arc::new(StaticPlan::uniform(2, 6, 2, &[4, 64], 3));
        let tiers = MoeExecution {
            policy: MoePolicy::StaticTiers,
            plan: Some(plan),
            renormalise_dropped: true,
            residency: None,
        };
        let s = MoeShapes::new(&tiers, 2, 6).unwrap();
        // Bucket 64's uniform rung is above the 8-row token bucket: capped at 8.
        assert!(s.capacities(20, 0, 8).unwrap().iter().all(|&c| c == 8));
        assert_eq!(s.groups(1).unwrap().groups.len(), 2);
    }
}
