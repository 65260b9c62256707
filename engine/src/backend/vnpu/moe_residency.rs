//! The device cost model load-aware MoE residency decides with on the virtual NPU: a launch at the
//! profile's launch cost, the merge of the CPU lane as one more dispatch (an estimate, as in the
//! simulated prefill), and each expert costed on the NPU and on one CPU core (the real forward's
//! CPU lane is one thread) with the same operator costs the layer graphs use.

use super::cost::ComputeTarget;
use super::moe_prefill::costs::swiglu_expert;
use super::profile::DeviceProfile;
use crate::error::Result;
use crate::memory::graph::Precision;
use crate::moe::ResidencyCostModel;

/// A profile's NPU and one of its CPU cores, for [`ResidencyCostModel`].
#[derive(Debug, Clone)]
pub struct ProfileResidency {
    npu: ComputeTarget,
    npu_precision: Precision,
    cpu_lane: ComputeTarget,
    cpu_precision: Precision,
    npu_active_w: f64,
    host_w: f64,
}

impl ProfileResidency {
    /// `None` for CPU-only profiles (no NPU to keep groups resident on).
    pub fn new(profile: &DeviceProfile, npu_precision: &Precision) -> Result<Option<Self>> {
        let Some(npu_spec) = &profile.npu else { return Ok(None) };
        let cpu_precision = Precision::cpu_q4_0();
        Ok(Some(ProfileResidency {
            npu: ComputeTarget::npu(profile, npu_precision)?,
            npu_precision: *npu_precision,
            cpu_lane: ComputeTarget::cpu(profile, 1, &cpu_precision),
            cpu_precision,
            npu_active_w: npu_spec.active_w.value,
            // The core that dispatches, as the virtual NPU charges its launches.
            host_w: profile.cpu.clusters.first().map_or(0.0, |k| k.active_w_per_core.value),
        }))
    }
}

impl ResidencyCostModel for ProfileResidency {
    fn launch_s(&self) -> f64 {
        self.npu.launch_overhead_s
    }
    fn sync_s(&self) -> f64 {
        self.npu.launch_overhead_s
    }
    fn npu_expert(&self, rows: usize, h: usize, f: usize) -> (f64, f64) {
        let t = swiglu_expert(&self.npu, &self.npu_precision, rows, h, f).time_s;
        (t, t * self.npu_active_w)
    }
    fn cpu_expert(&self, rows: usize, h: usize, f: usize) -> (f64, f64) {
        let t = swiglu_expert(&self.cpu_lane, &self.cpu_precision, rows, h, f).time_s;
        (t, t * self.cpu_lane.active_w)
    }
    fn host_w(&self) -> f64 {
        self.host_w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_outweighs_a_few_rows_but_not_many() {
        let p = DeviceProfile::builtin("m2-max").unwrap();
        let m = ProfileResidency::new(&p, &Precision::npu_w4a16()).unwrap().unwrap();
        let (h, f) = (192, 576);
        // A couple of rows cost the CPU core less than one NPU launch; hundreds cost it more.
        assert!(m.cpu_expert(2, h, f).0 < m.launch_s(), "{:?} vs {}", m.cpu_expert(2, h, f), m.launch_s());
        assert!(m.cpu_expert(512, h, f).0 > m.launch_s() + m.npu_expert(512, h, f).0);
        assert!(m.npu_expert(0, h, f).0 == 0.0 && m.cpu_expert(64, h, f).1 > 0.0);
        assert!(ProfileResidency::new(&DeviceProfile::builtin("host-cpu").unwrap(), &Precision::npu_w4a16())
            .unwrap()
            .is_none());
    }
}
