//! Calibration: the cost model's predicted step time for a CPU profile (normally `host-cpu`) against
//! the measured wall time of the same forward on this machine, across block sizes.
//!
//! Timing is benchmark territory: tests only check the report's shape; `bench/` calls [`calibrate`]
//! and records the error. Calibration is **not validation**: it checks the cost model's structure
//! on this machine's CPU only; phone numbers are checked against published measurements in
//! [`super::validation`].
//!
//! Sampling: every repetition takes one GEMM probe sample and one sample of every block size, in
//! the same loop, so all of them see the same machine load and have equal sample counts; medians
//! are reported with their spread (min, max). The probe's rate as a fraction of the profile's
//! arithmetic peak must not exceed 1: a fraction above 1 means the measurement (or the peak) is
//! wrong, and callers must refuse it rather than record it ([`CalibrationReport::check`]).

use std::time::Instant;

use rand::{Rng, SeedableRng};

use crate::error::{EngineError, Result};
use crate::kernels::linear::Linear;
use crate::memory::graph::{MatrixDType, Precision, StepShape};
use crate::memory::plan::PlacementPolicy;
use crate::tensor::DType;
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
    /// Median measured wall time of the forward, seconds.
    pub measured_s: f64,
    /// Fastest and slowest sample, seconds.
    pub measured_min_s: f64,
    /// See `measured_min_s`.
    pub measured_max_s: f64,
    /// Samples taken.
    pub samples: usize,
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
    /// GEMM rate measured in the same loop (128×1024×1024 f32 `Linear::forward`), median over the
    /// samples, GFLOP/s: separates cost-model error from a machine that is busy with other work.
    pub probe_gemm_gflops: f64,
    /// Slowest and fastest probe sample, GFLOP/s.
    pub probe_gemm_gflops_min: f64,
    /// See `probe_gemm_gflops_min`.
    pub probe_gemm_gflops_max: f64,
    /// Probe samples (equal to every point's `samples`).
    pub probe_samples: usize,
    /// The rate the profile assumes for that same GEMM (peak × efficiency), GFLOP/s.
    pub model_gemm_gflops: f64,
    /// The profile's arithmetic f32 peak on the threads used, GFLOP/s.
    pub peak_gflops: f64,
    /// `probe_gemm_gflops / peak_gflops` (median sample); above 1 is a failed measurement.
    pub probe_peak_fraction: f64,
    /// The fastest probe sample over the peak.
    pub probe_peak_fraction_max: f64,
}

impl CalibrationReport {
    /// Refuses a report whose probe ran faster than the profile's peak (a fraction above 1 is a
    /// failed measurement or a wrong peak, never a result).
    pub fn check(&self) -> Result<()> {
        if !(self.probe_peak_fraction_max <= 1.0) {
            return Err(EngineError::InvalidRequest(format!(
                "calibration: the GEMM probe reached {:.2} of the `{}` profile's peak ({:.1} of {:.1} GFLOP/s, fastest of {} samples); a fraction above 1.0 means the measurement or the profile's peak is wrong",
                self.probe_peak_fraction_max,
                self.profile,
                self.probe_gemm_gflops_max,
                self.peak_gflops,
                self.probe_samples
            )));
        }
        Ok(())
    }
}

