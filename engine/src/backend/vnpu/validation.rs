//! Validation of the cost model against published phone measurements.
//!
//! `engine/profiles/validation/published.json` holds prefill and decode rates of autoregressive
//! models measured on phones, one cited row each, split once into **fit** rows (the only rows any
//! profile parameter may be derived from, by [`fit_profile`]) and **held-out** rows (never used to
//! set anything). [`evaluate`] predicts every row with the same simulator the product uses and
//! reports per-profile median and maximum relative error on the held-out rows. Rows added after
//! the split (`added_after_split`) are held out by construction, outside the split rule, and also
//! reported apart (`heldout_fresh`).
//!
//! How a row is predicted (the model of a published measurement):
//! - the model's layer shapes come from [`ModelPreset`] (the published `config.json` values);
//! - **NPU rows** run [`simulator_for`] with the product's default [`VnpuConfig`] (W4A16 precision,
//!   one graph per layer, swap-optimized memory runtime, logits for the requested row only, the
//!   profile's token and context buckets). The NPU-visible budget is the fewest whole sessions
//!   of the profile that hold the model without streaming (up to the profile's session limit), as
//!   published runtimes split large models over sessions (llama.cpp's Hexagon backend: "an 8B
//!   model needs two"); a row may name its sessions instead. The profile's NPU rates describe
//!   the vendor's own runtime (Qualcomm Genie / QNN context binaries, the execution model the
//!   product's QNN backend follows). A row measured with a
//!   third-party NPU runtime names it (`runtime`), and the profile's matrix efficiency is scaled by
//!   that runtime's factor ([`RuntimeFactor`], fitted on the runtime's own fit rows);
//! - **CPU rows** run [`cpu_simulator`] (Q4_0-class 4-bit weights, int8 dot products) on all the
//!   profile's cores, the setting of the product's phone-CPU baseline;
//! - a **prefill** row is one forward of `tokens` tokens over `context` positions with logits for
//!   one row, rate = tokens / simulated seconds; a **decode** row is one forward of one token over
//!   `context` positions, rate = 1 / simulated seconds.
//!
//! Everything predicted here is **simulated**; the published values are measurements.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::memory::graph::{LayerGraph, Precision, StepShape};
use crate::memory::plan::{plan_memory, PlacementPolicy};

use super::profile::DeviceProfile;
use super::replay::{cpu_simulator, ModelPreset};
use super::{simulator_for, VnpuConfig};

const BUILTIN: &str = include_str!("../../../profiles/validation/published.json");

/// Which side of the split a row is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// May be used to derive profile parameters.
    Fit,
    /// Never used to set anything; only predicted.
    Heldout,
}

/// Execution unit of a published measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// The SoC's NPU.
    Npu,
    /// The SoC's CPU cores.
    Cpu,
}

/// Prefill (a prompt of many tokens) or decode (one token per forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Prompt processing.
    Prefill,
    /// Token generation.
    Decode,
}

/// The workload a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Prefill or decode.
    pub phase: Phase,
    /// Tokens per forward (the prompt length for prefill, 1 for decode).
    pub tokens: usize,
    /// Attention context of the forward (the graph's compiled context for static-graph runtimes).
    pub context: usize,
}

