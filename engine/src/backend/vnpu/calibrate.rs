//! Calibration: the cost model's predicted step time for a CPU profile (normally `host-cpu`) against
//! the measured wall time of the same forward on this machine, across block sizes.
//!
//! Timing is benchmark territory: tests only check the report's shape; `bench/` calls [`calibrate`]
//! on a quiet machine and records the error.

use std::time::Instant;

use rand::{Rng, SeedableRng};

use crate::error::{EngineError, Result};
use crate::kernels::linear::Linear;
use crate::memory::graph::{MatrixDType, Precision, StepShape};
use crate::memory::plan::PlacementPolicy;
use crate::model::tensor::DType;
use crate::model::weights::{FeedForward, LayerWeights, ModelWeights};
use crate::model::{ForwardRequest, KvMode, ModelConfig, Transformer};
use crate::trace::LanePower;

use super::cost::{ComputeTarget, ShapeBuckets};
use super::profile::DeviceProfile;
use super::sim::{LogitRows, SimOptions, StepSimulator};

/// One block size: measured against predicted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CalibrationPoint {
    /// Tokens in the block.
    pub tokens: usize,
    /// Context (cached prefix + block).
    pub context: usize,
    /// Best measured wall time of the forward, seconds.
    pub measured_s: f64,
    /// Cost-model prediction for the profile, seconds (simulated).
    pub predicted_s: f64,
    /// `(predicted - measured) / measured`.
    pub rel_error: f64,
    /// Prediction with the matrix rate replaced by the GEMM rate measured in the same run, seconds.
    pub probe_adjusted_s: f64,
    /// `(probe_adjusted - measured) / measured`: the cost model's structural error on a busy machine.
    pub probe_adjusted_rel_error: f64,
}

/// Measured vs predicted step times for one profile.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CalibrationReport {
    /// Profile predicted with.
    pub profile: String,
    /// Worker threads used for the measurement (= CPU cores in the prediction).
    pub threads: usize,
    /// Per block size.
    pub points: Vec<CalibrationPoint>,
    /// Mean of |rel_error|.
    pub mean_abs_rel_error: f64,
    /// Mean of |probe_adjusted_rel_error|.
    pub mean_abs_probe_adjusted_error: f64,
    /// Geometric mean of measured / predicted: multiply predictions by this to match the machine.
    pub time_scale: f64,
    /// GEMM rate measured in the same run (128×1024×1024 f32 `Linear::forward`), GFLOP/s: separates
    /// cost-model error from a machine that is busy with other work.
    pub probe_gemm_gflops: f64,
    /// The rate the profile assumes for that same GEMM, GFLOP/s.
    pub model_gemm_gflops: f64,
}

/// The precision this engine's CPU path runs a model at: f32 arithmetic, weights as stored.
pub fn engine_precision(model: &Transformer) -> Precision {
    let bits = match model.weights.lm_head.dtype() {
        DType::F32 => 32.0,
        DType::F16 | DType::BF16 => 16.0,
        DType::Q8_0 => 8.5,
        _ => 4.5,
    };
    Precision { matrix: MatrixDType::Fp32, weight_bits: bits, activation_bytes: 4.0, kv_bytes: 4.0 }
}

