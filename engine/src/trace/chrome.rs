//! Chrome trace / Perfetto JSON export: one process per device labelled "(simulated)", one named
//! thread per lane, `X` complete events in simulated microseconds, `C` counters for power and
//! memory, and a second process with the same events at measured wall time.

use serde_json::{json, Value};

use super::energy::LanePower;
use super::{Lane, Timeline};

const SIM_PID: u32 = 1;
const WALL_PID: u32 = 2;

fn tid(lane: Lane) -> u64 {
    match lane {
        Lane::Npu => 1,
        Lane::Dma => 2,
        Lane::Verifier => 3,
        Lane::Drafter => 4,
        Lane::Cpu(i) => 10 + i as u64,
    }
}

fn us(s: f64) -> f64 {
    // Round to nanoseconds so the JSON stays short and stable.
    (s * 1e9).round() / 1e3
}

/// The `{"traceEvents": [...]}` document for a timeline.
pub fn to_chrome_trace(t: &Timeline, power: &LanePower) -> Value {
    let mut ev: Vec<Value> = Vec::new();
    let lanes = t.lanes();
    let has_wall = t.events.iter().any(|e| e.wall_dur > 0.0);
    ev.push(json!({"ph": "M", "name": "process_name", "pid": SIM_PID, "tid": 0,
                   "args": {"name": format!("{} (simulated)", t.device)}}));
    ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": SIM_PID, "tid": 0, "args": {"sort_index": 0}}));
    if has_wall {
        ev.push(json!({"ph": "M", "name": "process_name", "pid": WALL_PID, "tid": 0,
                       "args": {"name": "host (measured wall time)"}}));
        ev.push(json!({"ph": "M", "name": "process_sort_index", "pid": WALL_PID, "tid": 0, "args": {"sort_index": 1}}));
    }
    for &lane in &lanes {
        for pid in [SIM_PID, WALL_PID] {
            if pid == WALL_PID && !has_wall {
                continue;
            }
            ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid(lane), "args": {"name": lane.label()}}),
            );
            ev.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid(lane), "args": {"sort_index": tid(lane)}}));
        }
    }
    for e in &t.events {
        let args = json!({"bytes": e.bytes, "wall_start_us": us(e.wall_start), "wall_dur_us": us(e.wall_dur)});
        ev.push(json!({"ph": "X", "name": e.name, "cat": e.category, "pid": SIM_PID, "tid": tid(e.lane),
                       "ts": us(e.start_sim), "dur": us(e.dur_sim), "args": args}));
        if has_wall && e.wall_dur > 0.0 {
            ev.push(json!({"ph": "X", "name": e.name, "cat": e.category, "pid": WALL_PID, "tid": tid(e.lane),
                           "ts": us(e.wall_start), "dur": us(e.wall_dur), "args": {"sim_dur_us": us(e.dur_sim)}}));
        }
    }
    for (ts, mw) in power_steps(t, power) {
        ev.push(
            json!({"ph": "C", "name": "power (simulated)", "pid": SIM_PID, "tid": 0, "ts": us(ts), "args": {"mW": mw}}),
        );
    }
    for c in &t.counters {
        ev.push(
            json!({"ph": "C", "name": c.name, "pid": SIM_PID, "tid": 0, "ts": us(c.t_sim), "args": {"value": c.value}}),
        );
    }
    json!({"traceEvents": ev, "displayTimeUnit": "ms",
           "otherData": {"device": t.device, "time_base": "simulated device time; pid 2 carries measured wall time"}})
}

/// Total power (mW) after each event boundary: idle NPU power plus every lane busy at that moment.
fn power_steps(t: &Timeline, p: &LanePower) -> Vec<(f64, f64)> {
    let mut edges: Vec<(f64, i32, Lane)> = Vec::with_capacity(2 * t.events.len());
    for e in t.events.iter().filter(|e| e.dur_sim > 0.0 && !e.is_summary()) {
        edges.push((e.start_sim, 1, e.lane));
        edges.push((e.start_sim + e.dur_sim, -1, e.lane));
    }
    // Ends before starts at the same instant, so back-to-back events do not double count.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut active: std::collections::BTreeMap<Lane, i32> = Default::default();
    let mut out: Vec<(f64, f64)> = vec![(0.0, p.npu_idle_w * 1e3)];
    for (ts, d, lane) in edges {
        *active.entry(lane).or_insert(0) += d;
        let mut w = 0.0;
        let npu_busy = active.get(&Lane::Npu).copied().unwrap_or(0) > 0;
        if !npu_busy {
            w += p.npu_idle_w;
        }
        for (&l, &n) in &active {
            if n > 0 {
                w += p.active_w(l);
            }
        }
        match out.last_mut() {
            Some(last) if last.0 == ts => last.1 = w * 1e3,
            _ => out.push((ts, w * 1e3)),
        }
    }
    out
}