/// One published measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedRow {
    /// Unique id.
    pub id: String,
    /// Paper, report or repository file (with commit) the number comes from.
    pub source: String,
    /// Table, figure or field inside the source.
    pub table: String,
    /// Device as published.
    pub device: String,
    /// SoC part number.
    pub soc: String,
    /// Device profile the row checks.
    pub profile: String,
    /// Runtime that produced the measurement.
    pub system: String,
    /// NPU or CPU.
    pub unit: Unit,
    /// Model shapes ([`ModelPreset::key`]).
    pub model: String,
    /// Model as published.
    pub model_name: String,
    /// Quantisation as published (`w4a16`, `8da4w`).
    pub quantization: String,
    /// What was measured.
    pub workload: Workload,
    /// `prefill_tokens_per_s` or `decode_tokens_per_s`.
    pub metric: String,
    /// The published value (tokens per second).
    pub value: f64,
    /// How the value follows from the published figure.
    pub derivation: String,
    /// NPU sessions the published system used, when it says.
    #[serde(default)]
    pub sessions: Option<usize>,
    /// Token shapes the published system compiled its graphs for, when it says (mllm: prefill in
    /// chunks of 32); otherwise the profile's buckets.
    #[serde(default)]
    pub token_buckets: Option<Vec<usize>>,
    /// Third-party NPU runtime ([`ValidationSet::runtimes`]); `None` for the vendor's runtime and
    /// for CPU rows.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Fit or held-out.
    pub split: Split,
    /// For a row added after the split was applied (`YYYY-MM-DD`): the day it was added. Such a
    /// row is outside the split rule and held out by construction (never used to fit anything);
    /// it is reported apart as a fresh check (`heldout_fresh`). `None` for the rows the split
    /// rule was applied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_after_split: Option<String>,
}

/// How much of the vendor runtime's matrix efficiency a third-party NPU runtime reaches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeFactor {
    /// Runtime name rows refer to (`mllm`).
    pub name: String,
    /// Multiplies the profile's `npu.matrix_efficiency` for this runtime's rows.
    pub matrix_efficiency_factor: f64,
    /// Fit rows the factor was derived from (by [`fit_runtime_factor`]).
    pub rows: Vec<String>,
    /// Why.
    pub note: String,
}

/// A profile change made after the split, and the fit rows that drove it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitLogEntry {
    /// Profile changed.
    pub profile: String,
    /// Field path (`npu.matrix_efficiency`).
    pub field: String,
    /// Value before.
    pub before: f64,
    /// Value after.
    pub after: f64,
    /// Fit rows the new value was derived from.
    pub rows: Vec<String>,
    /// Why.
    pub note: String,
    /// For a value transferred from another profile's fit (no fit rows of its own): that profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_profile: Option<String>,
}

/// The validation set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationSet {
    /// File format version.
    pub schema: u32,
    /// What the set is.
    pub description: String,
    /// How the split was made.
    pub split_rule: String,
    /// Which measurements are in scope.
    pub scope: String,
    /// What was looked for and not found.
    pub not_found: String,
    /// Profile changes made after the split.
    pub fit_log: Vec<FitLogEntry>,
    /// Modelling changes made after the split, and what drove them.
    #[serde(default)]
    pub changes_after_split: Vec<String>,
    /// Third-party NPU runtimes and their fitted matrix-efficiency factors.
    #[serde(default)]
    pub runtimes: Vec<RuntimeFactor>,
    /// Held-out rows whose error had been seen before a later modelling change: they no longer
    /// test that change independently (reported apart from the untouched held-out rows).
    #[serde(default)]
    pub heldout_seen_before_change: Vec<String>,
    /// The rows.
    pub rows: Vec<PublishedRow>,
}

impl ValidationSet {
    /// The set compiled into the engine.
    pub fn builtin() -> Result<Self> {
        let set: ValidationSet = serde_json::from_str(BUILTIN).map_err(|e| {
            EngineError::config(std::path::Path::new("profiles/validation/published.json"), e.to_string())
        })?;
        set.check()?;
        Ok(set)
    }

