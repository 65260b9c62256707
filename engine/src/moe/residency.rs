//! Load-aware residency: per layer, which expert groups stay resident on the NPU and which run on
//! the CPU at the same time.
//!
//! Each NPU launch costs a fixed dispatch time; a cold group (few tokens) costs little compute but a
//! full launch, so it can be cheaper on the CPU, which runs concurrently with the NPU groups. The CPU
//! groups' results are merged with one synchronisation. A layer's time is then
//! `max(NPU launches + NPU compute, CPU compute + sync)`. Groups move to the CPU, coldest first,
//! while that lowers the layer's energy-delay product (time × energy): a move that saves a little
//! time by waking power-hungry CPU cores is refused (minimising time alone ran phones' CPU lanes
//! at several times the NPU's energy in the simulated prefill). The energy counts the host core
//! that dispatches each launch and the merge, so a saved launch is saved host energy. Without
//! energies the rule is time alone. Groups whose weights do not fit the NPU's resident budget
//! are streamed in by DMA while the NPU runs the others (the DMA lane joins the NPU lane's time),
//! unless the same rule finds them cheaper on the CPU.

use serde::{Deserialize, Serialize};

/// What the residency decision needs to know about a device: the cost of one NPU launch, of
/// merging the CPU lane, and of one expert over some rows on each unit. The virtual NPU implements
/// it from a device profile; the real forward then runs the groups it places on the CPU on a
/// second thread.
pub trait ResidencyCostModel: Send + Sync + std::fmt::Debug {
    /// One NPU graph launch, seconds.
    fn launch_s(&self) -> f64;
    /// Merging the CPU lane's outputs into the NPU's (one host round trip), seconds.
    fn sync_s(&self) -> f64;
    /// (seconds, joules) of one `h -> f -> h` SwiGLU expert over `rows` rows on the NPU.
    fn npu_expert(&self, rows: usize, h: usize, f: usize) -> (f64, f64);
    /// (seconds, joules) of the same expert on the CPU lane.
    fn cpu_expert(&self, rows: usize, h: usize, f: usize) -> (f64, f64);
    /// Expert weight bytes one layer may keep resident on the NPU.
    fn npu_budget_bytes(&self) -> u64 {
        u64::MAX
    }
    /// Power of the host core that dispatches launches and merges, watts (0: unknown).
    fn host_w(&self) -> f64 {
        0.0
    }
    /// The fixed costs [`ResidencyPlan::decide`] weighs.
    fn dispatch(&self) -> DispatchCosts {
        DispatchCosts { launch_s: self.launch_s(), sync_s: self.sync_s(), host_w: self.host_w() }
    }
}

/// The fixed costs around a layer's groups: each NPU launch and the CPU lane's merge keep a host
/// core busy for their duration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DispatchCosts {
    /// One NPU launch, seconds.
    pub launch_s: f64,
    /// Merging the CPU lane's outputs, seconds.
    pub sync_s: f64,
    /// Power of the dispatching host core, watts (0: energy unknown).
    pub host_w: f64,
}

/// Where one group runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Resident on the NPU: one launch of its static grouped graph.
    Npu,
    /// On the CPU, concurrently with the NPU groups.
    Cpu,
}

/// The cost of one group in one layer, on each unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupCost {
    /// NPU compute for the group's static shape (excluding the launch), seconds.
    pub npu_s: f64,
    /// CPU compute for the group's routed rows, seconds.
    pub cpu_s: f64,
    /// Calibrated share of the layer's routed tokens (orders groups hot to cold).
    pub popularity: f64,
    /// Weight bytes the group keeps resident on the NPU.
    pub weight_bytes: u64,
    /// Energy of its NPU compute (joules; 0 when unknown).
    pub npu_j: f64,
    /// Energy of its CPU compute (joules; 0 when unknown).
    pub cpu_j: f64,
    /// Copying its weights into NPU memory when they are not resident (DMA, concurrent with the
    /// NPU's launches), seconds.
    #[serde(default)]
    pub stream_s: f64,
}

