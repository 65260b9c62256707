use super::*;

/// Qwen3-30B-A3B's expert shapes on 4 layers of 32 experts, so debug-build tests stay fast.
fn small_shape() -> MoeShape {
    MoeShape { name: "small", n_layers: 4, n_experts: 32, top_k: 4, ..MoeShape::QWEN3_30B_A3B }
}

fn workload(shape: MoeShape) -> MoeWorkload {
    let setup = PrefillSetup { calibration_prompts: 2, group_size: Some(4), ..PrefillSetup::default() };
    MoeWorkload::calibrate(shape, setup, &[256]).unwrap()
}

#[test]
fn apple_profiles_load_and_have_an_npu() {
    for name in ["m2-max", "a18-pro"] {
        let p = DeviceProfile::builtin(name).unwrap();
        let npu = ComputeTarget::npu(&p, &Precision::npu_w4a16()).unwrap();
        assert!(npu.launch_overhead_s > 0.0 && npu.matrix_ops_per_s > 1e12, "{name}");
        assert!(!ShapeBuckets::from_profile(&p).tokens.is_empty());
    }
}

#[test]
fn launches_are_active_experts_for_naive_and_npu_groups_for_ours() {
    let w = workload(small_shape());
    let p = DeviceProfile::builtin("m2-max").unwrap();
    let routing = w.evaluation_prompt(256);
    let naive = simulate_prefill(&w, &p, &routing, PrefillPolicy::NaiveNpu).unwrap();
    let active: usize = routing.layers.iter().map(|l| l.counts().iter().filter(|&&c| c > 0).count()).sum();
    // 256 tokens x 4 of 32 experts: no expert exceeds the largest bucket (512 rows), so one launch each.
    assert_eq!(naive.expert_launches, active);
    let ours = simulate_prefill(&w, &p, &routing, PrefillPolicy::StaticTiersGrouped).unwrap();
    assert_eq!(ours.expert_launches, ours.npu_groups);
    assert_eq!(ours.npu_groups + ours.cpu_groups, 4 * 8, "8 groups of 4 in each of 4 layers");
    // Dense blocks (256 tokens fit one bucket) and the head: one launch each.
    assert_eq!(naive.launches - naive.expert_launches, 4 + 1);
    assert_eq!(ours.launches - ours.expert_launches, 4 + 1);
    assert!(ours.expert_launches < naive.expert_launches);
    assert!(ours.drop_rate() < 0.2, "drop rate {}", ours.drop_rate());
    assert_eq!(naive.dropped_pairs, 0);
}

#[test]
fn without_launch_cost_or_padding_naive_is_the_exact_expert_work() {
    let w = workload(small_shape());
    let mut p = DeviceProfile::builtin("m2-max").unwrap();
    let npu = p.npu.as_mut().unwrap();
    npu.launch_overhead_s.value = 0.0;
    (npu.tile_m.value, npu.tile_n.value, npu.tile_k.value) = (1, 1, 1);
    // A graph for every row count up to 512: no expert is padded.
    npu.token_buckets.value = (1..=512).collect();
    let routing = w.evaluation_prompt(256);
    let naive = simulate_prefill(&w, &p, &routing, PrefillPolicy::NaiveNpu).unwrap();
    assert_eq!((naive.dispatch_s, naive.padded_rows), (0.0, 0));
    let prec = Precision::npu_w4a16();
    let target = ComputeTarget::npu(&p, &prec).unwrap();
    let mut by_rows = ExpertCosts::new(&target, &w.shape, &prec);
    let exact: f64 = routing.layers.iter().flat_map(|l| l.counts()).map(|r| by_rows.at(r).time_s).sum();
    assert!((naive.phases.experts_s - exact).abs() <= 1e-9 * exact, "{} vs {exact}", naive.phases.experts_s);
    // Ours runs the same dense graphs and head; its NPU groups compute at least their kept rows.
    let ours = simulate_prefill(&w, &p, &routing, PrefillPolicy::StaticTiersGrouped).unwrap();
    assert!((ours.phases.dense_s - naive.phases.dense_s).abs() < 1e-12);
    assert!((ours.phases.head_s - naive.phases.head_s).abs() < 1e-12);
    assert!(
        ours.phases.experts_s > 0.0 && ours.phases.experts_s <= exact * 2.0,
        "{} vs {exact}",
        ours.phases.experts_s
    );
    // Only the CPU lane's merge sync is left of the dispatch cost.
    assert_eq!(ours.dispatch_s, 0.0);
}

#[test]
fn calibration_and_evaluation_seeds_must_differ() {
    let setup = PrefillSetup { calibration_seed: 5, evaluation_seed: 5, ..PrefillSetup::default() };
    assert!(setup.check().is_err());
    assert!(MoeWorkload::calibrate(small_shape(), setup, &[256]).is_err());
    let w = workload(small_shape());
    assert_ne!(w.setup.calibration_seed, w.setup.evaluation_seed);
    // The evaluation prompt is not one the calibration saw.
    let cal_prompt = w.router.route_prompt(256, w.setup.calibration_seed, 0);
    assert_ne!(w.evaluation_prompt(256), cal_prompt);
}

#[test]
fn cpu_only_never_touches_the_npu() {
    let w = workload(small_shape());
    let p = DeviceProfile::builtin("sm8750").unwrap();
    let r = simulate_prefill(&w, &p, &w.evaluation_prompt(256), PrefillPolicy::CpuOnly).unwrap();
    assert_eq!(r.npu_busy_s, 0.0);
    assert_eq!(r.launches, 0);
    assert_eq!(r.energy.npu_j, 0.0);
    assert_eq!(r.dropped_pairs, 0);
    assert!(r.prefill_s > 0.0 && r.energy_j > 0.0);
    // Every core busy for the whole prefill.
    assert!((r.cpu_busy_core_s - r.prefill_s * 8.0).abs() < 1e-9 * r.cpu_busy_core_s);
}

#[test]
fn comparison_reports_simulated_ratios() {
    let w = workload(small_shape());
    let p = DeviceProfile::builtin("a18-pro").unwrap();
    let c = compare_policies(&w, &p, 256).unwrap();
    assert!(c.simulated && c.ours.simulated);
    assert!(c.speedup_vs_naive_npu.is_finite() && c.speedup_vs_naive_npu > 0.0);
    assert!((c.speedup_vs_cpu - c.cpu_only.prefill_s / c.ours.prefill_s).abs() < 1e-12);
    assert!(c.cpu_busy_ratio_vs_cpu > 1.0, "ours keeps most work off the CPU");
    // A CPU-only profile cannot run the NPU policies.
    let host = DeviceProfile::builtin("host-cpu").unwrap();
    assert!(compare_policies(&w, &host, 256).is_err());
}
