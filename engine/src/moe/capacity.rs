//! Static capacity tiers: every expert of every layer gets a fixed row count per prompt-length
//! bucket, taken from a small ladder, so each expert graph has one static shape.
//!
//! An expert's tier is the smallest rung that covers `factor ×` its calibrated mean load. (Covering
//! the busiest calibration prompt instead drops almost nothing but pads every graph by ~1.8x on
//! the embedded MoE model, so the mean with headroom is the default.) At run time tokens beyond an
//! expert's capacity are dropped lowest saliency first ([`enforce_capacity`]); rows below it are
//! padding, never a recompile.

use serde::{Deserialize, Serialize};

use super::calibration::MoeCalibration;
use super::routing::Routing;
use crate::error::{EngineError, Result};

/// The ladder of capacities, as multiples of an expert's uniform share `bucket × top_k / experts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityTiers {
    /// Ascending multiples; the last rung is always capped at the bucket's token count.
    pub multiples: Vec<f64>,
    /// Headroom over the calibrated mean load (1.0-1.25 is common MoE practice).
    pub factor: f64,
}

impl Default for CapacityTiers {
    /// Ten rungs from a quarter to eight times the uniform share (about 1.5x apart, so a tier
    /// pads an expert by at most half its load), 1.25x headroom over the calibrated mean.
    fn default() -> Self {
        CapacityTiers { multiples: vec![0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0], factor: 1.25 }
    }
}

impl CapacityTiers {
    /// The rung capacities (rows) for a bucket, ascending, distinct, each in `1..=bucket`.
    pub fn rungs(&self, bucket: usize, top_k: usize, n_experts: usize) -> Vec<usize> {
        let share = (bucket * top_k) as f64 / n_experts.max(1) as f64;
        let mut r: Vec<usize> =
            self.multiples.iter().map(|m| ((m * share).ceil() as usize).clamp(1, bucket.max(1))).collect();
        r.push(bucket.max(1));
        r.sort_unstable();
        r.dedup();
        r
    }

    /// The smallest rung holding `need` rows (the top rung if none does).
    pub fn tier_for(rungs: &[usize], need: f64) -> usize {
        rungs.iter().copied().find(|&c| c as f64 >= need).unwrap_or_else(|| rungs.last().copied().unwrap_or(1))
    }
}

/// Capacities of every expert of every layer for one bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketCapacities {
    /// Prompt tokens the bucket's graphs are compiled for.
    pub bucket: usize,
    /// `per_layer[layer][expert]`: rows.
    pub per_layer: Vec<Vec<usize>>,
}

/// Static capacities for every bucket: the shapes the expert graphs are compiled for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityPlan {
    pub tiers: CapacityTiers,
    pub buckets: Vec<BucketCapacities>,
}

impl CapacityPlan {
    /// Capacities from a calibration: the tier covering `factor × mean load`.
    pub fn from_calibration(cal: &MoeCalibration, tiers: &CapacityTiers) -> Self {
        let buckets = cal
            .buckets
            .iter()
            .enumerate()
            .map(|(b, &bucket)| {
                let rungs = tiers.rungs(bucket, cal.top_k, cal.n_experts);
                let per_layer = (0..cal.n_layers)
                    .map(|li| {
                        let pop = cal.popularity(b, li);
                        pop.iter()
                            .map(|p| CapacityTiers::tier_for(&rungs, tiers.factor * p * (bucket * cal.top_k) as f64))
                            .collect()
                    })
                    .collect();
                BucketCapacities { bucket, per_layer }
            })
            .collect();
        CapacityPlan { tiers: tiers.clone(), buckets }
    }

    /// Capacities without a calibration: every expert at the rung covering `factor ×` the uniform
    /// share (what a plan can assume before it has seen the model route anything).
    pub fn uniform(n_layers: usize, n_experts: usize, top_k: usize, buckets: &[usize], tiers: &CapacityTiers) -> Self {
        let buckets = buckets
            .iter()
            .map(|&bucket| {
                let rungs = tiers.rungs(bucket, top_k, n_experts);
                let need = tiers.factor * (bucket * top_k) as f64 / n_experts.max(1) as f64;
                let cap = CapacityTiers::tier_for(&rungs, need);
                BucketCapacities { bucket, per_layer: vec![vec![cap; n_experts]; n_layers] }
            })
            .collect();
        CapacityPlan { tiers: tiers.clone(), buckets }
    }

    /// Capacities for a forward of `tokens` rows in `layer`: the first bucket that fits; beyond the
    /// largest bucket its graphs run `ceil(tokens / bucket)` times, so capacities scale by that.
    pub fn capacities(&self, tokens: usize, layer: usize) -> Result<Vec<usize>> {
        let Some(last) = self.buckets.last() else {
            return Err(EngineError::InvalidRequest("MoE capacity plan has no buckets".into()));
        };
        let (b, times) = match self.buckets.iter().find(|b| tokens <= b.bucket) {
            Some(b) => (b, 1),
            None => (last, tokens.div_ceil(last.bucket.max(1))),
        };
        let caps = b.per_layer.get(layer).ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "MoE capacity plan has no layer {layer} ({} layers)",
                b.per_layer.len()
            ))
        })?;
        Ok(caps.iter().map(|c| c * times).collect())
    }

    /// Distinct expert shapes (rows) across the plan: how many graphs a compiler must build.
    pub fn distinct_shapes(&self) -> usize {
        let mut all: Vec<usize> = self.buckets.iter().flat_map(|b| b.per_layer.iter().flatten().copied()).collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }
}

