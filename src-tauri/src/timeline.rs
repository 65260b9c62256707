//! Profiler timelines: the stored vNPU timeline (simulated device time) as the UI's
//! [`TimelineView`], and a measured timeline built from a CPU run's step frames.

use std::collections::BTreeMap;

use unmask_engine::decode::StepFrame;
use unmask_engine::trace::{Lane, LanePower, Timeline, TraceEvent};
use unmask_store::StoredTimeline;

use crate::dto::{CounterView, EventView, LaneKind, LaneView, TimelineView};

/// Device label of timelines measured on this machine (CPU runs).
pub use unmask_engine::trace::MEASURED_DEVICE;

fn lane_id(lane: Lane) -> String {
    match lane {
        Lane::Npu => "npu".into(),
        Lane::Dma => "dma".into(),
        Lane::Cpu(i) => format!("cpu{i}"),
        Lane::Verifier => "verifier".into(),
        Lane::Drafter => "drafter".into(),
    }
}

fn lane_kind(lane: Lane) -> LaneKind {
    match lane {
        Lane::Npu => LaneKind::Npu,
        Lane::Dma => LaneKind::Dma,
        Lane::Cpu(_) | Lane::Verifier | Lane::Drafter => LaneKind::Cpu,
    }
}

fn counter_unit(name: &str) -> &'static str {
    if name.ends_with("bytes") {
        "bytes"
    } else if name.ends_with("_w") || name.contains("power") {
        "W"
    } else if name.ends_with("_j") || name.contains("energy") {
        "J"
    } else if name == unmask_engine::decode::spec_ar::trace::QUEUE_DEPTH_COUNTER {
        "drafts"
    } else {
        ""
    }
}

/// Whether a stored timeline was measured (CPU run) rather than simulated.
pub fn is_measured(t: &Timeline) -> bool {
    t.device == MEASURED_DEVICE
}

/// The UI view of a stored timeline: lanes NPU / CPU / DMA, every event, counters grouped by
/// name, total energy from the stored lane powers, and the peak NPU-visible memory.
pub fn view(stored: &StoredTimeline) -> TimelineView {
    let t = &stored.timeline;
    let simulated = !is_measured(t);
    let lanes = t.lanes().into_iter().map(|l| LaneView { id: lane_id(l), label: l.label(), kind: lane_kind(l) }).collect();
    let events = t
        .events
        .iter()
        .map(|e| EventView {
            lane: lane_id(e.lane),
            name: e.name.clone(),
            start_s: e.start_sim,
            dur_s: e.dur_sim,
            simulated,
        })
        .collect();
    let mut grouped: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for c in &t.counters {
        grouped.entry(c.name.as_str()).or_default().push((c.t_sim, c.value));
    }
    let peak = t
        .counters
        .iter()
        .filter(|c| c.name == "npu_visible_bytes")
        .map(|c| c.value)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        .map(|v| v as u64);
    let mut counters: Vec<CounterView> = grouped
        .into_iter()
        .map(|(name, points)| CounterView { name: name.to_owned(), unit: counter_unit(name).to_owned(), points })
        .collect();
    let energy_j = if simulated { stored.power.as_ref().map(|p| t.energy(p).total_j) } else { None };
    if let (Some(p), true) = (&stored.power, simulated) {
        counters.push(cumulative_energy(t, p));
    }
    TimelineView { lanes, events, counters, energy_j, peak_resident_bytes: peak, simulated }
}

/// Cumulative energy (J) at the end of each non-summary event, in event end order: active power ×
/// duration per lane plus DRAM traffic (NPU idle power is left out here; the total includes it).
fn cumulative_energy(t: &Timeline, p: &LanePower) -> CounterView {
    let mut ends: Vec<(f64, f64)> = t
        .events
        .iter()
        .filter(|e| !e.is_summary())
        .map(|e| (e.start_sim + e.dur_sim, p.active_w(e.lane) * e.dur_sim + e.bytes as f64 * p.dram_j_per_byte))
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut acc = 0.0;
    let points = ends
        .into_iter()
        .map(|(t, j)| {
            acc += j;
            (t, acc)
        })
        .collect();
    CounterView { name: "energy_active_j".into(), unit: "J".into(), points }
}