/// Median, min and max of samples (empty → zeros).
fn stats(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 { s[n / 2] } else { 0.5 * (s[n / 2 - 1] + s[n / 2]) };
    (med, s[0], s[n - 1])
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
/// count. `reps` ≥ 1 interleaved rounds (probe + every block size); medians are compared.
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
    let probe = GemmProbe::new();
    let model_gemm_gflops = target.matrix_ops_per_s * target.matrix_efficiency_at(GemmProbe::M) / 1e9;
    let peak_gflops = target.matrix_ops_per_s / 1e9;
    let options = SimOptions {
        precision,
        placement: PlacementPolicy::SwapOptimized,
        logits: LogitRows::RequestedRows,
        layers_per_graph: cfg.n_layers,
        budget_bytes: u64::MAX,
        buckets: ShapeBuckets::dynamic(),
    };
    let token = cfg.mask_token_id.unwrap_or(0).min(cfg.vocab.saturating_sub(1) as u32);
    // Prepare one cached prefix and request per block size.
    struct Case {
        tokens: usize,
        pre: usize,
        cache: crate::model::KvCache,
        toks: Vec<u32>,
        pos: Vec<usize>,
        rows: Vec<usize>,
        samples: Vec<f64>,
    }
    let mut cases = Vec::new();
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
        cases.push(Case {
            tokens: b,
            pre,
            cache,
            toks: vec![token; b],
            pos: (pre..pre + b).collect(),
            rows: (0..b).collect(),
            samples: Vec::new(),
        });
    }
    // Warm-up of everything, then `reps` interleaved rounds: probe, then every block size.
    probe.sample();
    for c in &mut cases {
        let req = ForwardRequest { tokens: &c.toks, positions: &c.pos, logits_rows: &c.rows, kv: KvMode::Read };
        model.forward(&req, Some(&mut c.cache))?;
    }
    let mut probe_samples = Vec::new();
    for _ in 0..reps.max(1) {
        probe_samples.push(probe.sample());
        for c in &mut cases {
            let req = ForwardRequest { tokens: &c.toks, positions: &c.pos, logits_rows: &c.rows, kv: KvMode::Read };
            let t0 = Instant::now();
            model.forward(&req, Some(&mut c.cache))?;
            c.samples.push(t0.elapsed().as_secs_f64());
        }
    }
    let (probe_gemm_gflops, probe_min, probe_max) = stats(&probe_samples);
    let mut probed = target.clone();
    probed.matrix_ops_per_s *= probe_gemm_gflops / model_gemm_gflops;
    let mut sim = StepSimulator::new(cfg.clone(), target, options.clone(), LanePower::from_profile(profile));
    let mut sim_probed = StepSimulator::new(cfg.clone(), probed, options, LanePower::from_profile(profile));
    let mut points = Vec::new();
    for c in &cases {
        let (med, lo, hi) = stats(&c.samples);
        let shape = StepShape { tokens: c.tokens, context: c.pre + c.tokens, logit_rows: c.tokens };
        let predicted = sim.simulate(shape)?.time_s;
        let adjusted = sim_probed.simulate(shape)?.time_s;
        points.push(CalibrationPoint {
            tokens: c.tokens,
            context: c.pre + c.tokens,
            measured_s: med,
            measured_min_s: lo,
            measured_max_s: hi,
            samples: c.samples.len(),
            predicted_s: predicted,
            rel_error: (predicted - med) / med,
            probe_adjusted_s: adjusted,
            probe_adjusted_rel_error: (adjusted - med) / med,
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
        probe_gemm_gflops_min: probe_min,
        probe_gemm_gflops_max: probe_max,
        probe_samples: probe_samples.len(),
        model_gemm_gflops,
        peak_gflops,
        probe_peak_fraction: probe_gemm_gflops / peak_gflops,
        probe_peak_fraction_max: probe_max / peak_gflops,
    })
}

/// One 128×1024×1024 f32 product, timed per sample.
struct GemmProbe {
    lin: Linear,
    x: Vec<f32>,
    y: std::cell::RefCell<Vec<f32>>,
}

impl GemmProbe {
    const M: usize = 128;
    const K: usize = 1024;
    fn new() -> Self {
        let (m, k) = (Self::M, Self::K);
        let w: Vec<f32> = (0..k * k).map(|i| ((i % 97) as f32 - 48.0) / 97.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i % 31) as f32 - 15.0) / 31.0).collect();
        GemmProbe { lin: Linear::from_f32("probe", k, k, w), x, y: std::cell::RefCell::new(vec![0.0f32; m * k]) }
    }
    /// One timed product, GFLOP/s.
    fn sample(&self) -> f64 {
        let mut y = self.y.borrow_mut();
        let t0 = Instant::now();
        self.lin.forward(&self.x, Self::M, &mut y);
        let s = t0.elapsed().as_secs_f64();
        2.0 * (Self::M * Self::K * Self::K) as f64 / s / 1e9
    }
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
