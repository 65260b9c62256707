//! Swap-optimized memory runtime: plans respect budgets and small budgets force swaps (the staging
//! thread on the data path is tested in `vnpu_streaming.rs`).

use std::sync::Arc;

use unmask_engine::backend::vnpu::replay::ModelPreset;
use unmask_engine::memory::{plan_memory, BufferClass, LayerGraph, PlacementPolicy, Precision, StepShape};

fn llada_graph() -> LayerGraph {
    LayerGraph::build(
        &ModelPreset::Llada8B.config(),
        StepShape { tokens: 32, context: 1024, logit_rows: 32 },
        &Precision::npu_w4a16(),
    )
}

#[test]
fn llada_8b_does_not_fit_one_session_and_the_plan_stays_in_budget() {
    let g = llada_graph();
    let weights = g.bytes_of(BufferClass::Weight);
    assert!(weights > 4_000_000_000, "W4.5 LLaDA-8B is ~4.2 GB: {weights}");
    let budget = 3 * (1u64 << 30) + 3 * (1 << 28);
    for policy in [PlacementPolicy::Naive, PlacementPolicy::SwapOptimized] {
        let p = plan_memory(&g, budget, policy).unwrap();
        assert!(p.peak_resident_bytes <= budget, "{policy:?}");
        assert!(p.remaps_per_step > 0, "{policy:?}: a model larger than the budget must swap");
        assert!(p.streamed_bytes_per_step > 0);
    }
    let naive = plan_memory(&g, budget, PlacementPolicy::Naive).unwrap();
    let opt = plan_memory(&g, budget, PlacementPolicy::SwapOptimized).unwrap();
    assert!(
        opt.activation_bytes * 10 < naive.activation_bytes,
        "packing: {} vs {}",
        opt.activation_bytes,
        naive.activation_bytes
    );
    assert!(opt.streamed_bytes_per_step <= naive.streamed_bytes_per_step);
}

#[test]
fn plans_never_exceed_a_range_of_budgets() {
    let g = llada_graph();
    let total =
        g.bytes_of(BufferClass::Weight) + g.bytes_of(BufferClass::KvCache) + g.bytes_of(BufferClass::Activation);
    for frac in [0.4, 0.5, 0.7, 0.9, 1.0, 1.5] {
        let budget = (total as f64 * frac) as u64;
        for policy in [PlacementPolicy::Naive, PlacementPolicy::SwapOptimized] {
            if let Ok(p) = plan_memory(&g, budget, policy) {
                assert!(p.peak_resident_bytes <= budget, "{policy:?} at {frac}");
            }
        }
    }
}

#[test]
fn memory_runtime_acts_on_the_timed_path_at_8b_shapes() {
    use std::path::Path;
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    use unmask_engine::backend::Backend;
    use unmask_engine::model::{load_transformer, ForwardRequest, KvMode};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llada");
    let model = Arc::new(load_transformer(&dir).unwrap().0);
    for preset in [ModelPreset::Llada8B, ModelPreset::Dream7B] {
        let cfg = VnpuConfig { timed_as: Some(preset.config()), ..VnpuConfig::default() };
        let mut npu = VirtualNpu::new(model.clone(), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap();
        let toks = vec![3u32; 32];
        let pos: Vec<usize> = (0..32).collect();
        let rows: Vec<usize> = (0..32).collect();
        npu.forward(&ForwardRequest { tokens: &toks, positions: &pos, logits_rows: &rows, kv: KvMode::Ignore }, None)
            .unwrap();
        let t = npu.timeline();
        let dma: Vec<_> = t.events.iter().filter(|e| e.category == "transfer").collect();
        if preset == ModelPreset::Llada8B {
            assert!(!dma.is_empty(), "LLaDA-8B W4A16 exceeds one session: the simulated forward streams");
            let plan = npu.memory_plan(32, 32, 32).unwrap();
            assert!(plan.peak_resident_bytes <= plan.budget_bytes);
            assert!(plan.streamed_bytes_per_step > 0);
        }
        // Operators carry no apportioned wall time; only measured spans do.
        assert!(t.events.iter().filter(|e| e.category == "matmul").all(|e| e.wall_dur == 0.0));
    }
}

#[test]
fn switching_off_any_part_of_the_runtime_costs_time() {
    use unmask_engine::backend::vnpu::replay::{memory_runtime_ablation, DecodeTrace};
    let trace = DecodeTrace::block_decoding(64, 64, 32, 8);
    let rows = memory_runtime_ablation(&trace, ModelPreset::Llada8B, "sm8750").unwrap();
    assert_eq!(rows.len(), PlacementPolicy::ABLATIONS.len());
    assert_eq!(rows[0].policy, PlacementPolicy::SwapOptimized);
    for r in &rows {
        assert!(r.result.peak_resident_bytes <= r.result.budget_bytes, "{}", r.label);
        assert!(r.slowdown_vs_full >= 1.0 - 1e-9, "{}: {}", r.label, r.slowdown_vs_full);
    }
    assert!(rows[0].result.streamed_bytes > 0 && rows[0].result.dma_busy_s > 0.0);
    let naive_remap = rows.iter().find(|r| r.policy == PlacementPolicy::SwapNaiveRemap).unwrap();
    assert!(naive_remap.result.map_calls > 0 && naive_remap.slowdown_vs_full > 1.0);
}
