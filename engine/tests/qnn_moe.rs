//! MoE models on the QNN backend against the mock provider: the dense part of every layer runs as
//! a layer graph, routing and capacities on the host, and each expert group that received tokens
//! as one grouped static graph (one launch). Logits equal the CPU forward's under the same
//! routing, launches are one per group with tokens, static tiers drop exactly the CPU's pairs.

#[path = "common/qnn.rs"]
mod qnn;

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use qnn::*;
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::qnn::{Outcome, QnnBackend, QnnOptions, QnnPrecision};
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, CacheMode, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{load_transformer, Transformer};
use unmask_engine::moe::ffn::{MoeExecution, StaticPlan, DEFAULT_GROUP_SIZE};
use unmask_engine::moe::{CapacityTiers, MoePolicy, MoeStats};
use unmask_engine::run::{calibrate_moe, static_plan, CalibrationShape};

/// As the dense f32 lowering (`qnn_backend.rs`): only summation order differs from the CPU.
const F32_BOUND: f32 = 2e-5;

fn tiny_llada_moe() -> Arc<Transformer> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada-moe");
    Arc::new(load_transformer(&dir).expect("load tiny-llada-moe").0)
}

fn qnn_backend(t: &Arc<Transformer>, opts: QnnOptions) -> QnnBackend {
    QnnBackend::new(Arc::clone(t), opts).expect("QNN backend on the mock")
}

/// Deterministic ordinary ids (no special tokens) below `vocab`.
fn ids(len: usize, seed: u32, vocab: usize) -> Vec<u32> {
    (0..len as u32).map(|i| 10 + (seed * 31 + i * 97) % (vocab as u32 - 20)).collect()
}

/// Groups with a kept token, summed over layers, for experts grouped `size` at a time in index
/// order (the grouping without a static plan), from per-layer expert token counts.
fn groups_with_tokens(stats: &MoeStats, size: usize) -> u64 {
    stats.expert_tokens.iter().map(|l| l.chunks(size).filter(|g| g.iter().any(|&c| c > 0)).count() as u64).sum()
}

/// Forwards `prompts` on both backends (f32, no drops): logits within the f32 bound, the same
/// routing, and one grouped launch per group with tokens per layer.
fn check_against_cpu(name: &str, t: &Arc<Transformer>, prompts: &[Vec<u32>]) {
    let mock = Mock::new();
    let mut cpu = CpuBackend::new(Arc::clone(t));
    let mut q = qnn_backend(t, options(&mock, QnnPrecision::F32));
    let layers = t.config.n_layers;
    t.take_moe_stats();
    for (i, p) in prompts.iter().enumerate() {
        let want = forward_all(&mut cpu, p);
        let cpu_stats = t.take_moe_stats();
        let before = q.stats().clone();
        let got = forward_all(&mut q, p);
        // Through the backend trait, as a run reads them (the transformer's own counters stay empty).
        let qs = Backend::take_moe_stats(&mut q).expect("the QNN backend reports its MoE counters");
        let err = max_rel_err(&got, &want);
        eprintln!(
            "{name} prompt {i} ({} tokens): f32 QNN vs cpu max rel err {err:.2e}, {} launches",
            p.len(),
            qs.launches
        );
        assert!(err < F32_BOUND, "{name} prompt {i}: {err}");
        assert_eq!(qs.expert_tokens, cpu_stats.expert_tokens, "{name} prompt {i}: same routing");
        assert_eq!((qs.routed, qs.dropped, qs.layer_runs), (cpu_stats.routed, 0, layers as u64));
        let launches = groups_with_tokens(&cpu_stats, DEFAULT_GROUP_SIZE);
        assert_eq!(qs.launches, launches, "{name} prompt {i}: one launch per group with tokens");
        let s = q.stats();
        assert_eq!(s.moe_launches - before.moe_launches, launches as usize);
        // A graph per layer (attention up to the FFN input), the groups, the head.
        assert_eq!(s.executes - before.executes, layers + launches as usize + 1);
    }
    // Every context built once: the same (layer, group, shape) is reused, never rebuilt.
    let keys: Vec<&str> = q.outcomes().iter().map(|(k, _)| k.as_str()).collect();
    let distinct: HashSet<&str> = keys.iter().copied().collect();
    assert_eq!(distinct.len(), keys.len(), "{keys:?}");
    assert_eq!(count(&mock.calls(), "graphFinalize"), keys.len());
    assert!(keys.iter().any(|k| k.contains("-moe-l")), "{keys:?}");
}

