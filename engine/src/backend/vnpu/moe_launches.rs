//! What a forward's MoE layers add on the simulated NPU beyond the layer graphs themselves.
//!
//! The layer graphs charge each MoE feed-forward as dense work over the routed experts (an ideal
//! dynamic-shape NPU). Real routing cannot run inside a static graph: under the `naive` and
//! `static-tiers` policies every MoE layer pays one host round trip for the router's top-k and one
//! graph launch per expert launch the real forward made (per expert, or per group), each at the
//! profile's launch cost. Those launches are what grouping saves; the charge is read from the real
//! forward's counters ([`MoeStats::layer_launches`]). Groups that load-aware residency ran on the
//! CPU lane are not launched: their lane (the cost model's seconds for their rows plus the merge,
//! [`MoeStats::layer_cpu_lane_s`]) runs beside the launches, and a layer takes the longer of the
//! two. The padding rows of static capacities are NPU compute the layer graphs do not hold (they
//! cost the routed rows only): [`MoeLaunchCharge::add_padding`] charges them. The CPU-lane groups'
//! compute is not taken off the layer graphs (conservative).

use crate::moe::{MoePolicy, MoeStats};
use crate::trace::{Lane, TraceEvent};

/// The simulated time and events the MoE launches of one forward add.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MoeLaunchCharge {
    /// Added simulated seconds (launches are serial on the NPU queue).
    pub time_s: f64,
    /// Added launches (expert launches + one top-k round trip per MoE layer).
    pub launches: u64,
    /// Busy seconds of the CPU lane (concurrent with the launches).
    pub cpu_lane_s: f64,
    /// NPU compute seconds in `time_s` (padding rows); the rest is dispatch.
    pub npu_compute_s: f64,
    /// One event per MoE layer, starting at 0 (the caller shifts them after the forward).
    pub events: Vec<TraceEvent>,
}

/// The charge of `stats` under `policy` at `launch_s` per launch; none for the dynamic CPU policy,
/// which the layer graphs already cost as ideal dense work.
pub fn charge(stats: &MoeStats, policy: MoePolicy, launch_s: f64) -> Option<MoeLaunchCharge> {
    if policy == MoePolicy::Cpu || launch_s <= 0.0 {
        return None;
    }
    let mut c = MoeLaunchCharge::default();
    let layers = stats.layer_launches.len().max(stats.layer_cpu_groups.len());
    for li in 0..layers {
        let n = stats.layer_launches.get(li).copied().unwrap_or(0);
        let cpu_groups = stats.layer_cpu_groups.get(li).copied().unwrap_or(0);
        if n == 0 && cpu_groups == 0 {
            continue;
        }
        let launches = n + 1;
        let dur = launches as f64 * launch_s;
        let cpu_s = if cpu_groups > 0 { stats.layer_cpu_lane_s.get(li).copied().unwrap_or(0.0) } else { 0.0 };
        if cpu_groups > 0 {
            let name = format!("layer {li} MoE: {cpu_groups} cold expert groups on the CPU lane + merge");
            c.events.push(simulated_event(Lane::Cpu(0), name, "compute", c.time_s, cpu_s));
            c.cpu_lane_s += cpu_s;
        }
        let what = if policy == MoePolicy::Naive { "expert" } else { "expert-group" };
        let name = format!("layer {li} MoE: top-k sync + {n} {what} launches");
        c.events.push(simulated_event(Lane::Npu, name, "launch", c.time_s, dur));
        c.time_s += dur.max(cpu_s);
        c.launches += launches;
    }
    Some(c)
}

/// An event on the simulated clock only (no wall time, no bytes).
fn simulated_event(lane: Lane, name: String, category: &str, start_sim: f64, dur_sim: f64) -> TraceEvent {
    TraceEvent { lane, name, category: category.into(), start_sim, dur_sim, wall_start: 0.0, wall_dur: 0.0, bytes: 0 }
}

impl MoeLaunchCharge {
    /// Adds the NPU compute of `rows` padding rows of static expert capacities, `seconds` long.
    pub fn add_padding(&mut self, rows: u64, seconds: f64) {
        if rows == 0 || seconds <= 0.0 {
            return;
        }
        let name = format!("MoE padding: {rows} rows of static expert capacity");
        self.events.push(simulated_event(Lane::Npu, name, "compute", self.time_s, seconds));
        self.time_s += seconds;
        self.npu_compute_s += seconds;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sync_and_each_launch_per_layer() {
        let stats = MoeStats { layer_launches: vec![8, 0, 2], ..Default::default() };
        let c = charge(&stats, MoePolicy::Naive, 1e-4).unwrap();
        assert_eq!(c.launches, 9 + 3);
        assert!((c.time_s - 12e-4).abs() < 1e-12);
        assert_eq!(c.events.len(), 2);
        assert!((c.events[1].start_sim - 9e-4).abs() < 1e-12);
        assert!(c.events[1].name.contains("layer 2"));
        assert!(charge(&stats, MoePolicy::Cpu, 1e-4).is_none());
        let mut grouped = charge(&stats, MoePolicy::StaticTiers, 1e-4).unwrap();
        assert!(grouped.events[0].name.contains("expert-group"));
        grouped.add_padding(40, 2e-4);
        assert!((grouped.time_s - 14e-4).abs() < 1e-12);
        assert!((grouped.npu_compute_s - 2e-4).abs() < 1e-12);
        assert!(grouped.events.last().unwrap().name.contains("40 rows"));
    }

    #[test]
    fn a_cpu_lane_runs_beside_the_launches_and_the_longer_counts() {
        // Layer 0: 2 launches + sync (0.3 ms) beside a 0.5 ms CPU lane; layer 1: the CPU lane is shorter.
        let stats = MoeStats {
            layer_launches: vec![2, 3],
            layer_cpu_groups: vec![1, 1],
            layer_cpu_lane_s: vec![5e-4, 1e-4],
            ..Default::default()
        };
        let c = charge(&stats, MoePolicy::StaticTiers, 1e-4).unwrap();
        assert!((c.time_s - (5e-4 + 4e-4)).abs() < 1e-12, "{}", c.time_s);
        assert!((c.cpu_lane_s - 6e-4).abs() < 1e-12);
        assert_eq!(c.launches, 3 + 4);
        let cpu: Vec<_> = c.events.iter().filter(|e| e.lane == Lane::Cpu(0)).collect();
        assert_eq!(cpu.len(), 2);
        assert!((cpu[1].start_sim - 5e-4).abs() < 1e-12);
    }
}