/// A measured timeline of a CPU run: one slice per denoising step on lane CPU 0 at its measured
/// wall time (`start_sim` holds measured seconds here; the device label says so), plus a counter
/// of committed tokens.
pub fn measured_from_frames(frames: &[StepFrame]) -> StoredTimeline {
    let mut t = Timeline::new(MEASURED_DEVICE);
    let mut at = 0.0;
    for f in frames {
        t.push(TraceEvent {
            lane: Lane::Cpu(0),
            name: format!("step {} ({} tok forward)", f.step, f.forward_tokens),
            category: "step".into(),
            start_sim: at,
            dur_sim: f.step_wall_s,
            wall_start: at,
            wall_dur: f.step_wall_s,
            bytes: 0,
        });
        at += f.step_wall_s;
        t.push_counter("committed_tokens", at, f.committed_total as f64);
    }
    StoredTimeline { timeline: t, power: None }
}

/// Lane powers of zero, for exporting measured timelines (no energy model for the host).
pub fn zero_power() -> LanePower {
    LanePower { npu_active_w: 0.0, npu_idle_w: 0.0, cpu_core_w: vec![0.0], dma_w: 0.0, dram_j_per_byte: 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(step: usize, wall: f64, committed: usize) -> StepFrame {
        StepFrame {
            step,
            block: (4, 8),
            forward_tokens: 8,
            changes: Vec::new(),
            step_wall_s: wall,
            simulated_s: None,
            committed_total: committed,
        }
    }

    #[test]
    fn measured_timeline_lays_steps_end_to_end() {
        let stored = measured_from_frames(&[frame(0, 0.5, 2), frame(1, 0.25, 4)]);
        let v = view(&stored);
        assert!(!v.simulated);
        assert_eq!(v.lanes.len(), 1);
        assert_eq!(v.lanes[0].kind, LaneKind::Cpu);
        assert_eq!(v.events.len(), 2);
        assert_eq!(v.events[1].start_s, 0.5);
        assert_eq!(v.energy_j, None);
        let committed = v.counters.iter().find(|c| c.name == "committed_tokens").expect("counter");
        assert_eq!(committed.points, vec![(0.5, 2.0), (0.75, 4.0)]);
    }

    #[test]
    fn simulated_timeline_has_energy_and_peak_memory() {
        let mut t = Timeline::new("Test NPU");
        for (lane, start, dur) in [(Lane::Npu, 0.0, 1.0), (Lane::Dma, 0.0, 0.5), (Lane::Cpu(1), 1.0, 0.25)] {
            t.push(TraceEvent {
                lane,
                name: "op".into(),
                category: "matmul".into(),
                start_sim: start,
                dur_sim: dur,
                wall_start: 0.0,
                wall_dur: 0.0,
                bytes: 0,
            });
        }
        t.push_counter("npu_visible_bytes", 0.0, 100.0);
        t.push_counter("npu_visible_bytes", 0.5, 300.0);
        let power = LanePower { npu_active_w: 2.0, npu_idle_w: 0.0, cpu_core_w: vec![1.0, 1.0], dma_w: 0.5, dram_j_per_byte: 0.0 };
        let v = view(&StoredTimeline { timeline: t, power: Some(power) });
        assert!(v.simulated);
        let kinds: Vec<LaneKind> = v.lanes.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, vec![LaneKind::Npu, LaneKind::Cpu, LaneKind::Dma]);
        assert_eq!(v.peak_resident_bytes, Some(300));
        // 2 W × 1 s + 0.5 W × 0.5 s + 1 W × 0.25 s.
        let e = v.energy_j.expect("energy");
        assert!((e - 2.5).abs() < 1e-9, "{e}");
        let cum = v.counters.iter().find(|c| c.name == "energy_active_j").expect("energy counter");
        assert!((cum.points.last().expect("points").1 - 2.5).abs() < 1e-9);
    }
}
