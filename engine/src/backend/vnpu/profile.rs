//! Device profiles: the published (or estimated) numbers of a phone SoC, loaded from the JSON files in
//! `engine/profiles/`. Every number carries the source it came from, so a reader can judge it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// A number together with where it came from (reference-file section, paper, vendor page, or "estimate: how").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cited<T> {
    /// The value in the unit the field name states.
    pub value: T,
    /// Its source; estimates start with "estimate".
    pub source: String,
}

impl<T: Copy> Cited<T> {
    /// The bare value.
    pub fn get(&self) -> T {
        self.value
    }
}

/// The NPU of a SoC: matrix unit (HMX-like), vector unit (HVX-like), dispatch and memory rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpuSpec {
    /// Marketing/architecture name ("Hexagon HTP V79").
    pub name: String,
    /// Matrix-unit peak, INT8 (tera-ops per second).
    pub int8_tops: Cited<f64>,
    /// Matrix-unit peak with 4-bit weights (tera-ops per second).
    pub int4_tops: Cited<f64>,
    /// Matrix-unit peak, FP16 (tera-FLOP per second).
    pub fp16_tops: Cited<f64>,
    /// Fraction of the matrix peak a real LLM graph sustains.
    pub matrix_efficiency: Cited<f64>,
    /// Rows at which matrix efficiency reaches half its maximum (0 = no row dependence beyond tile padding).
    pub half_efficiency_rows: Cited<f64>,
    /// Matrix tile rows (tokens are padded to a multiple).
    pub tile_m: Cited<usize>,
    /// Matrix tile columns (output features are padded to a multiple).
    pub tile_n: Cited<usize>,
    /// Matrix tile depth (input features are padded to a multiple).
    pub tile_k: Cited<usize>,
    /// Vector-unit peak, GFLOP/s (fp16 elementwise work).
    pub vector_gflops: Cited<f64>,
    /// Fraction of the vector peak elementwise kernels reach.
    pub vector_efficiency: Cited<f64>,
    /// Fixed cost of one graph execute (RPC round trip), seconds.
    pub launch_overhead_s: Cited<f64>,
    /// Scheduling cost per operator inside a graph, seconds.
    pub per_op_overhead_s: Cited<f64>,
    /// Offline graph compile (finalize) cost, seconds (reported, not charged per step).
    pub graph_compile_s: Cited<f64>,
    /// Loading one cached context binary, seconds (charged once at start-up).
    pub graph_load_s: Cited<f64>,
    /// Cold power-up when the NPU was not kept powered, seconds.
    pub power_up_s: Cited<f64>,
    /// NPU-visible address space per session, bytes.
    pub session_va_bytes: Cited<u64>,
    /// Sessions one process may open.
    pub max_sessions: Cited<usize>,
    /// On-chip tightly coupled memory, bytes.
    pub vtcm_bytes: Cited<u64>,
    /// Cost of registering (mapping) one buffer into the NPU address space, seconds.
    pub map_cost_s: Cited<f64>,
    /// Cost of deregistering (unmapping) one buffer, seconds.
    pub unmap_cost_s: Cited<f64>,
    /// Copy bandwidth of the NPU DMA engine into NPU-visible buffers, GB/s.
    pub dma_gbps: Cited<f64>,
    /// DRAM read bandwidth the NPU sustains while computing, GB/s.
    pub dram_read_gbps: Cited<f64>,
    /// NPU power while busy, watts.
    pub active_w: Cited<f64>,
    /// NPU power while idle but powered, watts.
    pub idle_w: Cited<f64>,
    /// Token counts static graphs are compiled for.
    pub token_buckets: Cited<Vec<usize>>,
    /// Context lengths static graphs are compiled for.
    pub context_buckets: Cited<Vec<usize>>,
}

/// One cluster of identical CPU cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreCluster {
    /// Core name ("Cortex-X4").
    pub name: String,
    /// Cores in the cluster.
    pub count: Cited<usize>,
    /// Clock, GHz.
    pub ghz: Cited<f64>,
    /// f32 FMA peak per core, GFLOP/s.
    pub fp32_gflops_per_core: Cited<f64>,
    /// fp16 peak per core, GFLOP/s.
    pub fp16_gflops_per_core: Cited<f64>,
    /// int8 dot-product peak per core, GOP/s.
    pub int8_gops_per_core: Cited<f64>,
    /// Power of one busy core, watts.
    pub active_w_per_core: Cited<f64>,
}

/// The CPU side of a SoC (or the build machine).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuSpec {
    /// Core clusters, fastest first.
    pub clusters: Vec<CoreCluster>,
    /// Fraction of the GEMM peak a tuned kernel sustains at large row counts.
    pub matrix_efficiency: Cited<f64>,
    /// Rows at which GEMM efficiency reaches half its maximum.
    pub half_efficiency_rows: Cited<f64>,
    /// Fraction of the f32 peak elementwise kernels reach.
    pub vector_efficiency: Cited<f64>,
    /// Fixed cost per kernel call (thread-pool fork/join), seconds.
    pub per_op_overhead_s: Cited<f64>,
    /// Fraction of DRAM peak the CPU cores sustain.
    pub dram_efficiency: Cited<f64>,
    /// Power of the whole CPU complex while idle, watts.
    pub idle_w: Cited<f64>,
}