#[test]
fn embedded_tiny_llada_moe_matches_cpu() {
    let t = tiny_llada_moe();
    let v = t.config.vocab;
    // Ragged lengths: 21 pads to the 32-token bucket, 8 fills its bucket, 5 pads to 8.
    let prompts = [ids(21, 1, v), ids(8, 2, v), ids(5, 3, v)];
    check_against_cpu("tiny-llada-moe", &t, &prompts);
}

#[test]
fn golden_moe_models_match_cpu() {
    for name in ["llada_moe", "qwen3_moe"] {
        check_against_cpu(name, &model(name), &prompts(name));
    }
}

fn decode_tokens(b: &mut dyn Backend, prompt: &[u32], s: &DecodeSettings) -> Vec<u32> {
    generate(b, prompt, s, &CancelFlag::new(), |_: &StepFrame| ControlFlow::Continue(())).expect("decode").tokens
}

/// Whole decodes, with and without K/V cache inputs (a cached block routes only its own rows).
#[test]
fn moe_decodes_equal_the_cpu_backend() {
    let cases = [
        ("llada_moe", DecodeSettings { gen_length: 8, block_length: 8, steps: 8, ..Default::default() }),
        (
            "llada_moe",
            DecodeSettings { gen_length: 16, block_length: 8, steps: 8, cache: CacheMode::Dual, ..Default::default() },
        ),
        ("qwen3_moe", DecodeSettings { gen_length: 8, ..Default::default() }),
    ];
    for (name, s) in cases {
        let mock = Mock::new();
        let t = model(name);
        let prompt = &prompts(name)[0];
        let mut cpu = CpuBackend::new(Arc::clone(&t));
        let mut q = qnn_backend(&t, options(&mock, QnnPrecision::F32));
        let want = decode_tokens(&mut cpu, prompt, &s);
        let got = decode_tokens(&mut q, prompt, &s);
        eprintln!("{name} {:?}: {} forwards, {} grouped launches", s.cache, q.stats().forwards, q.stats().moe_launches);
        assert_eq!(got, want, "{name} {:?}", s.cache);
    }
}

/// Runs `prompts` on both backends under the static plan `plan`: the same pairs dropped (same
/// saliency order), the same launches, the same logits (the drops are the same). Returns the
/// QNN counters summed over the prompts.
fn check_static_tiers(t: &Arc<Transformer>, plan: Arc<StaticPlan>, prompts: &[Vec<u32>]) -> MoeStats {
    t.set_moe_execution(MoeExecution {
        policy: MoePolicy::StaticTiers,
        plan: Some(plan),
        renormalise_dropped: true,
        residency: None,
    })
    .unwrap();
    let mock = Mock::new();
    let mut cpu = CpuBackend::new(Arc::clone(t));
    let mut q = qnn_backend(t, options(&mock, QnnPrecision::F32));
    t.take_moe_stats();
    let mut total = MoeStats::default();
    for (i, p) in prompts.iter().enumerate() {
        let want = forward_all(&mut cpu, p);
        let cs = t.take_moe_stats();
        let got = forward_all(&mut q, p);
        let qs = q.take_moe_stats();
        let err = max_rel_err(&got, &want);
        eprintln!(
            "static tiers prompt {i} ({} tokens): routed {}, dropped {} (cpu {}), without expert {}, launches {} (cpu {}), err {err:.2e}",
            p.len(),
            qs.routed,
            qs.dropped,
            cs.dropped,
            qs.tokens_without_expert,
            qs.launches,
            cs.launches
        );
        assert_eq!(qs.expert_tokens, cs.expert_tokens, "prompt {i}");
        assert_eq!(
            (qs.routed, qs.dropped, qs.tokens_without_expert),
            (cs.routed, cs.dropped, cs.tokens_without_expert)
        );
        assert_eq!(qs.launches, cs.launches, "prompt {i}: one launch per group with kept tokens");
        assert!(err < F32_BOUND, "prompt {i}: {err}");
        total.merge(&qs);
    }
    t.set_moe_execution(MoeExecution::default()).unwrap();
    total
}

