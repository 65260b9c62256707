//! A seeded synthetic router: routing loads at real MoE shapes without running the real model.
//!
//! The "model" is a per-layer expert popularity drawn once from a symmetric Dirichlet (fixed by a
//! model seed, so calibration and evaluation see the same model). Each prompt perturbs that
//! popularity with a log-normal jitter (prompts differ in topic, so loads shift between prompts),
//! and each token then picks `top_k` distinct experts with probability following the perturbed
//! popularity (Gumbel top-k = sampling without replacement). Both parameters are estimates: no
//! published per-layer load distribution of these models was available.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::moe::routing::{Assignment, Routing};
use crate::moe::{MoeCalibration, MoeShape};

/// The synthetic router's parameters (all estimates).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RouterParams {
    /// Concentration of the symmetric Dirichlet the per-layer popularity is drawn from: 1.0 is the
    /// uniform distribution over popularity vectors (the hottest of E experts gets about
    /// `H(E)` times the mean share, ~5.4x for 128 experts).
    pub dirichlet_alpha: f64,
    /// Standard deviation of the per-prompt log-normal jitter of each expert's popularity.
    pub prompt_jitter_sigma: f64,
    /// Seed of the per-layer popularity (the "model").
    pub model_seed: u64,
}

impl Default for RouterParams {
    fn default() -> Self {
        RouterParams { dirichlet_alpha: 1.0, prompt_jitter_sigma: 0.3, model_seed: 0x006d_6f65_5f73_696d }
    }
}

/// One prompt routed through every layer.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRouting {
    /// Per layer.
    pub layers: Vec<Routing>,
    /// Per token: how much leaving an expert out would change it (dropped lowest first).
    pub saliency: Vec<f32>,
}

impl PromptRouting {
    /// Prompt tokens.
    pub fn tokens(&self) -> usize {
        self.saliency.len()
    }
    /// Routed (token, expert) pairs over all layers.
    pub fn pairs(&self) -> usize {
        self.layers.iter().map(Routing::pairs).sum()
    }
}

/// The synthetic model's router.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyntheticRouter {
    pub params: RouterParams,
    pub n_layers: usize,
    pub n_experts: usize,
    pub top_k: usize,
    /// `popularity[layer][expert]`, summing to one per layer.
    pub popularity: Vec<Vec<f64>>,
}

