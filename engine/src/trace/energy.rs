//! Energy of a timeline: busy time × active power per lane, idle NPU power over the gaps, and DRAM
//! traffic × energy per byte, with the powers taken from a device profile.

use crate::backend::vnpu::profile::DeviceProfile;

use super::{Lane, Timeline};

/// Power of each lane, watts, and DRAM energy per byte.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LanePower {
    /// NPU while busy.
    pub npu_active_w: f64,
    /// NPU while powered but idle.
    pub npu_idle_w: f64,
    /// Each CPU core while busy (index = core; fastest first). Missing cores reuse the last entry.
    pub cpu_core_w: Vec<f64>,
    /// DMA engine while copying.
    pub dma_w: f64,
    /// DRAM energy per byte, joules.
    pub dram_j_per_byte: f64,
}

impl LanePower {
    /// Powers from a device profile (a CPU-only profile has no NPU power).
    pub fn from_profile(p: &DeviceProfile) -> Self {
        let cpu_core_w = p.cpu.fastest_cores(p.cpu.total_cores()).iter().map(|c| c.active_w_per_core.value).collect();
        LanePower {
            npu_active_w: p.npu.as_ref().map_or(0.0, |n| n.active_w.value),
            npu_idle_w: p.npu.as_ref().map_or(0.0, |n| n.idle_w.value),
            cpu_core_w,
            dma_w: p.memory.dma_w.value,
            dram_j_per_byte: p.memory.dram_pj_per_byte.value * 1e-12,
        }
    }
    /// Active power of a lane, watts.
    pub fn active_w(&self, lane: Lane) -> f64 {
        match lane {
            Lane::Npu => self.npu_active_w,
            Lane::Dma => self.dma_w,
            Lane::Cpu(i) => self.cpu_core_w.get(i).or(self.cpu_core_w.last()).copied().unwrap_or(0.0),
            // Each task runs on a core of its own.
            Lane::Verifier => self.cpu_core_w.first().copied().unwrap_or(0.0),
            Lane::Drafter => self.cpu_core_w.get(1).or(self.cpu_core_w.last()).copied().unwrap_or(0.0),
        }
    }
}

/// Joules per lane plus DRAM, over a timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EnergyReport {
    /// (lane, joules) for every lane with events, NPU idle power included in the NPU entry.
    pub per_lane: Vec<(Lane, f64)>,
    /// DRAM traffic energy, joules.
    pub dram_j: f64,
    /// Sum of everything, joules.
    pub total_j: f64,
}

pub(crate) fn energy_of(t: &Timeline, p: &LanePower) -> EnergyReport {
    let span = t.end_sim();
    let per_lane: Vec<(Lane, f64)> = t
        .lanes()
        .into_iter()
        .map(|lane| {
            let busy = t.busy_s(lane);
            let idle = if lane == Lane::Npu { (span - busy).max(0.0) * p.npu_idle_w } else { 0.0 };
            (lane, busy * p.active_w(lane) + idle)
        })
        .collect();
    let dram_j = t.events.iter().map(|e| e.bytes as f64).sum::<f64>() * p.dram_j_per_byte;
    let total_j = per_lane.iter().map(|(_, j)| j).sum::<f64>() + dram_j;
    EnergyReport { per_lane, dram_j, total_j }
}