/// A calibrated static plan (the default tiers), and a tight one (capacities at half the mean
/// load, experts in pairs) that drops many pairs.
#[test]
fn static_tiers_drop_what_the_cpu_drops() {
    let t = tiny_llada_moe();
    let v = t.config.vocab;
    // Buckets of the QNN token buckets' sizes, so the plan's capacities are tight for them.
    let shape = CalibrationShape { buckets: vec![16, 32], ..CalibrationShape::for_model(&t, 16) };
    let calib: Vec<Vec<u32>> = (0..24).map(|i| ids(14, 100 + i, v)).collect();
    let cal = calibrate_moe(&t, &calib, &shape, &mut |_, _| {}).expect("calibrate");
    let prompts = [ids(30, 7, v), ids(26, 8, v), ids(12, 9, v), ids(3, 10, v)];
    let calibrated = check_static_tiers(&t, static_plan(&t, Some(&cal)).expect("plan"), &prompts);
    assert!(calibrated.dropped > 0, "the calibrated capacities should drop some pairs on these prompts");
    let tight = StaticPlan::from_calibration(&cal, &CapacityTiers { factor: 0.5, ..CapacityTiers::default() }, 2);
    let tight = check_static_tiers(&t, Arc::new(tight), &prompts);
    assert!(tight.drop_rate() > 0.2, "tight capacities drop much more: {}", tight.drop_rate());
}

/// Quantised weights: W8A16 logits stay close to the CPU's (routing may flip for near ties, so
/// the bound is looser than the dense model's).
#[test]
fn w8a16_tiny_llada_moe_stays_close() {
    let t = tiny_llada_moe();
    let mut cpu = CpuBackend::new(Arc::clone(&t));
    let p = ids(24, 5, t.config.vocab);
    let want = forward_all(&mut cpu, &p);
    let mock = Mock::new();
    let mut q = qnn_backend(&t, options(&mock, QnnPrecision::W8A16));
    let got = forward_all(&mut q, &p);
    let err = max_rel_err(&got, &want);
    let top1 = top1_agreement(&got, &want, t.config.vocab);
    eprintln!("tiny-llada-moe w8a16: max rel err {err:.3e}, top-1 agreement {top1:.3}");
    assert!(err < 0.3, "{err}");
    assert!(top1 >= 0.9, "{top1}");
    assert!(err > 1e-5, "suspiciously exact, weights not quantised?");
}

/// A second start with the same cache directory reloads every MoE context (layer graphs ending
/// at the FFN input, grouped expert graphs with their Split) instead of building, and runs them
/// to the same logits.
#[test]
fn moe_contexts_reload_from_the_cache() {
    let t = model("llada_moe");
    let p = &prompts("llada_moe")[0];
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let mock = Mock::new();
        let opts = QnnOptions { cache_dir: Some(dir.path().to_path_buf()), ..options(&mock, QnnPrecision::F32) };
        let mut q = qnn_backend(&t, opts);
        let logits = forward_all(&mut q, p);
        (logits, q.outcomes().to_vec(), count(&mock.calls(), "graphFinalize"))
    };
    let (first, built, _) = run();
    assert!(built.iter().all(|(_, o)| matches!(o, Outcome::Built { .. })), "{built:?}");
    let (second, loaded, finalized) = run();
    assert_eq!(finalized, 0, "nothing built on the second start");
    assert!(loaded.iter().all(|(_, o)| *o == Outcome::Loaded), "{loaded:?}");
    assert_eq!(loaded.len(), built.len());
    assert_eq!(first, second);
}