    fn check(&self) -> Result<()> {
        let bad = |r: String| Err(EngineError::InvalidRequest(format!("validation set: {r}")));
        let mut ids = std::collections::HashSet::new();
        for r in &self.rows {
            if !ids.insert(&r.id) {
                return bad(format!("duplicate row id `{}`", r.id));
            }
            if ModelPreset::from_key(&r.model).is_none() {
                return bad(format!("row `{}`: unknown model `{}`", r.id, r.model));
            }
            if !(r.value.is_finite() && r.value > 0.0) {
                return bad(format!("row `{}`: value must be positive", r.id));
            }
            if r.source.trim().is_empty() || r.table.trim().is_empty() {
                return bad(format!("row `{}`: every row needs a source and a table", r.id));
            }
            let want = match r.workload.phase {
                Phase::Prefill => "prefill_tokens_per_s",
                Phase::Decode => "decode_tokens_per_s",
            };
            if r.metric != want || (r.workload.phase == Phase::Decode && r.workload.tokens != 1) {
                return bad(format!("row `{}`: metric `{}` does not match its workload", r.id, r.metric));
            }
            if let Some(name) = &r.runtime {
                if r.unit != Unit::Npu || self.runtime(name).is_none() {
                    return bad(format!("row `{}`: runtime `{name}` is not a listed NPU runtime", r.id));
                }
            }
            if r.added_after_split.is_some() && r.split != Split::Heldout {
                return bad(format!("row `{}`: a row added after the split must be held out", r.id));
            }
        }
        for id in &self.heldout_seen_before_change {
            if !self.rows.iter().any(|r| &r.id == id && r.split == Split::Heldout) {
                return bad(format!("`{id}` in heldout_seen_before_change is not a held-out row"));
            }
        }
        Ok(())
    }

    /// The factor of a third-party runtime.
    pub fn runtime(&self, name: &str) -> Option<&RuntimeFactor> {
        self.runtimes.iter().find(|r| r.name == name)
    }

    /// `profile` as the row's runtime uses it: the vendor's profile, or its matrix efficiency
    /// scaled by the row's third-party runtime factor.
    pub fn deployed_profile(&self, row: &PublishedRow, profile: &DeviceProfile) -> Result<DeviceProfile> {
        let Some(name) = &row.runtime else { return Ok(profile.clone()) };
        let f = self
            .runtime(name)
            .ok_or_else(|| EngineError::InvalidRequest(format!("row `{}`: unknown runtime `{name}`", row.id)))?;
        Ok(with_matrix_factor(profile, f.matrix_efficiency_factor))
    }

    /// The split the rule in `split_rule` gives: clusters (profile, unit, model) of the rows the
    /// rule was applied to, sorted by the model's parameter count then key inside each (profile,
    /// unit); odd positions (1st, 3rd, ...) fit, even ones held out. Rows added after the split
    /// (`added_after_split`) are outside the rule: held out by construction, and they do not move
    /// the original rows' clusters.
    pub fn rule_split(&self) -> BTreeMap<String, Split> {
        let mut groups: BTreeMap<(String, Unit), Vec<(u64, String)>> = BTreeMap::new();
        for r in self.rows.iter().filter(|r| r.added_after_split.is_none()) {
            let params = ModelPreset::from_key(&r.model).map_or(0, |p| p.parameters());
            let g = groups.entry((r.profile.clone(), r.unit)).or_default();
            if !g.iter().any(|(_, m)| *m == r.model) {
                g.push((params, r.model.clone()));
            }
        }
        let mut side: BTreeMap<(String, Unit, String), Split> = BTreeMap::new();
        for ((profile, unit), mut models) in groups {
            models.sort();
            for (i, (_, m)) in models.into_iter().enumerate() {
                let s = if i % 2 == 0 { Split::Fit } else { Split::Heldout };
                side.insert((profile.clone(), unit, m), s);
            }
        }
        self.rows
            .iter()
            .map(|r| {
                let s = match r.added_after_split {
                    Some(_) => Split::Heldout,
                    None => side[&(r.profile.clone(), r.unit, r.model.clone())],
                };
                (r.id.clone(), s)
            })
            .collect()
    }
}

/// Simulated rate for one row (tokens per second), with the deployment it assumed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Simulated tokens per second.
    pub tokens_per_s: f64,
    /// Simulated seconds of the forward.
    pub forward_s: f64,
    /// NPU sessions assumed (0 for CPU rows).
    pub sessions: usize,
    /// CPU cores assumed (0 for NPU rows).
    pub cores: usize,
}

