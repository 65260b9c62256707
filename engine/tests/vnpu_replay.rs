//! Trace-driven scaling and calibration: shapes of the results (numbers are simulated).

use std::path::Path;

use unmask_engine::backend::vnpu::calibrate::{calibrate, synthetic_transformer};
use unmask_engine::backend::vnpu::replay::{cpu_simulator, npu_config, replay, DecodeTrace, ModelPreset, ReplayResult};
use unmask_engine::backend::vnpu::{simulator_for, DeviceProfile};
use unmask_engine::memory::PlacementPolicy;
use unmask_engine::model::load_transformer;

/// `trace` replayed with every preset on every built-in NPU profile (swap-optimized runtime) and
/// on each profile's CPU.
fn replay_matrix(trace: &DecodeTrace) -> unmask_engine::Result<Vec<ReplayResult>> {
    let mut out = Vec::new();
    for name in DeviceProfile::list_builtin() {
        let profile = DeviceProfile::builtin(name)?;
        for preset in ModelPreset::ALL {
            let cfg = preset.config();
            if profile.has_npu() {
                let mut sim = simulator_for(&cfg, &profile, &npu_config(PlacementPolicy::SwapOptimized))?;
                out.push(replay(trace, &mut sim, name, "npu swap-optimized")?);
            }
            let cores = profile.cpu.total_cores();
            let mut cpu = cpu_simulator(&cfg, &profile, cores);
            out.push(replay(trace, &mut cpu, name, &format!("cpu x{cores}"))?);
        }
    }
    Ok(out)
}

#[test]
fn decode_traces_have_the_expected_steps() {
    let t = DecodeTrace::block_decoding(100, 64, 32, 32);
    // Prefill + 2 blocks × (32 denoising steps + 1 KV commit).
    assert_eq!(t.steps.len(), 1 + 2 * 33);
    assert_eq!(t.steps[1].logit_rows, 32);
    assert_eq!(t.steps[32].logit_rows, 1);
    assert_eq!(t.steps[33].logit_rows, 0);
    let ar = DecodeTrace::autoregressive(100, 10);
    assert_eq!(ar.steps.len(), 10);
    assert_eq!(ar.steps[9].context, 109);
}

#[test]
fn presets_match_the_published_shapes() {
    let l = ModelPreset::Llada8B.config();
    assert_eq!((l.hidden, l.n_layers, l.n_heads, l.n_kv_heads, l.ffn, l.vocab), (4096, 32, 32, 32, 12288, 126464));
    let d = ModelPreset::Dream7B.config();
    assert_eq!((d.hidden, d.n_layers, d.n_heads, d.n_kv_heads, d.ffn, d.vocab), (3584, 28, 28, 4, 18944, 152064));
    let a = ModelPreset::Llama3_8B.config();
    assert_eq!((a.hidden, a.n_layers, a.n_heads, a.n_kv_heads, a.ffn, a.vocab), (4096, 32, 32, 8, 14336, 128256));
    assert!(a.causal && !l.causal);
}

#[test]
fn replay_matrix_covers_every_profile_and_preset() {
    let trace = DecodeTrace::block_decoding(64, 64, 32, 8);
    let rows = replay_matrix(&trace).unwrap();
    let npu_profiles =
        DeviceProfile::list_builtin().iter().filter(|n| DeviceProfile::builtin(n).unwrap().has_npu()).count();
    let profiles = DeviceProfile::list_builtin().len();
    assert_eq!(rows.len(), 3 * (npu_profiles + profiles));
    assert!(rows.iter().all(|r| r.simulated_latency_s > 0.0 && r.simulated_energy_j > 0.0));
}

#[test]
fn calibration_report_has_a_point_per_block_size() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    let (model, _) = load_transformer(&dir).unwrap();
    let host = DeviceProfile::builtin("host-cpu").unwrap();
    let r = calibrate(&model, &host, &[16, 32, 64], 32, 2).unwrap();
    assert_eq!(r.points.len(), 3);
    for p in &r.points {
        assert!(p.measured_s > 0.0 && p.predicted_s > 0.0 && p.rel_error.is_finite(), "{p:?}");
    }
    assert!(r.time_scale > 0.0);
}

/// Prints calibration and replay numbers (`cargo test --test vnpu_replay -- --ignored --nocapture`).
#[test]
#[ignore]
fn print_calibration_and_replay_numbers() {
    let host = DeviceProfile::builtin("host-cpu").unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    let (tiny, _) = load_transformer(&dir).unwrap();
    let r = calibrate(&tiny, &host, &[16, 32, 64, 128], 0, 5).unwrap();
    println!("tiny golden llada: {}", serde_json::to_string_pretty(&r).unwrap());
    let mut cfg = ModelPreset::Llada8B.config();
    cfg.hidden = 512;
    cfg.n_heads = 4;
    cfg.n_kv_heads = 4;
    cfg.head_dim = 128;
    cfg.rotary_dim = 128;
    cfg.ffn = 1536;
    cfg.n_layers = 4;
    cfg.vocab = 4096;
    cfg.max_seq = 1024;
    cfg.mask_token_id = Some(4095);
    let synth = synthetic_transformer(&cfg, 7).unwrap();
    let r = calibrate(&synth, &host, &[16, 32, 64, 128], 256, 3).unwrap();
    println!("synthetic h512 L4: {}", serde_json::to_string_pretty(&r).unwrap());
    cfg.hidden = 2048;
    cfg.n_heads = 16;
    cfg.n_kv_heads = 16;
    cfg.ffn = 5632;
    cfg.n_layers = 2;
    let synth = synthetic_transformer(&cfg, 7).unwrap();
    let r = calibrate(&synth, &host, &[16, 32, 64, 128], 256, 2).unwrap();
    println!("synthetic h2048 L2: {}", serde_json::to_string_pretty(&r).unwrap());
    let g = unmask_engine::memory::LayerGraph::build(
        &ModelPreset::Llada8B.config(),
        unmask_engine::memory::StepShape { tokens: 32, context: 1024, logit_rows: 32 },
        &unmask_engine::memory::Precision::npu_w4a16(),
    );
    for policy in [unmask_engine::memory::PlacementPolicy::Naive, unmask_engine::memory::PlacementPolicy::SwapOptimized]
    {
        let p = unmask_engine::memory::plan_memory(&g, 3 * (1 << 30) + 3 * (1 << 28), policy).unwrap();
        println!(
            "LLaDA-8B plan {policy:?}: peak {} act {} kv {} resident weights {} slot {}x{} streamed/step {} remaps/step {} map calls/step {}",
            p.peak_resident_bytes, p.activation_bytes, p.kv_bytes, p.resident_weight_bytes, p.staging_slots,
            p.staging_slot_bytes, p.streamed_bytes_per_step, p.remaps_per_step, p.map_calls_per_step
        );
    }
    let trace = DecodeTrace::block_decoding(100, 128, 32, 32);
    for r in replay_matrix(&trace).unwrap() {
        println!(
            "{:<14} {:<11} {:<22} {:>8.2}s {:>8.1}J {:>7.1} tok/s",
            r.device, r.model, r.setup, r.simulated_latency_s, r.simulated_energy_j, r.tokens_per_s
        );
    }
}
