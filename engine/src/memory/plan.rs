//! Residency planning for a bounded NPU-visible address space: which buffers stay mapped, which are
//! swapped in per use, and where short-lived activations live.
//!
//! Two policies are modelled so their difference can be measured:
//! - [`PlacementPolicy::Naive`]: every activation gets its own registration for the whole graph, weights
//!   are kept resident in order of first use until the space runs out, and each remaining weight is
//!   mapped before its operator and unmapped after it (synchronous, one map call per use).
//! - [`PlacementPolicy::SwapOptimized`]: activations are packed by lifetime into one arena, the KV cache
//!   stays resident, the largest weights are kept resident, and the rest stream through a
//!   double-buffered staging arena mapped once (copies, no map calls, overlapped with compute).

use crate::error::{EngineError, Result};

use super::graph::{BufferClass, BufferId, LayerGraph};
use super::packing::{align_up, pack_by_lifetime, PackItem};

/// Mapping granularity: buffers and arena offsets are page aligned.
pub const PAGE: u64 = 4096;

/// How buffers are placed in the NPU-visible space. Besides the two end points, three variants
/// switch off one part of the swap-optimized runtime each, so its cost can be measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PlacementPolicy {
    /// Per-tensor registrations, map/unmap per use, no overlap.
    Naive,
    /// Lifetime-packed activations, planned residency, double-buffered staging.
    SwapOptimized,
    /// As `SwapOptimized` without lifetime packing: every activation keeps its own page-aligned
    /// registration for the whole graph (less room for resident weights).
    SwapNoPacking,
    /// As `SwapOptimized` with one staging slot: a copy can only start once the previous copy's
    /// operator has finished with the slot.
    SwapSingleBuffer,
    /// As `SwapOptimized` (packing, same residency) but each streamed weight is mapped before its
    /// operator and unmapped after it, synchronously, instead of copied into mapped staging slots.
    SwapNaiveRemap,
}

impl PlacementPolicy {
    /// The full runtime, each part switched off in turn, and the naive end point.
    pub const ABLATIONS: [PlacementPolicy; 5] = [
        PlacementPolicy::SwapOptimized,
        PlacementPolicy::SwapNoPacking,
        PlacementPolicy::SwapSingleBuffer,
        PlacementPolicy::SwapNaiveRemap,
        PlacementPolicy::Naive,
    ];

    /// Whether short-lived activations share one lifetime-packed arena.
    pub fn packs_activations(self) -> bool {
        matches!(self, PlacementPolicy::SwapOptimized | PlacementPolicy::SwapSingleBuffer | PlacementPolicy::SwapNaiveRemap)
    }

    /// Staging slots (or on-demand mapping windows) reserved for streamed weights.
    pub fn staging_slots(self) -> usize {
        match self {
            PlacementPolicy::SwapOptimized | PlacementPolicy::SwapNoPacking => 2,
            PlacementPolicy::SwapSingleBuffer | PlacementPolicy::SwapNaiveRemap | PlacementPolicy::Naive => 1,
        }
    }

    /// Whether streamed weights are mapped and unmapped around every use (no staging copies).
    pub fn maps_per_use(self) -> bool {
        matches!(self, PlacementPolicy::Naive | PlacementPolicy::SwapNaiveRemap)
    }

    /// Short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            PlacementPolicy::Naive => "naive (everything off)",
            PlacementPolicy::SwapOptimized => "memory runtime (all parts on)",
            PlacementPolicy::SwapNoPacking => "no activation packing",
            PlacementPolicy::SwapSingleBuffer => "single staging buffer",
            PlacementPolicy::SwapNaiveRemap => "naive remapping (map/unmap per use)",
        }
    }
}

