//! The virtual NPU runs the real forward: outputs identical to the CPU backend, plus simulated stats.

use std::path::Path;
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::memory::PlacementPolicy;
use unmask_engine::model::{load_transformer, ForwardRequest, KvMode, Transformer};

fn tiny_llada() -> Arc<Transformer> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    Arc::new(load_transformer(&dir).unwrap().0)
}

fn run_both(cpu: &mut dyn Backend, npu: &mut dyn Backend) {
    let vocab = cpu.config().vocab as u32;
    let mask = cpu.config().mask_token_id.unwrap_or(0);
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % vocab).collect();
    let pos: Vec<usize> = (0..prompt.len()).collect();
    let mut c1 = cpu.new_cache(128);
    let mut c2 = npu.new_cache(128);
    let pre = ForwardRequest { tokens: &prompt, positions: &pos, logits_rows: &[39], kv: KvMode::ReadWrite };
    let (a, _) = cpu.forward(&pre, Some(&mut c1)).unwrap();
    let (b, sb) = npu.forward(&pre, Some(&mut c2)).unwrap();
    assert_eq!(a.logits, b.logits, "prefill logits must be bit-identical");
    assert_eq!(sb.tokens, 40);
    assert_eq!(sb.padded_tokens, 64, "40 tokens pad to the 64 bucket");
    // A 20-token masked block over the cached prefix.
    let block = vec![mask; 20];
    let bpos: Vec<usize> = (40..60).collect();
    let rows: Vec<usize> = (0..20).collect();
    let req = ForwardRequest { tokens: &block, positions: &bpos, logits_rows: &rows, kv: KvMode::Read };
    let (a, sa) = cpu.forward(&req, Some(&mut c1)).unwrap();
    let (b, sb) = npu.forward(&req, Some(&mut c2)).unwrap();
    assert_eq!(a.logits, b.logits, "block logits must be bit-identical");
    assert_eq!(a.context_len, b.context_len);
    assert!(sa.simulated_s.is_none());
    let sim = sb.simulated_s.unwrap();
    assert!(sim > 0.0 && sim.is_finite(), "simulated time {sim}");
    assert!(sb.energy_j.unwrap() > 0.0);
    assert_eq!(sb.padded_tokens, 32);
    assert_eq!(sb.flops, sa.flops);
}

#[test]
fn outputs_identical_to_cpu_backend() {
    let model = tiny_llada();
    let mut cpu = CpuBackend::new(model.clone());
    for placement in [PlacementPolicy::SwapOptimized, PlacementPolicy::Naive] {
        let cfg = VnpuConfig { placement, ..VnpuConfig::default() };
        let mut npu = VirtualNpu::new(model.clone(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
        run_both(&mut cpu, &mut npu);
        assert_eq!(npu.name(), "vnpu:sm8750");
        let totals = npu.totals();
        assert_eq!(totals.forwards, 2);
        assert_eq!(totals.padded_tokens, 96);
    }
}

#[test]
fn every_builtin_profile_runs_the_model() {
    let model = tiny_llada();
    for name in DeviceProfile::list_builtin() {
        let p = DeviceProfile::builtin(name).unwrap();
        let mut npu = VirtualNpu::new(model.clone(), p, VnpuConfig::default()).unwrap();
        let toks = [1u32, 2, 3];
        let (_, s) = npu
            .forward(
                &ForwardRequest { tokens: &toks, positions: &[0, 1, 2], logits_rows: &[2], kv: KvMode::Ignore },
                None,
            )
            .unwrap();
        assert!(s.simulated_s.unwrap() > 0.0, "{name}");
    }
}

#[test]
fn cost_profile_reports_buckets_and_launch_overhead() {
    let npu = VirtualNpu::new(tiny_llada(), DeviceProfile::builtin("sm8650").unwrap(), VnpuConfig::default()).unwrap();
    let cp = npu.cost_profile().unwrap();
    assert_eq!(cp.token_buckets, vec![1, 16, 32, 64, 128, 256]);
    // 2 layers, one graph each, plus the head graph, at 160 us per execute.
    assert!((cp.launch_overhead_s - 3.0 * 160e-6).abs() < 1e-9, "{}", cp.launch_overhead_s);
}

#[test]
fn context_beyond_the_largest_bucket_is_rejected_like_the_device() {
    let cfg = VnpuConfig { context_buckets: Some(vec![16]), ..VnpuConfig::default() };
    let mut npu = VirtualNpu::new(tiny_llada(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
    let toks = vec![5u32; 20];
    let pos: Vec<usize> = (0..20).collect();
    let e =
        npu.forward(&ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &[0], kv: KvMode::Ignore }, None);
    assert!(e.is_err());
    assert_eq!(npu.totals().forwards, 0, "the real forward must not run");
}

#[test]
fn tokens_beyond_the_largest_bucket_split_into_launches() {
    let cfg = VnpuConfig { token_buckets: Some(vec![16, 32]), ..VnpuConfig::default() };
    let mut npu = VirtualNpu::new(tiny_llada(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
    let toks = vec![5u32; 70];
    let pos: Vec<usize> = (0..70).collect();
    let (_, s) = npu
        .forward(&ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &[0], kv: KvMode::Ignore }, None)
        .unwrap();
    assert_eq!(s.padded_tokens, 32 + 32 + 16);
}

#[test]
fn budget_too_small_for_the_model_is_an_error() {
    let cfg = VnpuConfig { budget_bytes: Some(8192), ..VnpuConfig::default() };
    let mut npu = VirtualNpu::new(tiny_llada(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
    let e = npu
        .forward(&ForwardRequest { tokens: &[1, 2], positions: &[0, 1], logits_rows: &[1], kv: KvMode::Ignore }, None);
    assert!(e.is_err());
}
