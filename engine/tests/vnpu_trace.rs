//! Timeline export: Chrome trace / Perfetto JSON structure, energy per lane.

use std::path::Path;
use std::sync::Arc;

use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::memory::PlacementPolicy;
use unmask_engine::model::{load_transformer, ForwardRequest, KvMode};
use unmask_engine::trace::{to_chrome_trace, Lane, LanePower, Timeline, TraceEvent};

fn ev(lane: Lane, name: &str, start: f64, dur: f64, bytes: u64) -> TraceEvent {
    TraceEvent {
        lane,
        name: name.into(),
        category: "test".into(),
        start_sim: start,
        dur_sim: dur,
        wall_start: 0.0,
        wall_dur: 0.0,
        bytes,
    }
}

#[test]
fn energy_adds_busy_power_idle_power_and_dram() {
    let mut t = Timeline::new("dev");
    t.push(ev(Lane::Npu, "a", 0.0, 1.0, 1000));
    t.push(ev(Lane::Dma, "b", 0.5, 1.0, 0));
    let p = LanePower { npu_active_w: 4.0, npu_idle_w: 0.1, cpu_core_w: vec![2.0], dma_w: 0.5, dram_j_per_byte: 1e-3 };
    let e = t.energy(&p);
    // NPU: 1 s busy at 4 W + 0.5 s idle at 0.1 W; DMA 1 s at 0.5 W; DRAM 1000 B at 1 mJ.
    assert!((e.total_j - (4.0 + 0.05 + 0.5 + 1.0)).abs() < 1e-9, "{e:?}");
}

#[test]
fn chrome_trace_has_processes_threads_slices_and_counters() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    let model = Arc::new(load_transformer(&dir).unwrap().0);
    // A budget that forces swaps, so the DMA and host lanes carry events too.
    let cfg = VnpuConfig { placement: PlacementPolicy::Naive, budget_bytes: Some(400_000), ..VnpuConfig::default() };
    let mut npu = VirtualNpu::new(model, DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
    let toks: Vec<u32> = (0..24).collect();
    let pos: Vec<usize> = (0..24).collect();
    npu.forward(&ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &[23], kv: KvMode::Ignore }, None)
        .unwrap();

    let text = serde_json::to_string(&npu.chrome_trace()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let of = |ph: &str| evs.iter().filter(move |e| e["ph"] == ph).collect::<Vec<_>>();
    let procs: Vec<&str> =
        of("M").iter().filter(|e| e["name"] == "process_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert!(procs.contains(&"Snapdragon 8 Elite (SM8750) (simulated)"), "{procs:?}");
    let threads: Vec<&str> =
        of("M").iter().filter(|e| e["name"] == "thread_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    for lane in ["NPU", "DMA", "CPU 0"] {
        assert!(threads.contains(&lane), "{threads:?}");
    }
    let slices = of("X");
    assert!(slices.len() > 20);
    for s in &slices {
        assert!(s["ts"].as_f64().unwrap() >= 0.0 && s["dur"].as_f64().unwrap() >= 0.0);
        assert!(s["pid"].is_u64() && s["tid"].is_u64() && s["name"].is_string());
    }
    assert!(slices.iter().any(|s| s["cat"] == "matmul"));
    assert!(slices.iter().any(|s| s["cat"] == "transfer"));
    let counters = of("C");
    assert!(counters.iter().any(|c| c["name"] == "power (simulated)" && c["args"]["mW"].as_f64().unwrap() > 0.0));
    assert!(counters.iter().any(|c| c["name"] == "npu_visible_bytes"));
    // Simulated total matches the forward's simulated time.
    let t = npu.timeline();
    assert!((t.end_sim() - npu.totals().simulated_s).abs() < 1e-9);
    let energy = t.energy(&LanePower::from_profile(npu.profile()));
    assert!(energy.total_j > 0.0);
    let direct = to_chrome_trace(&t, &LanePower::from_profile(npu.profile()));
    assert_eq!(direct, npu.chrome_trace());
}

#[test]
fn discarding_the_timeline_keeps_the_clock_and_bounds_the_trace() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    let model = Arc::new(load_transformer(&dir).unwrap().0);
    let mut npu = VirtualNpu::new(model, DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let toks: Vec<u32> = (0..24).collect();
    let pos: Vec<usize> = (0..24).collect();
    let forward = |npu: &mut VirtualNpu| {
        npu.forward(&ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &[23], kv: KvMode::Ignore }, None)
            .unwrap();
    };
    forward(&mut npu);
    let one = npu.timeline_len();
    let end_of_first = npu.timeline().end_sim();
    assert!(one.0 > 0 && end_of_first > 0.0);
    forward(&mut npu);
    assert_eq!(npu.timeline_len().0, 2 * one.0, "a second forward records as many events");

    npu.discard_timeline();
    assert_eq!(npu.timeline_len(), (0, 0));
    forward(&mut npu);
    // Only the new forward's events remain, and they continue the clock after both earlier ones.
    assert_eq!(npu.timeline_len(), one);
    let t = npu.timeline();
    let start = t.events.iter().map(|e| e.start_sim).fold(f64::INFINITY, f64::min);
    assert!(start >= 2.0 * end_of_first - 1e-12, "the clock restarted: {start} < {}", 2.0 * end_of_first);
}