/// The NPU sessions a deployment of `cfg` at `shape` needs to hold the model without streaming:
/// the fewest whole sessions of `profile` whose space holds weights, KV cache and activations,
/// capped at the profile's session limit.
pub fn sessions_needed(
    cfg: &crate::model::ModelConfig,
    shape: StepShape,
    profile: &DeviceProfile,
    precision: &Precision,
) -> usize {
    let Some(n) = &profile.npu else { return 0 };
    let graph = LayerGraph::build(cfg, shape, precision);
    let max = n.max_sessions.value.max(1);
    (1..=max)
        .find(|&s| {
            plan_memory(&graph, s as u64 * n.session_va_bytes.value, PlacementPolicy::SwapOptimized)
                .is_ok_and(|p| p.streamed_bytes_per_step == 0)
        })
        .unwrap_or(max)
}

/// Predicts `row` on `profile` (which may differ from the built-in one, e.g. while fitting).
pub fn predict(row: &PublishedRow, profile: &DeviceProfile) -> Result<Prediction> {
    let preset = ModelPreset::from_key(&row.model)
        .ok_or_else(|| EngineError::InvalidRequest(format!("unknown model `{}`", row.model)))?;
    let cfg = preset.config();
    let w = row.workload;
    let shape = StepShape { tokens: w.tokens, context: w.context, logit_rows: 1 };
    let (step_s, sessions, cores) = match row.unit {
        Unit::Npu => {
            let n = profile.npu.as_ref().ok_or_else(|| EngineError::Backend {
                backend: "vnpu".into(),
                reason: format!("row `{}` is an NPU row but profile `{}` has no NPU", row.id, profile.name),
            })?;
            let config =
                VnpuConfig { record_trace: false, token_buckets: row.token_buckets.clone(), ..VnpuConfig::default() };
            let sessions = row.sessions.unwrap_or_else(|| sessions_needed(&cfg, shape, profile, &config.precision));
            let config = VnpuConfig { budget_bytes: Some(sessions as u64 * n.session_va_bytes.value), ..config };
            let mut sim = simulator_for(&cfg, profile, &config)?;
            (sim.simulate(shape)?.time_s, sessions, 0)
        }
        Unit::Cpu => {
            let cores = profile.cpu.total_cores();
            let mut sim = cpu_simulator(&cfg, profile, cores);
            (sim.simulate(shape)?.time_s, 0, cores)
        }
    };
    let tokens_per_s = w.tokens as f64 / step_s;
    Ok(Prediction { tokens_per_s, forward_s: step_s, sessions, cores })
}

/// One row's prediction against its published value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    /// Row id.
    pub id: String,
    /// Profile.
    pub profile: String,
    /// Unit.
    pub unit: Unit,
    /// Phase.
    pub phase: Phase,
    /// Model key.
    pub model: String,
    /// Fit or held-out.
    pub split: Split,
    /// Published tokens per second (measured).
    pub published: f64,
    /// Simulated tokens per second.
    pub predicted: f64,
    /// `|predicted − published| / published`.
    pub rel_error: f64,
    /// `max(predicted / published, published / predicted)` (1 = exact, 2 = off by 2×).
    pub factor: f64,
    /// NPU sessions assumed.
    pub sessions: usize,
    /// A held-out row whose error was seen before a later modelling change.
    pub seen_before_change: bool,
    /// A held-out row added after the split (and after every profile change in the `fit_log`).
    pub added_after_split: bool,
}

/// Error summary of a set of rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ErrorStats {
    /// Rows.
    pub rows: usize,
    /// Median of `rel_error`.
    pub median_rel_error: Option<f64>,
    /// Largest `rel_error`.
    pub max_rel_error: Option<f64>,
    /// Largest `factor`.
    pub max_factor: Option<f64>,
    /// Median of `factor` (used for error bands).
    pub median_factor: Option<f64>,
}