/// What enforcing capacities did to one routing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropReport {
    /// (token, expert) pairs dropped.
    pub dropped: usize,
    /// Padding rows the static shapes add (capacity − kept, summed over experts).
    pub padded: usize,
    /// Tokens that lost every expert (they pass through the residual only).
    pub tokens_without_expert: usize,
}

/// Keeps at most `capacities[e]` tokens per expert, the most salient ones; with `renormalise`, a
/// token that lost experts has its remaining weights scaled back to its original total.
pub fn enforce_capacity(
    routing: &mut Routing,
    capacities: &[usize],
    saliency: &[f32],
    renormalise: bool,
) -> DropReport {
    let n = routing.tokens;
    let mut before = vec![0.0f32; n];
    for a in routing.per_expert.iter().flatten() {
        before[a.token] += a.weight;
    }
    let mut report = DropReport::default();
    for (e, list) in routing.per_expert.iter_mut().enumerate() {
        let cap = capacities.get(e).copied().unwrap_or(0);
        if list.len() > cap {
            // Most salient first (ties: earlier token), keep `cap`, restore row order.
            list.sort_by(|a, b| {
                let (sa, sb) =
                    (saliency.get(a.token).copied().unwrap_or(0.0), saliency.get(b.token).copied().unwrap_or(0.0));
                sb.total_cmp(&sa).then(a.token.cmp(&b.token))
            });
            report.dropped += list.len() - cap;
            list.truncate(cap);
            list.sort_by_key(|a| a.token);
        }
        report.padded += cap - list.len();
    }
    let mut after = vec![0.0f32; n];
    let mut kept = vec![0usize; n];
    for a in routing.per_expert.iter().flatten() {
        after[a.token] += a.weight;
        kept[a.token] += 1;
    }
    report.tokens_without_expert = kept.iter().filter(|&&k| k == 0).count();
    if renormalise && report.dropped > 0 {
        for a in routing.per_expert.iter_mut().flatten() {
            let t = a.token;
            if after[t] > 0.0 && after[t] < before[t] {
                a.weight *= before[t] / after[t];
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::super::routing::Assignment;
    use super::*;

    fn routing(lists: Vec<Vec<(usize, f32)>>, tokens: usize) -> Routing {
        Routing {
            per_expert: lists
                .into_iter()
                .map(|l| l.into_iter().map(|(token, weight)| Assignment { token, weight }).collect())
                .collect(),
            tokens,
            top_k: 2,
        }
    }

    #[test]
    fn rungs_are_static_and_bounded() {
        let t = CapacityTiers::default();
        let r = t.rungs(64, 2, 8); // uniform share 16
        assert_eq!(r, vec![4, 8, 12, 16, 24, 32, 48, 64]);
        assert_eq!(CapacityTiers::tier_for(&r, 17.0), 24);
        assert_eq!(CapacityTiers::tier_for(&r, 1000.0), 64);
    }

    #[test]
    fn drops_least_salient_and_renormalises() {
        // Expert 0 has three tokens but capacity 2: token 1 (least salient) is dropped.
        let mut r = routing(vec![vec![(0, 0.5), (1, 0.6), (2, 0.5)], vec![(0, 0.5), (1, 0.4), (2, 0.5)]], 3);
        let sal = [3.0, 1.0, 2.0];
        let rep = enforce_capacity(&mut r, &[2, 3], &sal, true);
        assert_eq!(rep, DropReport { dropped: 1, padded: 0, tokens_without_expert: 0 });
        assert_eq!(r.per_expert[0].iter().map(|a| a.token).collect::<Vec<_>>(), vec![0, 2]);
        let w1: f32 = r.per_expert.iter().flatten().filter(|a| a.token == 1).map(|a| a.weight).sum();
        assert!((w1 - 1.0).abs() < 1e-6, "renormalised to the original total: {w1}");

        let mut r = routing(vec![vec![(0, 0.5), (1, 0.6), (2, 0.5)], vec![(0, 0.5), (1, 0.4), (2, 0.5)]], 3);
        enforce_capacity(&mut r, &[2, 4], &sal, false);
        let w1: f32 = r.per_expert.iter().flatten().filter(|a| a.token == 1).map(|a| a.weight).sum();
        assert!((w1 - 0.4).abs() < 1e-6, "kept weight only: {w1}");
        // Token 1 kept only expert 1; closing expert 1 leaves it without any.
        let rep = enforce_capacity(&mut r, &[4, 0], &sal, false);
        assert_eq!(rep.tokens_without_expert, 1);
        assert_eq!(rep.padded, 2);
    }

    #[test]
    fn plan_from_calibration_follows_popularity() {
        let mut cal = MoeCalibration::new(1, 4, 2, &[8, 16]).unwrap();
        cal.record(8, &[vec![8, 4, 4, 0]]).unwrap();
        let plan = CapacityPlan::from_calibration(&cal, &CapacityTiers::default());
        let caps = plan.capacities(8, 0).unwrap();
        assert_eq!(caps[0], 8, "the hot expert gets every token");
        assert!(caps[1] >= 5 && caps[2] >= 5, "1.25x the mean load of 4: {caps:?}");
        assert!(caps[3] >= 1 && caps[3] < caps[1], "a cold expert gets a small rung: {caps:?}");
        // Longer than the largest bucket: its graphs run twice.
        let c32 = plan.capacities(32, 0).unwrap();
        let c16 = plan.capacities(16, 0).unwrap();
        assert_eq!(c32, c16.iter().map(|c| c * 2).collect::<Vec<_>>());
        assert!(plan.capacities(8, 3).is_err());
        let u = CapacityPlan::uniform(2, 4, 2, &[8], &CapacityTiers::default());
        assert_eq!(u.capacities(8, 1).unwrap(), vec![6; 4], "the rung over 1.25x the uniform share of 4");
    }
}