/// The decision for one layer and the time it predicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResidencyPlan {
    pub placement: Vec<Placement>,
    /// Predicted NPU lane time (launches + compute), seconds.
    pub npu_s: f64,
    /// Predicted CPU lane time (compute + the merge sync when any group is there), seconds.
    pub cpu_s: f64,
    /// Per group: beyond the resident budget, so its weights are streamed in when it runs on the NPU.
    #[serde(default)]
    pub streamed: Vec<bool>,
}

impl ResidencyPlan {
    /// The layer's predicted time: the two lanes run concurrently.
    pub fn layer_s(&self) -> f64 {
        self.npu_s.max(self.cpu_s)
    }

    /// Groups placed on the NPU.
    pub fn npu_groups(&self) -> usize {
        self.placement.iter().filter(|&&p| p == Placement::Npu).count()
    }

    /// Decides placements for one layer. `d`: the launch and merge costs; `npu_budget_bytes`:
    /// resident weight budget left for this layer's experts.
    pub fn decide(groups: &[GroupCost], d: DispatchCosts, npu_budget_bytes: u64) -> Self {
        let DispatchCosts { launch_s, sync_s, host_w } = d;
        let mut placement = vec![Placement::Npu; groups.len()];
        // Hot first into the resident budget; what does not fit is streamed in by DMA while the NPU
        // runs the others (double-buffered), unless the rule below moves it to the CPU.
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by(|&a, &b| groups[b].popularity.total_cmp(&groups[a].popularity).then(a.cmp(&b)));
        let mut streamed = vec![false; groups.len()];
        let mut used = 0u64;
        for &g in &order {
            if used.saturating_add(groups[g].weight_bytes) > npu_budget_bytes {
                streamed[g] = true;
            } else {
                used += groups[g].weight_bytes;
            }
        }
        let lanes = |p: &[Placement]| -> (f64, f64) {
            let (mut npu, mut dma, mut cpu) = (0.0, 0.0, 0.0);
            for ((c, pl), &s) in groups.iter().zip(p).zip(&streamed) {
                match pl {
                    Placement::Npu => {
                        npu += launch_s + c.npu_s;
                        if s {
                            dma += c.stream_s;
                        }
                    }
                    Placement::Cpu => cpu += c.cpu_s,
                }
            }
            let cpu = if p.contains(&Placement::Cpu) { cpu + sync_s } else { 0.0 };
            (npu.max(dma), cpu)
        };
        // A launch and the merge cost their host core's energy too.
        let energy = |p: &[Placement]| -> f64 {
            let units: f64 = groups
                .iter()
                .zip(p)
                .map(|(c, pl)| if *pl == Placement::Npu { c.npu_j + launch_s * host_w } else { c.cpu_j })
                .sum();
            units + if p.contains(&Placement::Cpu) { sync_s * host_w } else { 0.0 }
        };
        // Time × energy, or time alone when no energies are known.
        let score = |p: &[Placement]| -> f64 {
            let (n, c) = lanes(p);
            let e = energy(p);
            if e > 0.0 {
                n.max(c) * e
            } else {
                n.max(c)
            }
        };
        // Coldest first: move a group to the CPU while that shortens the layer and lowers the score.
        for &g in order.iter().rev() {
            if placement[g] == Placement::Cpu {
                continue;
            }
            let (n0, c0) = lanes(&placement);
            let s0 = score(&placement);
            placement[g] = Placement::Cpu;
            let (n1, c1) = lanes(&placement);
            if n1.max(c1) >= n0.max(c0) || score(&placement) >= s0 {
                placement[g] = Placement::Npu;
            }
        }
        let (npu_s, cpu_s) = lanes(&placement);
        let streamed = streamed.iter().zip(&placement).map(|(&s, &p)| s && p == Placement::Npu).collect();
        ResidencyPlan { placement, npu_s, cpu_s, streamed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(npu_s: f64, cpu_s: f64, popularity: f64) -> GroupCost {
        GroupCost { npu_s, cpu_s, popularity, weight_bytes: 10, npu_j: 0.0, cpu_j: 0.0, stream_s: 0.0 }
    }

    #[test]
    fn cold_groups_move_to_the_cpu_while_it_pays() {
        // Launch 1 ms: the two cold groups cost 1.1 ms each on the NPU but 0.5 ms on the CPU.
        let groups = [g(5e-3, 50e-3, 0.6), g(4e-3, 40e-3, 0.3), g(0.1e-3, 0.5e-3, 0.05), g(0.1e-3, 0.5e-3, 0.05)];
        let p = ResidencyPlan::decide(&groups, DispatchCosts { launch_s: 1e-3, sync_s: 0.2e-3, host_w: 0.0 }, u64::MAX);
        assert_eq!(p.placement, vec![Placement::Npu, Placement::Npu, Placement::Cpu, Placement::Cpu]);
        assert!((p.npu_s - 11e-3).abs() < 1e-9);
        assert!((p.cpu_s - 1.2e-3).abs() < 1e-9);
        assert_eq!(p.npu_groups(), 2);
        // When merging the CPU lane costs more than any overlap gains, nothing moves.
        let p = ResidencyPlan::decide(&groups, DispatchCosts { launch_s: 1e-3, sync_s: 20e-3, host_w: 0.0 }, u64::MAX);
        assert!(p.placement.iter().all(|&x| x == Placement::Npu));
    }

    #[test]
    fn a_move_that_costs_much_more_energy_is_refused() {
        // Moving the cold group saves 1 ms of 12 but its CPU energy is 50x its NPU energy.
        let mut groups = vec![g(10e-3, 100e-3, 0.9), g(0.1e-3, 0.5e-3, 0.1)];
        groups[0].npu_j = 10e-3;
        groups[1].npu_j = 0.1e-3;
        groups[1].cpu_j = 5e-3;
        let p = ResidencyPlan::decide(&groups, DispatchCosts { launch_s: 1e-3, sync_s: 0.1e-3, host_w: 0.0 }, u64::MAX);
        assert_eq!(p.placement, vec![Placement::Npu, Placement::Npu]);
        // When the CPU side is cheap in energy too, the move is taken.
        groups[1].cpu_j = 0.05e-3;
        let p = ResidencyPlan::decide(&groups, DispatchCosts { launch_s: 1e-3, sync_s: 0.1e-3, host_w: 0.0 }, u64::MAX);
        assert_eq!(p.placement, vec![Placement::Npu, Placement::Cpu]);
        // The launch a move saves keeps a 5 W host core busy for 1 ms (5 mJ): with that counted,
        // the 5 mJ CPU group of the first case is worth moving after all.
        groups[1].cpu_j = 5e-3;
        let p = ResidencyPlan::decide(&groups, DispatchCosts { launch_s: 1e-3, sync_s: 0.1e-3, host_w: 5.0 }, u64::MAX);
        assert_eq!(p.placement, vec![Placement::Npu, Placement::Cpu]);
    }

    #[test]
    fn budget_keeps_the_hot_groups_resident_and_streams_or_moves_the_rest() {
        let none = DispatchCosts { launch_s: 0.0, sync_s: 0.0, host_w: 0.0 };
        // The cold group does not fit: streaming its weights (2 ms, beside the hot group's 1 ms)
        // beats 9 ms on the CPU, so it stays on the NPU, streamed.
        let mut groups = [g(1e-3, 9e-3, 0.1), g(1e-3, 9e-3, 0.9)];
        groups[0].stream_s = 2e-3;
        let p = ResidencyPlan::decide(&groups, none, 10);
        assert_eq!(p.placement, vec![Placement::Npu, Placement::Npu]);
        assert_eq!(p.streamed, vec![true, false]);
        assert!((p.npu_s - 2e-3).abs() < 1e-12);
        // Streaming it would take 50 ms: the CPU's 9 ms is the better place.
        groups[0].stream_s = 50e-3;
        let p = ResidencyPlan::decide(&groups, none, 10);
        assert_eq!(p.placement, vec![Placement::Cpu, Placement::Npu]);
        assert_eq!(p.streamed, vec![false, false]);
    }
}