/// The outcome of planning one graph against a budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MemoryPlan {
    /// Policy used.
    pub policy: PlacementPolicy,
    /// NPU-visible bytes available.
    pub budget_bytes: u64,
    /// Whether each buffer stays mapped for the whole run.
    pub resident: Vec<bool>,
    /// Arena offset of each activation (swap-optimized policy only).
    pub activation_offsets: Vec<Option<u64>>,
    /// Bytes reserved for activations.
    pub activation_bytes: u64,
    /// Bytes of the KV cache (always resident).
    pub kv_bytes: u64,
    /// Bytes of resident weights.
    pub resident_weight_bytes: u64,
    /// Size of one staging slot (swap-optimized) or of the on-demand mapping window (naive).
    pub staging_slot_bytes: u64,
    /// Number of staging slots (2 = double buffering; 1 = the naive mapping window).
    pub staging_slots: usize,
    /// Weights swapped in before each operator.
    pub per_op_streamed: Vec<Vec<BufferId>>,
    /// Highest NPU-visible footprint at any time.
    pub peak_resident_bytes: u64,
    /// Bytes copied into NPU-visible memory per forward.
    pub streamed_bytes_per_step: u64,
    /// Buffers swapped in per forward (by a map call or a staging copy).
    pub remaps_per_step: usize,
    /// Map calls per forward (naive: one per streamed weight; swap-optimized: none).
    pub map_calls_per_step: usize,
    /// Map calls made once at set-up.
    pub setup_map_calls: usize,
}

/// Plans `graph` into `budget_bytes` of NPU-visible space.
pub fn plan_memory(graph: &LayerGraph, budget_bytes: u64, policy: PlacementPolicy) -> Result<MemoryPlan> {
    let life = graph.lifetimes();
    let n = graph.buffers.len();
    let is = |b: usize, c: BufferClass| graph.buffers[b].class == c;
    let kv_bytes: u64 =
        (0..n).filter(|&b| is(b, BufferClass::KvCache)).map(|b| align_up(graph.buffers[b].bytes, PAGE)).sum();
    let acts: Vec<usize> = (0..n).filter(|&b| is(b, BufferClass::Activation) && life[b].is_some()).collect();
    let mut activation_offsets = vec![None; n];
    let activation_bytes = match policy.packs_activations() {
        false => acts.iter().map(|&b| align_up(graph.buffers[b].bytes, PAGE)).sum(),
        true => {
            let items: Vec<PackItem> = acts
                .iter()
                .map(|&b| {
                    let (first, last) = life[b].unwrap_or((0, 0));
                    PackItem { bytes: graph.buffers[b].bytes, first, last }
                })
                .collect();
            let packing = pack_by_lifetime(&items, PAGE);
            for (i, &b) in acts.iter().enumerate() {
                activation_offsets[b] = Some(packing.offsets[i]);
            }
            packing.arena_bytes
        }
    };
    let fixed = kv_bytes + activation_bytes;
    let too_small = |need: u64| {
        EngineError::Backend {
        backend: "vnpu".into(),
        reason: format!(
            "NPU-visible budget of {budget_bytes} bytes cannot hold the KV cache and activations plus one weight ({need} bytes needed)"
        ),
    }
    };
    // Weights in order of first use.
    let mut weights: Vec<usize> = (0..n).filter(|&b| is(b, BufferClass::Weight) && life[b].is_some()).collect();
    weights.sort_by_key(|&b| life[b].map(|l| l.0).unwrap_or(0));
    let wsize = |b: usize| align_up(graph.buffers[b].bytes, PAGE);
    // KV cache always resident; activations live in the (resident) arena or their own registrations.
    let mut resident: Vec<bool> =
        (0..n).map(|b| is(b, BufferClass::KvCache) || is(b, BufferClass::Activation)).collect();
    let slots = policy.staging_slots();
    let (slot, slots) = match policy {
        PlacementPolicy::Naive => {
            // Reserve a window for the largest weight, then keep weights in order of first use.
            let window = weights.iter().map(|&b| wsize(b)).max().unwrap_or(0);
            if fixed + window > budget_bytes {
                return Err(too_small(fixed + window));
            }
            let mut used = fixed + window;
            for &b in &weights {
                if used + wsize(b) <= budget_bytes {
                    used += wsize(b);
                    resident[b] = true;
                }
            }
            (window, 1)
        }
        _ => {
            let choice = choose_residency(&weights, wsize, fixed, budget_bytes, slots as u64).ok_or_else(|| {
                too_small(fixed + slots as u64 * weights.iter().map(|&b| wsize(b)).min().unwrap_or(0))
            })?;
            for &b in &choice.resident {
                resident[b] = true;
            }
            (choice.slot, slots)
        }
    };
    // What each operator swaps in.
    let per_op_streamed: Vec<Vec<BufferId>> =
        graph.ops.iter().map(|op| graph.weights_of(op).filter(|&b| !resident[b]).collect()).collect();
    let streamed: Vec<usize> = per_op_streamed.iter().flatten().copied().collect();
    let streamed_bytes_per_step: u64 = streamed.iter().map(|&b| graph.buffers[b].bytes).sum();
    let resident_weight_bytes: u64 = weights.iter().filter(|&&b| resident[b]).map(|&b| wsize(b)).sum();
    // The window/slots are only needed if something streams.
    let (slot, slots) = if streamed.is_empty() { (0, 0) } else { (slot, slots) };
    let peak = fixed + resident_weight_bytes + slot * slots as u64;
    let registrations = if policy.packs_activations() { 1 } else { acts.len() };
    let kept = weights.iter().filter(|&&b| resident[b]).count();
    let (map_calls, setup) = if policy.maps_per_use() {
        (streamed.len(), kept + registrations + 1)
    } else {
        (0, kept + registrations + 1 + slots)
    };
    Ok(MemoryPlan {
        policy,
        budget_bytes,
        resident,
        activation_offsets,
        activation_bytes,
        kv_bytes,
        resident_weight_bytes,
        staging_slot_bytes: slot,
        staging_slots: slots,
        per_op_streamed,
        peak_resident_bytes: peak,
        streamed_bytes_per_step,
        remaps_per_step: streamed.len(),
        map_calls_per_step: map_calls,
        setup_map_calls: setup,
    })
}