/// Measures `model` at each block size over a cached prefix of `prefix` positions (clamped to the
/// model's context) and compares with the cost model on `profile`'s CPU using this machine's thread
/// count. `reps` ≥ 1 timed runs per point; the best is kept.
pub fn calibrate(
    model: &Transformer,
    profile: &DeviceProfile,
    block_sizes: &[usize],
    prefix: usize,
    reps: usize,
) -> Result<CalibrationReport> {
    let threads = crate::threads::init(0);
    let cfg = &model.config;
    let precision = engine_precision(model);
    let target = ComputeTarget::cpu(profile, threads, &precision);
    let (probe_gemm_gflops, model_gemm_gflops) = gemm_probe(&target);
    let options = SimOptions {
        precision,
        placement: PlacementPolicy::SwapOptimized,
        logits: LogitRows::RequestedRows,
        layers_per_graph: cfg.n_layers,
        budget_bytes: u64::MAX,
        buckets: ShapeBuckets::dynamic(),
    };
    let mut probed = target.clone();
    probed.matrix_ops_per_s *= probe_gemm_gflops / model_gemm_gflops;
    let mut sim = StepSimulator::new(cfg.clone(), target, options.clone(), LanePower::from_profile(profile));
    let mut sim_probed = StepSimulator::new(cfg.clone(), probed, options, LanePower::from_profile(profile));
    let token = cfg.mask_token_id.unwrap_or(0).min(cfg.vocab.saturating_sub(1) as u32);
    let mut points = Vec::new();
    for &b in block_sizes {
        if b == 0 || b > cfg.max_seq {
            return Err(EngineError::InvalidRequest(format!(
                "block of {b} tokens outside the model context of {}",
                cfg.max_seq
            )));
        }
        let pre = prefix.min(cfg.max_seq - b);
        let mut cache = model.new_cache(pre + b);
        if pre > 0 {
            let toks = vec![token; pre];
            let pos: Vec<usize> = (0..pre).collect();
            model.forward(
                &ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &[], kv: KvMode::ReadWrite },
                Some(&mut cache),
            )?;
        }
        let toks = vec![token; b];
        let pos: Vec<usize> = (pre..pre + b).collect();
        let rows: Vec<usize> = (0..b).collect();
        let req = ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &rows, kv: KvMode::Read };
        model.forward(&req, Some(&mut cache))?; // warm-up
        let mut best = f64::INFINITY;
        for _ in 0..reps.max(1) {
            let t0 = Instant::now();
            model.forward(&req, Some(&mut cache))?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let shape = StepShape { tokens: b, context: pre + b, logit_rows: b };
        let predicted = sim.simulate(shape)?.time_s;
        let adjusted = sim_probed.simulate(shape)?.time_s;
        points.push(CalibrationPoint {
            tokens: b,
            context: pre + b,
            measured_s: best,
            predicted_s: predicted,
            rel_error: (predicted - best) / best,
            probe_adjusted_s: adjusted,
            probe_adjusted_rel_error: (adjusted - best) / best,
        });
    }
    let n = points.len().max(1) as f64;
    let mean_abs_rel_error = points.iter().map(|p| p.rel_error.abs()).sum::<f64>() / n;
    let mean_abs_probe_adjusted_error = points.iter().map(|p| p.probe_adjusted_rel_error.abs()).sum::<f64>() / n;
    let time_scale = (points.iter().map(|p| (p.measured_s / p.predicted_s).ln()).sum::<f64>() / n).exp();
    Ok(CalibrationReport {
        profile: profile.name.clone(),
        threads,
        points,
        mean_abs_rel_error,
        mean_abs_probe_adjusted_error,
        time_scale,
        probe_gemm_gflops,
        model_gemm_gflops,
    })
}

/// Measured and modelled GEMM rate for one 128×1024×1024 f32 product (best of 3 after a warm-up).
fn gemm_probe(target: &ComputeTarget) -> (f64, f64) {
    const M: usize = 128;
    const K: usize = 1024;
    let w: Vec<f32> = (0..K * K).map(|i| ((i % 97) as f32 - 48.0) / 97.0).collect();
    let lin = Linear::from_f32("probe", K, K, w);
    let x: Vec<f32> = (0..M * K).map(|i| ((i % 31) as f32 - 15.0) / 31.0).collect();
    let mut y = vec![0.0f32; M * K];
    lin.forward(&x, M, &mut y);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        lin.forward(&x, M, &mut y);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let flops = 2.0 * (M * K * K) as f64;
    (flops / best / 1e9, target.matrix_ops_per_s * target.matrix_efficiency_at(M) / 1e9)
}

/// A transformer of `cfg`'s shape with random f32 weights (for calibration without a checkpoint).
pub fn synthetic_transformer(cfg: &ModelConfig, seed: u64) -> Result<Transformer> {
    cfg.validate(std::path::Path::new("<synthetic>"))?;
    if cfg.moe.is_some() {
        return Err(EngineError::InvalidRequest("synthetic models are dense only".into()));
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut lin = |name: &str, n: usize, k: usize| {
        let scale = 1.0 / (k as f32).sqrt();
        let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-scale..scale)).collect();
        Linear::from_f32(name, n, k, w)
    };
    let (h, q, kv) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
    let layers = (0..cfg.n_layers)
        .map(|l| LayerWeights {
            attn_norm: vec![1.0; h],
            wq: lin(&format!("l{l}.wq"), q, h),
            wk: lin(&format!("l{l}.wk"), kv, h),
            wv: lin(&format!("l{l}.wv"), kv, h),
            wo: lin(&format!("l{l}.wo"), h, q),
            bq: None,
            bk: None,
            bv: None,
            q_norm: None,
            k_norm: None,
            ffn_norm: vec![1.0; h],
            ffn: FeedForward::Dense {
                gate: lin(&format!("l{l}.gate"), cfg.ffn, h),
                up: lin(&format!("l{l}.up"), cfg.ffn, h),
                down: lin(&format!("l{l}.down"), h, cfg.ffn),
            },
        })
        .collect();
    let mut plain = cfg.clone();
    plain.qkv_bias = false;
    plain.qk_norm = false;
    let weights = ModelWeights {
        embedding: lin("embedding", cfg.vocab, h),
        layers,
        final_norm: vec![1.0; h],
        lm_head: lin("lm_head", cfg.vocab, h),
        tied_head: false,
    };
    Ok(Transformer::new(plain, weights))
}
