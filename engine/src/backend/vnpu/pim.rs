//! A processing-in-memory unit (LPDDR5-PIM) next to the virtual NPU: where a draft model's
//! memory-bound matrix-vector work runs in AHASD's design. **Simulated**: a roofline over the
//! ranks' internal bandwidth and INT8 throughput, with energy per byte read and leakage, from
//! the cited profile `engine/profiles/pim/lpddr5-pim.json`.

use serde::{Deserialize, Serialize};

use super::profile::Cited;
use crate::error::{EngineError, Result};
use crate::model::ModelConfig;

/// An LPDDR5-PIM configuration, every figure with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PimProfile {
    pub name: String,
    pub display_name: String,
    pub summary: String,
    /// PIM units (ranks) working in parallel.
    pub units: Cited<f64>,
    /// INT8 throughput of all units together, GOP/s.
    pub int8_gops: Cited<f64>,
    /// Bank-level bandwidth the units read weights at, GB/s.
    pub internal_gbps: Cited<f64>,
    /// Bandwidth to the rest of the SoC, GB/s (activations in, logits out).
    pub offchip_gbps: Cited<f64>,
    pub clock_hz: Cited<f64>,
    pub read_j_per_byte: Cited<f64>,
    /// Leakage of one unit per PIM clock cycle, joules.
    pub leakage_j_per_cycle: Cited<f64>,
    /// Switching a rank between memory and PIM mode, joules.
    pub mode_switch_j: Cited<f64>,
    /// Switching between tasks (drafting, pre-verification), seconds.
    pub task_switch_s: Cited<f64>,
    pub offchip_j_per_byte: Cited<f64>,
}

/// Cost of one draft-model forward of one token on the PIM unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PimTokenCost {
    pub time_s: f64,
    /// Dynamic energy (reads, transfers, mode switches), joules; leakage is charged per second
    /// of the whole run ([`PimProfile::leakage_w`]).
    pub energy_j: f64,
    pub bytes_read: f64,
}

impl PimProfile {
    /// The built-in profile.
    pub fn lpddr5() -> Result<Self> {
        serde_json::from_str(include_str!("../../../profiles/pim/lpddr5-pim.json")).map_err(|e| EngineError::Config {
            path: "engine/profiles/pim/lpddr5-pim.json".into(),
            reason: e.to_string(),
        })
    }

    /// Leakage power of all units, watts.
    pub fn leakage_w(&self) -> f64 {
        self.units.value * self.leakage_j_per_cycle.value * self.clock_hz.value
    }

    /// One token through `cfg` (INT8 weights, fp16 K/V) with `context` cached positions: the
    /// slower of streaming weights and K/V at the internal bandwidth and the INT8 operations,
    /// plus activations over the off-chip link and a task switch.
    pub fn token_cost(&self, cfg: &ModelConfig, context: usize) -> PimTokenCost {
        let (h, q, kv) = (cfg.hidden as f64, cfg.q_dim() as f64, cfg.kv_dim() as f64);
        let per_layer = h * q + 2.0 * h * kv + q * h + 3.0 * h * cfg.ffn as f64;
        let weights = cfg.n_layers as f64 * per_layer + cfg.vocab as f64 * h;
        let kv_bytes = cfg.n_layers as f64 * context as f64 * kv * 2.0 * 2.0;
        let attn_ops = cfg.n_layers as f64 * 4.0 * context as f64 * q;
        let ops = 2.0 * weights + attn_ops;
        let bytes = weights + kv_bytes;
        let stream_s = bytes / (self.internal_gbps.value * 1e9);
        let compute_s = ops / (self.int8_gops.value * 1e9);
        // The token's activations in and its logits (fp16) out.
        let io_bytes = 2.0 * h + 2.0 * cfg.vocab as f64;
        let io_s = io_bytes / (self.offchip_gbps.value * 1e9);
        PimTokenCost {
            time_s: stream_s.max(compute_s) + io_s + self.task_switch_s.value,
            energy_j: bytes * self.read_j_per_byte.value + io_bytes * self.offchip_j_per_byte.value + self.mode_switch_j.value,
            bytes_read: bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vnpu::replay::ModelPreset;

    #[test]
    fn profile_loads_with_sources_and_a_1b_draft_is_compute_bound() {
        let p = PimProfile::lpddr5().unwrap();
        assert!(p.read_j_per_byte.source.contains("AHASD"));
        let cfg = ModelPreset::Llama32_1B.config();
        let c = p.token_cost(&cfg, 512);
        // ~1.5 G INT8 weights: ~3 G ops at 102.4 GOP/s (~30 ms) outweigh streaming them at
        // 256 GB/s (~6 ms).
        let stream_s = c.bytes_read / 256e9;
        assert!(c.time_s > 4.0 * stream_s && c.time_s > 0.02 && c.time_s < 0.05, "{c:?}");
        assert!(c.energy_j > 0.0);
        assert!(p.leakage_w() > 0.0 && p.leakage_w() < 2.0);
    }
}