impl ErrorStats {
    /// Summary of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a RowResult>) -> Self {
        let rows: Vec<&RowResult> = rows.into_iter().collect();
        let med = |mut v: Vec<f64>| -> Option<f64> {
            if v.is_empty() {
                return None;
            }
            v.sort_by(f64::total_cmp);
            let n = v.len();
            Some(if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) })
        };
        let errs: Vec<f64> = rows.iter().map(|r| r.rel_error).collect();
        let facs: Vec<f64> = rows.iter().map(|r| r.factor).collect();
        ErrorStats {
            rows: rows.len(),
            median_rel_error: med(errs.clone()),
            max_rel_error: errs.iter().copied().reduce(f64::max),
            max_factor: facs.iter().copied().reduce(f64::max),
            median_factor: med(facs),
        }
    }
}

/// Per-profile summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileValidation {
    /// Profile.
    pub profile: String,
    /// Held-out rows.
    pub heldout: ErrorStats,
    /// Held-out NPU rows.
    pub heldout_npu: ErrorStats,
    /// Held-out CPU rows.
    pub heldout_cpu: ErrorStats,
    /// Held-out rows not seen before any later modelling change (the independent check).
    pub heldout_untouched: ErrorStats,
    /// Held-out rows added after the split (`added_after_split`): fresh rows no profile value
    /// or modelling change was made with sight of. A subset of `heldout` and `heldout_untouched`.
    pub heldout_fresh: ErrorStats,
    /// Fit rows (how well the fit itself reproduces them).
    pub fit: ErrorStats,
}

/// Predictions of every row and the per-profile summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Every row.
    pub rows: Vec<RowResult>,
    /// One entry per built-in profile (profiles without rows have zero-row stats).
    pub profiles: Vec<ProfileValidation>,
    /// All held-out rows together.
    pub heldout: ErrorStats,
    /// All fit rows together.
    pub fit: ErrorStats,
}

impl ValidationReport {
    /// The summary of one profile.
    pub fn profile(&self, name: &str) -> Option<&ProfileValidation> {
        self.profiles.iter().find(|p| p.profile == name)
    }
    /// Held-out rows, worst first.
    pub fn worst_heldout(&self, n: usize) -> Vec<&RowResult> {
        let mut v: Vec<&RowResult> = self.rows.iter().filter(|r| r.split == Split::Heldout).collect();
        v.sort_by(|a, b| b.factor.total_cmp(&a.factor));
        v.truncate(n);
        v
    }
}

/// Predicts every row of `set` with the built-in profiles.
pub fn evaluate(set: &ValidationSet) -> Result<ValidationReport> {
    let mut profiles: BTreeMap<String, DeviceProfile> = BTreeMap::new();
    for name in DeviceProfile::list_builtin() {
        profiles.insert(name.to_owned(), DeviceProfile::builtin(name)?);
    }
    evaluate_with(set, &profiles)
}