impl SyntheticRouter {
    /// The router of a model of `shape`, its popularity drawn from `params.model_seed`.
    pub fn new(shape: &MoeShape, params: RouterParams) -> Result<Self> {
        if shape.n_experts == 0 || shape.top_k == 0 || shape.top_k > shape.n_experts {
            return Err(EngineError::InvalidRequest(format!(
                "{}: a router needs 1 <= top_k <= experts (top_k {}, experts {})",
                shape.name, shape.top_k, shape.n_experts
            )));
        }
        let (alpha, sigma) = (params.dirichlet_alpha, params.prompt_jitter_sigma);
        if alpha.is_nan() || alpha <= 0.0 || sigma.is_nan() || sigma < 0.0 {
            return Err(EngineError::InvalidRequest(
                "router parameters: the Dirichlet concentration must be positive, the jitter non-negative".into(),
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(params.model_seed);
        let popularity = (0..shape.n_layers)
            .map(|_| {
                let draws: Vec<f64> = (0..shape.n_experts).map(|_| gamma(&mut rng, params.dirichlet_alpha)).collect();
                let total: f64 = draws.iter().sum();
                draws.iter().map(|d| d / total.max(f64::MIN_POSITIVE)).collect()
            })
            .collect();
        Ok(SyntheticRouter {
            params,
            n_layers: shape.n_layers,
            n_experts: shape.n_experts,
            top_k: shape.top_k,
            popularity,
        })
    }

    /// Routes prompt number `index` of `tokens` tokens drawn from `seed`; the same
    /// (seed, index, tokens) always gives the same routing.
    pub fn route_prompt(&self, tokens: usize, seed: u64, index: u64) -> PromptRouting {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, index, tokens as u64));
        let saliency: Vec<f32> = (0..tokens).map(|_| (0.5 * normal(&mut rng)).exp() as f32).collect();
        let (e, k) = (self.n_experts, self.top_k);
        let mut keys: Vec<(f64, usize)> = Vec::with_capacity(e);
        let layers = self
            .popularity
            .iter()
            .map(|pop| {
                let log_p: Vec<f64> = pop
                    .iter()
                    .map(|p| p.max(1e-300).ln() + self.params.prompt_jitter_sigma * normal(&mut rng))
                    .collect();
                let mut per_expert: Vec<Vec<Assignment>> = vec![Vec::new(); e];
                for t in 0..tokens {
                    keys.clear();
                    keys.extend(log_p.iter().enumerate().map(|(i, lp)| (lp + gumbel(&mut rng), i)));
                    // The k largest keys, in no particular order (Gumbel top-k).
                    keys.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
                    for &(_, ei) in &keys[..k] {
                        per_expert[ei].push(Assignment { token: t, weight: 1.0 / k as f32 });
                    }
                }
                Routing { per_expert, tokens, top_k: k }
            })
            .collect();
        PromptRouting { layers, saliency }
    }

    /// A calibration from `prompts_per_length` prompts of each length in `lengths`, drawn from
    /// `seed`, bucketed like the engine's static plans.
    pub fn calibrate(
        &self,
        lengths: &[usize],
        prompts_per_length: usize,
        seed: u64,
        buckets: &[usize],
    ) -> Result<MoeCalibration> {
        let mut cal = MoeCalibration::new(self.n_layers, self.n_experts, self.top_k, buckets)?;
        for &len in lengths {
            for i in 0..prompts_per_length as u64 {
                let r = self.route_prompt(len, seed, i);
                let counts: Vec<Vec<u64>> =
                    r.layers.iter().map(|l| l.counts().into_iter().map(|c| c as u64).collect()).collect();
                cal.record(len, &counts)?;
            }
        }
        Ok(cal)
    }
}

/// One 64-bit seed from a (seed, prompt, length) triple (SplitMix64 finaliser over each part).
fn mix(seed: u64, index: u64, tokens: u64) -> u64 {
    let step = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    step(step(step(seed) ^ index) ^ tokens)
}

/// Uniform in (0, 1), never exactly 0 (the logarithms below need that).
fn open_unit(rng: &mut ChaCha8Rng) -> f64 {
    loop {
        let u: f64 = rng.random();
        if u > 0.0 {
            return u;
        }
    }
}

/// Standard normal (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let (u1, u2) = (open_unit(rng), open_unit(rng));
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Standard Gumbel.
fn gumbel(rng: &mut ChaCha8Rng) -> f64 {
    -(-open_unit(rng).ln()).ln()
}

/// Gamma(shape, 1) by Marsaglia-Tsang (shape < 1 boosted by `U^(1/shape)`); normalised draws form
/// a Dirichlet sample.
fn gamma(rng: &mut ChaCha8Rng, shape: f64) -> f64 {
    if shape < 1.0 {
        return gamma(rng, shape + 1.0) * open_unit(rng).powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = open_unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MoeShape {
        MoeShape { n_layers: 3, n_experts: 16, top_k: 4, ..MoeShape::QWEN3_30B_A3B }
    }

    #[test]
    fn tokens_pick_top_k_distinct_experts_deterministically() {
        let r = SyntheticRouter::new(&small(), RouterParams::default()).unwrap();
        let a = r.route_prompt(50, 7, 0);
        assert_eq!(a, r.route_prompt(50, 7, 0));
        assert_ne!(a, r.route_prompt(50, 8, 0));
        assert_eq!(a.pairs(), 3 * 50 * 4);
        for layer in &a.layers {
            for t in 0..50 {
                let n = layer.per_expert.iter().filter(|l| l.iter().any(|x| x.token == t)).count();
                assert_eq!(n, 4, "token {t} has 4 distinct experts");
            }
        }
        for p in &r.popularity {
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn popular_experts_receive_more_tokens() {
        let params = RouterParams { prompt_jitter_sigma: 0.0, ..RouterParams::default() };
        let r = SyntheticRouter::new(&small(), params).unwrap();
        let routed = r.route_prompt(2000, 1, 0);
        let pop = &r.popularity[0];
        let hot = (0..16).max_by(|&a, &b| pop[a].total_cmp(&pop[b])).unwrap();
        let cold = (0..16).min_by(|&a, &b| pop[a].total_cmp(&pop[b])).unwrap();
        let counts = routed.layers[0].counts();
        assert!(counts[hot] > counts[cold], "{counts:?}");
        let cal = r.calibrate(&[64], 2, 3, &[64, 128]).unwrap();
        assert_eq!(cal.total_prompts(), 2);
    }
}
