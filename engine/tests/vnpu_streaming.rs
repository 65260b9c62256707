//! The swap-optimized memory runtime on the data path: with an NPU-visible budget smaller than the
//! model, the virtual NPU's forward copies the swapped-in weights through two staging slots on a
//! real thread and computes from the copies, with logits bit-identical to the CPU backend.

use std::path::Path;
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::vnpu::calibrate::synthetic_transformer;
use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::memory::weight_stream::SLOTS;
use unmask_engine::memory::StepShape;
use unmask_engine::model::{load_transformer, ForwardRequest, KvMode, Transformer};

fn model(name: &str) -> Arc<Transformer> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name);
    Arc::new(load_transformer(&dir).unwrap().0)
}

/// A virtual NPU whose budget forces some (not all) weights to stream for a 32-token block over a
/// 64-position context.
fn streaming_npu(m: &Arc<Transformer>) -> VirtualNpu {
    let shape = StepShape { tokens: 20, context: 60, logit_rows: 20 };
    let full = m.weights.matrix_bytes() as u64;
    let mut budget = full * 2;
    for _ in 0..60 {
        budget = budget * 7 / 8;
        let cfg = VnpuConfig { budget_bytes: Some(budget), ..VnpuConfig::default() };
        let mut npu = VirtualNpu::new(m.clone(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
        let prefill = npu.stream_plan(StepShape { tokens: 40, context: 40, logit_rows: 1 });
        if let (Ok(p), true) = (npu.stream_plan(shape), prefill.is_ok()) {
            if !p.is_empty() {
                return npu;
            }
        }
    }
    panic!("no budget made the model stream");
}

fn check_model(name: &str) {
    let m = model(name);
    let mut cpu = CpuBackend::new(m.clone());
    let mut npu = streaming_npu(&m);
    let vocab = m.config.vocab as u32;
    let mask = m.config.mask_token_id.unwrap_or(0);
    let prompt: Vec<u32> = (0..40).map(|i| (i * 11 + 5) % vocab).collect();
    let pos: Vec<usize> = (0..40).collect();
    let (mut c1, mut c2) = (cpu.new_cache(128), npu.new_cache(128));
    let pre = ForwardRequest { tokens: &prompt, positions: &pos, logits_rows: &[39], kv: KvMode::ReadWrite };
    let (a, _) = cpu.forward(&pre, Some(&mut c1)).unwrap();
    let (b, _) = npu.forward(&pre, Some(&mut c2)).unwrap();
    assert_eq!(a.logits, b.logits, "{name}: prefill logits bit-identical");

    let block = vec![mask; 20];
    let bpos: Vec<usize> = (40..60).collect();
    let rows: Vec<usize> = (0..20).collect();
    let req = ForwardRequest { tokens: &block, positions: &bpos, logits_rows: &rows, kv: KvMode::Read };
    let (a, _) = cpu.forward(&req, Some(&mut c1)).unwrap();
    let (b, _) = npu.forward(&req, Some(&mut c2)).unwrap();
    assert_eq!(a.logits, b.logits, "{name}: streamed block logits bit-identical");

    let r = npu.last_stream_report().expect("the block forward streamed weights").clone();
    let plan = npu.stream_plan(StepShape { tokens: 20, context: 60, logit_rows: 20 }).unwrap();
    let streamed_layers = plan.layers.iter().filter(|l| !l.is_empty()).count() + usize::from(plan.head);
    assert_eq!(r.remaps, streamed_layers, "{name}: one slot fill per streamed layer");
    assert!(r.bytes > 0);
    assert!(
        r.max_slots_in_use >= 1 && r.max_slots_in_use <= SLOTS,
        "{name}: double buffer, {} slots",
        r.max_slots_in_use
    );
    assert_eq!(r.compute_spans.len(), m.config.n_layers + 1, "{name}: every layer and the head computed");
    assert_eq!(r.copy_spans.len(), streamed_layers);
    // Each layer computes only after its copy finished.
    for (l, copy) in &r.copy_spans {
        let compute = r.compute_spans.iter().find(|(c, _)| c == l).unwrap().1;
        assert!(compute.start >= copy.end, "{name}: layer {l} computed before its copy ended");
    }
    let t = npu.totals();
    assert!(t.staged_bytes >= r.bytes && t.staged_remaps >= r.remaps);
    // The staging slots are fixed buffers: a second streamed forward refills them in place.
    let (c, _) = cpu.forward(&req, Some(&mut c1)).unwrap();
    let (d, _) = npu.forward(&req, Some(&mut c2)).unwrap();
    assert_eq!(c.logits, d.logits, "{name}: refilled slots give bit-identical logits");
    let again = npu.last_stream_report().unwrap();
    assert_eq!(again.allocations, 0, "{name}: steady-state fills allocate nothing");
    assert_eq!(again.pool_bytes, r.pool_bytes, "{name}: the pool does not grow");
    assert!(again.bytes > 0);
    let weights = m.weights.matrix_bytes() as u64;
    assert!(again.pool_bytes < weights, "{name}: the pool ({}) is smaller than the weights ({weights})", again.pool_bytes);
    // The simulated transfers of that forward carry the measured copy times.
    let measured = npu.timeline().events.iter().filter(|e| e.category == "transfer" && e.wall_dur > 0.0).count();
    assert!(measured > 0, "{name}: transfer events carry measured wall time");
}

#[test]
fn streamed_forward_equals_cpu_on_every_dense_architecture() {
    for name in ["llada", "dream", "llama", "qwen2", "qwen3"] {
        check_model(name);
    }
}

#[test]
fn streamed_forward_equals_cpu_on_moe() {
    check_model("llada_moe");
}

#[test]
fn resident_model_does_not_stream() {
    let m = model("llada");
    let mut npu = VirtualNpu::new(m.clone(), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let toks = [1u32, 2, 3];
    let (_, _) = npu
        .forward(&ForwardRequest { tokens: &toks, positions: &[0, 1, 2], logits_rows: &[2], kv: KvMode::Ignore }, None)
        .unwrap();
    assert!(npu.last_stream_report().is_none(), "a model that fits the session stays resident");
    assert_eq!(npu.totals().staged_bytes, 0);
}

/// The staging thread really runs beside compute: some copy time of a streamed forward overlaps
/// a layer's compute. The model has more streamed layers than slots, so the third layer's copy can
/// only start once the first layer's compute has handed its slot back, i.e. while the second layer
/// computes. On a loaded 2-core machine (other tests run beside this one) the scheduler can still
/// hold the staging thread back, so overlap must show up in one of several forwards.
#[test]
fn staging_thread_overlaps_copies_with_compute() {
    let mut cfg = model("llada").config.clone();
    cfg.n_layers = 6;
    cfg.hidden = 128;
    cfg.head_dim = 32;
    cfg.rotary_dim = 32;
    cfg.ffn = 512;
    let m = Arc::new(synthetic_transformer(&cfg, 11).unwrap());
    let shape = StepShape { tokens: 20, context: 20, logit_rows: 20 };
    let full = m.weights.matrix_bytes() as u64;
    let (mut budget, mut best) = (full * 2, None);
    for _ in 0..80 {
        budget = budget * 7 / 8;
        let cfg = VnpuConfig { budget_bytes: Some(budget), ..VnpuConfig::default() };
        let mut npu = VirtualNpu::new(m.clone(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
        match npu.stream_plan(shape) {
            Ok(p) => {
                if p.layers.iter().filter(|l| !l.is_empty()).count() > SLOTS {
                    best = Some(npu);
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let mut npu = best.expect("a budget that streams more layers than there are slots");
    let vocab = m.config.vocab as u32;
    let tokens: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % vocab).collect();
    let pos: Vec<usize> = (0..20).collect();
    let rows: Vec<usize> = (0..20).collect();
    let req = ForwardRequest { tokens: &tokens, positions: &pos, logits_rows: &rows, kv: KvMode::Ignore };
    let mut reports = Vec::new();
    for _ in 0..40 {
        npu.forward(&req, None).unwrap();
        let r = npu.last_stream_report().expect("the forward streamed weights").clone();
        assert!(r.overlap_s <= r.copy_s + 1e-9 && r.overlap_fraction() <= 1.0, "{r:?}");
        let done = r.overlap_s > 0.0;
        reports.push(r);
        if done {
            break;
        }
    }
    let last = reports.last().expect("one forward");
    assert!(last.overlap_s > 0.0, "copies must run while layers compute: {:?}", &reports[..3.min(reports.len())]);
}