struct Residency {
    resident: Vec<usize>,
    slot: u64,
}

/// Picks resident weights minimising streamed bytes: for each candidate slot size (the largest weight
/// allowed to stream), weights larger than the slot must be resident, the rest are added largest
/// first while they fit next to `slots` slots.
fn choose_residency(
    weights: &[usize],
    wsize: impl Fn(usize) -> u64,
    fixed: u64,
    budget: u64,
    slots: u64,
) -> Option<Residency> {
    let mut sizes: Vec<u64> = weights.iter().map(|&b| wsize(b)).collect();
    sizes.push(0);
    sizes.sort_unstable();
    sizes.dedup();
    let mut by_size: Vec<usize> = weights.to_vec();
    by_size.sort_by_key(|&b| std::cmp::Reverse(wsize(b)));
    let total: u64 = weights.iter().map(|&b| wsize(b)).sum();
    let mut best: Option<(u64, Residency)> = None;
    for &cap in &sizes {
        let must: u64 = weights.iter().filter(|&&b| wsize(b) > cap).map(|&b| wsize(b)).sum();
        let mut used = fixed + must + slots * cap;
        if used > budget {
            continue;
        }
        let mut resident: Vec<usize> = weights.iter().copied().filter(|&b| wsize(b) > cap).collect();
        for &b in by_size.iter().filter(|&&b| wsize(b) <= cap) {
            if used + wsize(b) <= budget {
                used += wsize(b);
                resident.push(b);
            }
        }
        let kept: u64 = resident.iter().map(|&b| wsize(b)).sum();
        let streamed = total - kept;
        // The real slot is the largest weight that actually streams.
        let slot = weights.iter().filter(|b| !resident.contains(b)).map(|&b| wsize(b)).max().unwrap_or(0);
        if best.as_ref().is_none_or(|(s, _)| streamed < *s) {
            best = Some((streamed, Residency { resident, slot }));
        }
    }
    best.map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::graph::{Precision, StepShape};

    fn graph() -> LayerGraph {
        LayerGraph::build(
            &crate::memory::plan_test_config(),
            StepShape { tokens: 32, context: 128, logit_rows: 32 },
            &Precision::f32(),
        )
    }

    #[test]
    fn whole_model_fits_without_swaps() {
        let g = graph();
        for policy in [PlacementPolicy::Naive, PlacementPolicy::SwapOptimized] {
            let p = plan_memory(&g, 1 << 40, policy).unwrap();
            assert_eq!(p.remaps_per_step, 0, "{policy:?}");
            assert_eq!(p.streamed_bytes_per_step, 0);
        }
    }

    #[test]
    fn small_budget_forces_remaps_and_is_respected() {
        let g = graph();
        let weights = g.bytes_of(BufferClass::Weight);
        for policy in [PlacementPolicy::Naive, PlacementPolicy::SwapOptimized] {
            let budget = weights / 2 + 2 * g.bytes_of(BufferClass::Activation) + g.bytes_of(BufferClass::KvCache);
            assert!(budget < weights + g.bytes_of(BufferClass::Activation) + g.bytes_of(BufferClass::KvCache));
            let p = plan_memory(&g, budget, policy).unwrap();
            assert!(p.remaps_per_step > 0, "{policy:?}");
            assert!(p.streamed_bytes_per_step > 0);
            assert!(p.peak_resident_bytes <= budget, "{policy:?}: {} > {budget}", p.peak_resident_bytes);
        }
    }

    #[test]
    fn packing_shrinks_activations_and_streams_less() {
        let g = graph();
        let budget = g.bytes_of(BufferClass::Weight) / 2
            + 2 * g.bytes_of(BufferClass::Activation)
            + g.bytes_of(BufferClass::KvCache);
        let naive = plan_memory(&g, budget, PlacementPolicy::Naive).unwrap();
        let opt = plan_memory(&g, budget, PlacementPolicy::SwapOptimized).unwrap();
        assert!(opt.activation_bytes < naive.activation_bytes);
        assert!(opt.streamed_bytes_per_step <= naive.streamed_bytes_per_step);
        assert_eq!(opt.map_calls_per_step, 0);
        assert!(naive.map_calls_per_step > 0);
    }

    #[test]
    fn every_ablation_respects_the_budget() {
        let g = graph();
        let budget = g.bytes_of(BufferClass::Weight) / 2
            + 2 * g.bytes_of(BufferClass::Activation)
            + g.bytes_of(BufferClass::KvCache);
        let full = plan_memory(&g, budget, PlacementPolicy::SwapOptimized).unwrap();
        for policy in PlacementPolicy::ABLATIONS {
            let p = plan_memory(&g, budget, policy).unwrap();
            assert!(p.peak_resident_bytes <= budget, "{policy:?}");
            assert_eq!(p.staging_slots, policy.staging_slots(), "{policy:?}");
            assert_eq!(p.map_calls_per_step > 0, policy.maps_per_use(), "{policy:?}");
            // Fewer slots leave more room for resident weights; the other variants stream at least as much.
            if policy.staging_slots() == 2 {
                assert!(p.streamed_bytes_per_step >= full.streamed_bytes_per_step, "{policy:?}");
            }
        }
        let unpacked = plan_memory(&g, budget, PlacementPolicy::SwapNoPacking).unwrap();
        assert!(unpacked.activation_bytes > full.activation_bytes);
    }

    #[test]
    fn too_small_budget_is_an_error() {
        assert!(plan_memory(&graph(), 4096, PlacementPolicy::SwapOptimized).is_err());
        assert!(plan_memory(&graph(), 4096, PlacementPolicy::Naive).is_err());
    }
}