/// Predicts every row of `set` with the given profiles (by name).
pub fn evaluate_with(set: &ValidationSet, profiles: &BTreeMap<String, DeviceProfile>) -> Result<ValidationReport> {
    let mut rows = Vec::new();
    for r in &set.rows {
        let profile = profiles
            .get(&r.profile)
            .ok_or_else(|| EngineError::InvalidRequest(format!("row `{}`: unknown profile `{}`", r.id, r.profile)))?;
        let p = predict(r, &set.deployed_profile(r, profile)?)?;
        rows.push(RowResult {
            id: r.id.clone(),
            profile: r.profile.clone(),
            unit: r.unit,
            phase: r.workload.phase,
            model: r.model.clone(),
            split: r.split,
            published: r.value,
            predicted: p.tokens_per_s,
            rel_error: (p.tokens_per_s - r.value).abs() / r.value,
            factor: (p.tokens_per_s / r.value).max(r.value / p.tokens_per_s),
            sessions: p.sessions,
            seen_before_change: set.heldout_seen_before_change.contains(&r.id),
            added_after_split: r.added_after_split.is_some(),
        });
    }
    let summary = |name: &str| {
        let of = |split: Split, unit: Option<Unit>| {
            ErrorStats::of(
                rows.iter().filter(|r| r.profile == name && r.split == split && unit.is_none_or(|u| r.unit == u)),
            )
        };
        ProfileValidation {
            profile: name.to_owned(),
            heldout: of(Split::Heldout, None),
            heldout_npu: of(Split::Heldout, Some(Unit::Npu)),
            heldout_cpu: of(Split::Heldout, Some(Unit::Cpu)),
            heldout_untouched: ErrorStats::of(
                rows.iter().filter(|r| r.profile == name && r.split == Split::Heldout && !r.seen_before_change),
            ),
            heldout_fresh: ErrorStats::of(
                rows.iter().filter(|r| r.profile == name && r.split == Split::Heldout && r.added_after_split),
            ),
            fit: of(Split::Fit, None),
        }
    };
    let profiles_out = profiles.keys().map(|n| summary(n)).collect();
    Ok(ValidationReport {
        heldout: ErrorStats::of(rows.iter().filter(|r| r.split == Split::Heldout)),
        fit: ErrorStats::of(rows.iter().filter(|r| r.split == Split::Fit)),
        profiles: profiles_out,
        rows,
    })
}

/// A profile parameter the fit may set, and the rows that inform it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitParam {
    /// `npu.matrix_efficiency`, from vendor-runtime NPU prefill rows (compute bound).
    NpuMatrixEfficiency,
    /// `npu.dram_read_gbps`, from vendor-runtime NPU decode rows (weight streaming bound).
    NpuDramReadGbps,
    /// `cpu.matrix_efficiency`, from CPU prefill rows.
    CpuMatrixEfficiency,
    /// `cpu.dram_efficiency`, from CPU decode rows.
    CpuDramEfficiency,
    /// `cpu.half_efficiency_rows`, from CPU decode rows (one-row GEMV efficiency).
    CpuHalfEfficiencyRows,
}