impl CpuSpec {
    /// Total cores.
    pub fn total_cores(&self) -> usize {
        self.clusters.iter().map(|c| c.count.value).sum()
    }
    /// The fastest `n` cores, one entry per core (clusters are listed fastest first).
    pub fn fastest_cores(&self, n: usize) -> Vec<&CoreCluster> {
        self.clusters.iter().flat_map(|c| std::iter::repeat_n(c, c.count.value)).take(n).collect()
    }
}

/// Memory system shared by all units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySpec {
    /// DRAM peak bandwidth, GB/s.
    pub dram_gbps: Cited<f64>,
    /// Energy per DRAM byte moved, picojoules.
    pub dram_pj_per_byte: Cited<f64>,
    /// Power of the DMA engine while copying, watts.
    pub dma_w: Cited<f64>,
}

/// Everything the virtual NPU needs to know about one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// Short id ("sm8750").
    pub name: String,
    /// Human name ("Snapdragon 8 Elite (SM8750)").
    pub display_name: String,
    /// One-line description.
    pub summary: String,
    /// The NPU; `None` for CPU-only profiles such as `host-cpu`.
    pub npu: Option<NpuSpec>,
    /// The CPU cores.
    pub cpu: CpuSpec,
    /// DRAM and DMA.
    pub memory: MemorySpec,
}

const BUILTIN: &[(&str, &str)] = &[
    ("sm8650", include_str!("../../../profiles/sm8650.json")),
    ("sm8750", include_str!("../../../profiles/sm8750.json")),
    ("sm8850", include_str!("../../../profiles/sm8850.json")),
    ("dimensity9400", include_str!("../../../profiles/dimensity9400.json")),
    ("kirin9010", include_str!("../../../profiles/kirin9010.json")),
    ("generic", include_str!("../../../profiles/generic.json")),
    ("m2-max", include_str!("../../../profiles/m2-max.json")),
    ("a18-pro", include_str!("../../../profiles/a18-pro.json")),
    ("host-cpu", include_str!("../../../profiles/host-cpu.json")),
];

impl DeviceProfile {
    /// Names of the profiles compiled into the engine.
    pub fn list_builtin() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in profile by name (case-insensitive).
    pub fn builtin(name: &str) -> Result<Self> {
        let lower = name.to_ascii_lowercase();
        let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == lower) else {
            return Err(EngineError::Backend {
                backend: "vnpu".into(),
                reason: format!("unknown device profile `{name}` (built-in: {})", Self::list_builtin().join(", ")),
            });
        };
        Self::from_json_str(text, Path::new(&format!("<builtin {n}>")))
    }

    /// Loads a profile from a JSON file.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        Self::from_json_str(&text, path)
    }

    /// Parses profile JSON; `origin` names it in errors.
    pub fn from_json_str(text: &str, origin: &Path) -> Result<Self> {
        let p: DeviceProfile =
            serde_json::from_str(text).map_err(|e| EngineError::config(origin, format!("device profile: {e}")))?;
        p.validate(origin)?;
        Ok(p)
    }

    /// True when the profile describes an NPU (not a CPU-only machine).
    pub fn has_npu(&self) -> bool {
        self.npu.is_some()
    }

    /// Checks values a simulation divides by and the source of every number.
    pub fn validate(&self, origin: &Path) -> Result<()> {
        let bad = |r: String| Err(EngineError::config(origin, format!("device profile `{}`: {r}", self.name)));
        if self.cpu.clusters.is_empty() || self.cpu.total_cores() == 0 {
            return bad("no CPU cores".into());
        }
        if self.memory.dram_gbps.value <= 0.0 {
            return bad("DRAM bandwidth must be positive".into());
        }
        if let Some(n) = &self.npu {
            let positive = [
                ("int8_tops", n.int8_tops.value),
                ("fp16_tops", n.fp16_tops.value),
                ("int4_tops", n.int4_tops.value),
                ("matrix_efficiency", n.matrix_efficiency.value),
                ("vector_gflops", n.vector_gflops.value),
                ("vector_efficiency", n.vector_efficiency.value),
                ("dma_gbps", n.dma_gbps.value),
                ("dram_read_gbps", n.dram_read_gbps.value),
            ];
            // `is_nan` catches NaN, which a plain `<= 0.0` test would let through.
            if let Some((f, v)) = positive.iter().find(|(_, v)| v.is_nan() || *v <= 0.0) {
                return bad(format!("`{f}` must be positive, found {v}"));
            }
            if n.tile_m.value == 0 || n.tile_n.value == 0 || n.tile_k.value == 0 {
                return bad("tile dimensions must be non-zero".into());
            }
            if n.token_buckets.value.is_empty() || n.context_buckets.value.is_empty() {
                return bad("token and context buckets must be non-empty".into());
            }
        }
        let missing = self.sources().into_iter().find(|(_, s)| s.trim().is_empty());
        if let Some((field, _)) = missing {
            return bad(format!("`{field}` has no source"));
        }
        Ok(())
    }

    /// Every (field path, source) pair, for audits and reports.
    pub fn sources(&self) -> Vec<(String, String)> {
        // Walk the serialized form so a field added later cannot be forgotten here.
        let mut out = Vec::new();
        if let Ok(v) = serde_json::to_value(self) {
            collect_sources(&v, String::new(), &mut out);
        }
        out
    }
}

fn collect_sources(v: &serde_json::Value, path: String, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(_), Some(s)) = (m.get("value"), m.get("source")) {
                out.push((path, s.as_str().unwrap_or("").to_owned()));
                return;
            }
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                collect_sources(x, p, out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_sources(x, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}
