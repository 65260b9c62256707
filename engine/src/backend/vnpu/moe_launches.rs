//! What a forward's MoE layers add on the simulated NPU beyond the layer graphs themselves.
//!
//! The layer graphs charge each MoE feed-forward as dense work over the routed experts (an ideal
//! dynamic-shape NPU). Real routing cannot run inside a static graph: under the `naive` and
//! `static-tiers` policies every MoE layer pays one host round trip for the router's top-k and one
//! graph launch per expert launch the real forward made (per expert, or per group), each at the
//! profile's launch cost. Those launches are what grouping saves; the charge is read from the real
//! forward's counters ([`MoeStats::layer_launches`]). Padding rows of static capacities are not
//! charged here (the simulated MoE prefill in `moe_prefill/` does charge them).

use crate::moe::{MoePolicy, MoeStats};
use crate::trace::{Lane, TraceEvent};

/// The simulated time and events the MoE launches of one forward add.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MoeLaunchCharge {
    /// Added simulated seconds (launches are serial on the NPU queue).
    pub time_s: f64,
    /// Added launches (expert launches + one top-k round trip per MoE layer).
    pub launches: u64,
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
    for (li, &n) in stats.layer_launches.iter().enumerate().filter(|(_, &n)| n > 0) {
        let launches = n + 1;
        let dur = launches as f64 * launch_s;
        let what = if policy == MoePolicy::Naive { "expert" } else { "expert-group" };
        c.events.push(TraceEvent {
            lane: Lane::Npu,
            name: format!("layer {li} MoE: top-k sync + {n} {what} launches"),
            category: "launch".into(),
            start_sim: c.time_s,
            dur_sim: dur,
            wall_start: 0.0,
            wall_dur: 0.0,
            bytes: 0,
        });
        c.time_s += dur;
        c.launches += launches;
    }
    Some(c)
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
        let grouped = charge(&stats, MoePolicy::StaticTiers, 1e-4).unwrap();
        assert!(grouped.events[0].name.contains("expert-group"));
    }
}