impl FitParam {
    /// The fitted parameters, in the order the fit visits them.
    /// `cpu.dram_efficiency` is not among them: one-token CPU decode rows cannot tell DRAM rate
    /// from one-row GEMV efficiency (both scale with the weights), so it stays an estimate and
    /// the decode rows set the GEMV efficiency.
    pub const ALL: [FitParam; 4] = [
        FitParam::NpuMatrixEfficiency,
        FitParam::NpuDramReadGbps,
        FitParam::CpuMatrixEfficiency,
        FitParam::CpuHalfEfficiencyRows,
    ];
    /// The field path in the profile JSON.
    pub fn field(self) -> &'static str {
        match self {
            FitParam::NpuMatrixEfficiency => "npu.matrix_efficiency",
            FitParam::NpuDramReadGbps => "npu.dram_read_gbps",
            FitParam::CpuMatrixEfficiency => "cpu.matrix_efficiency",
            FitParam::CpuDramEfficiency => "cpu.dram_efficiency",
            FitParam::CpuHalfEfficiencyRows => "cpu.half_efficiency_rows",
        }
    }
    /// Whether `r` informs the parameter: the profile's NPU rates describe the vendor runtime, so
    /// only its rows set them (a third-party runtime's rows set that runtime's factor).
    fn informed_by(self, r: &PublishedRow) -> bool {
        let vendor_npu = r.unit == Unit::Npu && r.runtime.is_none();
        match self {
            FitParam::NpuMatrixEfficiency => vendor_npu && r.workload.phase == Phase::Prefill,
            FitParam::NpuDramReadGbps => vendor_npu && r.workload.phase == Phase::Decode,
            FitParam::CpuMatrixEfficiency => r.unit == Unit::Cpu && r.workload.phase == Phase::Prefill,
            FitParam::CpuDramEfficiency | FitParam::CpuHalfEfficiencyRows => {
                r.unit == Unit::Cpu && r.workload.phase == Phase::Decode
            }
        }
    }
    /// Current value in `p`.
    pub fn get(self, p: &DeviceProfile) -> Option<f64> {
        match self {
            FitParam::NpuMatrixEfficiency => p.npu.as_ref().map(|n| n.matrix_efficiency.value),
            FitParam::NpuDramReadGbps => p.npu.as_ref().map(|n| n.dram_read_gbps.value),
            FitParam::CpuMatrixEfficiency => Some(p.cpu.matrix_efficiency.value),
            FitParam::CpuDramEfficiency => Some(p.cpu.dram_efficiency.value),
            FitParam::CpuHalfEfficiencyRows => Some(p.cpu.half_efficiency_rows.value),
        }
    }
    /// Sets the value in `p`.
    pub fn set(self, p: &mut DeviceProfile, v: f64) {
        match self {
            FitParam::NpuMatrixEfficiency => {
                if let Some(n) = p.npu.as_mut() {
                    n.matrix_efficiency.value = v;
                }
            }
            FitParam::NpuDramReadGbps => {
                if let Some(n) = p.npu.as_mut() {
                    n.dram_read_gbps.value = v;
                }
            }
            FitParam::CpuMatrixEfficiency => p.cpu.matrix_efficiency.value = v,
            FitParam::CpuDramEfficiency => p.cpu.dram_efficiency.value = v,
            FitParam::CpuHalfEfficiencyRows => p.cpu.half_efficiency_rows.value = v,
        }
    }
    /// Physical bounds of the value.
    fn bounds(self, p: &DeviceProfile) -> (f64, f64) {
        match self {
            FitParam::NpuDramReadGbps => (1.0, p.memory.dram_gbps.value),
            FitParam::CpuHalfEfficiencyRows => (0.01, 64.0),
            _ => (1e-3, 1.0),
        }
    }
}

/// One fitted value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FittedValue {
    /// Profile.
    pub profile: String,
    /// Field path.
    pub field: &'static str,
    /// Value before the fit.
    pub before: f64,
    /// Fitted value.
    pub after: f64,
    /// Fit rows used.
    pub rows: Vec<String>,
    /// Whether the value sits at a physical bound (the rows ask for more than the bound allows).
    pub at_bound: bool,
}

/// Fits the [`FitParam`]s of `profile` to the **fit rows** of `set` (held-out rows are never
/// read): each parameter minimises the squared log error of the rows that inform it (golden-section
/// search in log space within physical bounds), two coordinate-descent rounds. Parameters without
/// fit rows keep their value. Returns the fitted profile and what changed.
pub fn fit_profile(set: &ValidationSet, profile: &DeviceProfile) -> Result<(DeviceProfile, Vec<FittedValue>)> {
    let fit_rows: Vec<PublishedRow> = set
        .rows
        .iter()
        .filter(|r| r.split == Split::Fit && r.profile == profile.name)
        .map(|r| with_fixed_sessions(r, profile))
        .collect::<Result<_>>()?;
    let mut p = profile.clone();
    let mut out: Vec<FittedValue> = Vec::new();
    for _round in 0..2 {
        for param in FitParam::ALL {
            let rows: Vec<&PublishedRow> = fit_rows.iter().filter(|r| param.informed_by(r)).collect();
            let Some(before) = param.get(&p) else { continue };
            if rows.is_empty() {
                continue;
            }
            let loss = |v: f64, p: &DeviceProfile| -> Result<f64> {
                let mut q = p.clone();
                param.set(&mut q, v);
                let mut s = 0.0;
                for r in &rows {
                    let e = (predict(r, &q)?.tokens_per_s / r.value).ln();
                    s += e * e;
                }
                Ok(s)
            };
            let (lo, hi) = param.bounds(&p);
            let v = minimise_log_space(lo, hi, |v| loss(v, &p))?;
            param.set(&mut p, v);
            let at_bound = (v - lo).abs() / lo < 0.01 || (hi - v).abs() / hi < 0.01;
            let ids = rows.iter().map(|r| r.id.clone()).collect();
            match out.iter_mut().find(|f| f.field == param.field()) {
                Some(f) => {
                    f.after = v;
                    f.at_bound = at_bound;
                }
                None => out.push(FittedValue {
                    profile: p.name.clone(),
                    field: param.field(),
                    before,
                    after: v,
                    rows: ids,
                    at_bound,
                }),
            }
        }
    }
    Ok((p, out))
}

/// The fitted factor of the third-party runtime `name`: minimises the squared log error of its
/// **fit** prefill rows (compute bound, as for `npu.matrix_efficiency`) with each row's profile
/// from `profiles` as it stands. Returns the factor (3 significant digits) and the rows used.
pub fn fit_runtime_factor(
    set: &ValidationSet,
    name: &str,
    profiles: &BTreeMap<String, DeviceProfile>,
) -> Result<(f64, Vec<String>)> {
    let rows: Vec<&PublishedRow> = set
        .rows
        .iter()
        .filter(|r| r.split == Split::Fit && r.runtime.as_deref() == Some(name) && r.workload.phase == Phase::Prefill)
        .collect();
    if rows.is_empty() {
        return Err(EngineError::InvalidRequest(format!("runtime `{name}` has no fit prefill rows")));
    }
    let mut deployed = Vec::with_capacity(rows.len());
    for r in &rows {
        let p = profiles
            .get(&r.profile)
            .ok_or_else(|| EngineError::InvalidRequest(format!("row `{}`: unknown profile `{}`", r.id, r.profile)))?;
        deployed.push((with_fixed_sessions(r, p)?, p));
    }
    let loss = |f: f64| -> Result<f64> {
        let mut s = 0.0;
        for (r, p) in &deployed {
            let e = (predict(r, &with_matrix_factor(p, f))?.tokens_per_s / r.value).ln();
            s += e * e;
        }
        Ok(s)
    };
    // A third-party runtime may beat the vendor's, hence the upper bound above 1.
    let f = minimise_log_space(1e-2, 4.0, loss)?;
    Ok((f, rows.iter().map(|r| r.id.clone()).collect()))
}

/// `row` with its NPU sessions fixed at what `profile` needs: sessions depend on memory only, not
/// on the rates a fit varies, so they are computed once.
fn with_fixed_sessions(row: &PublishedRow, profile: &DeviceProfile) -> Result<PublishedRow> {
    let mut r = row.clone();
    if r.unit == Unit::Npu && r.sessions.is_none() {
        r.sessions = Some(predict(row, profile)?.sessions);
    }
    Ok(r)
}

/// `profile` with its NPU matrix efficiency scaled by `factor`.
fn with_matrix_factor(profile: &DeviceProfile, factor: f64) -> DeviceProfile {
    let mut p = profile.clone();
    if let Some(n) = p.npu.as_mut() {
        n.matrix_efficiency.value *= factor;
    }
    p
}

/// Golden-section search of `loss` over `[lo, hi]` in log space; the minimiser to 3 significant
/// digits.
fn minimise_log_space(lo: f64, hi: f64, mut loss: impl FnMut(f64) -> Result<f64>) -> Result<f64> {
    let (mut a, mut b) = (lo.ln(), hi.ln());
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - g * (b - a);
    let mut d = a + g * (b - a);
    let (mut fc, mut fd) = (loss(c.exp())?, loss(d.exp())?);
    for _ in 0..40 {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - g * (b - a);
            fc = loss(c.exp())?;
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + g * (b - a);
            fd = loss(d.exp())?;
        }
    }
    Ok(round_sig(((a + b) / 2.0).exp(), 3))
}

/// `x` rounded to `digits` significant digits.
pub fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let m = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * m).round() / m
}
