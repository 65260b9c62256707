//! The MoE runtime on the embedded MoE model: calibration counts, every policy against exact
//! routing, capacity dropping, and the checks on plans.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use unmask_engine::model::{load_model, ForwardRequest, KvMode, Transformer};
use unmask_engine::moe::ffn::{MoeExecution, StaticPlan};
use unmask_engine::moe::MoePolicy;
use unmask_engine::run::{calibrate_moe, static_plan, CalibrationShape};

fn model(name: &str) -> Transformer {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(name);
    load_model(&dir).unwrap().transformer
}

/// Deterministic prompt-like ids (no special tokens).
fn prompts(t: &Transformer, n: usize, len: usize) -> Vec<Vec<u32>> {
    (0..n).map(|i| (0..len).map(|j| (10 + (i * 31 + j * 7) % (t.config.vocab - 20)) as u32).collect()).collect()
}

fn logits(t: &Transformer, tokens: &[u32]) -> Vec<f32> {
    let pos: Vec<usize> = (0..tokens.len()).collect();
    t.forward(&ForwardRequest { tokens, positions: &pos, logits_rows: &pos, kv: KvMode::Ignore }, None).unwrap().logits
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn calibration_counts_every_routed_token() {
    let t = model("tiny-llada-moe");
    let (layers, experts) = t.moe_shape().unwrap();
    let top_k = t.config.moe.as_ref().unwrap().top_k;
    let ps = prompts(&t, 6, 20);
    let shape = CalibrationShape::for_model(&t, 16);
    assert_eq!(shape.canvas_rows, 16, "a dLLM is calibrated with its answer canvas");
    let mut seen = 0;
    let cal = calibrate_moe(&t, &ps, &shape, &mut |done, total| {
        assert!(done <= total);
        seen = done;
    })
    .unwrap();
    assert_eq!(seen, 6);
    assert_eq!(cal.total_prompts(), 6);
    let b = cal.bucket_of(36);
    assert_eq!(cal.prompts[b], 6);
    for li in 0..layers {
        let routed: u64 = cal.counts[b][li].iter().sum();
        assert_eq!(routed, 6 * 36 * top_k as u64, "layer {li}");
        assert_eq!(cal.counts[b][li].len(), experts);
    }
    // Calibration leaves the model's execution as it was.
    assert_eq!(t.moe_execution().policy, MoePolicy::Cpu);
}

#[test]
fn policies_match_exact_routing_when_nothing_is_dropped() {
    let t = model("tiny-llada-moe");
    let tokens = &prompts(&t, 1, 40)[0];
    let exact = logits(&t, tokens);
    let (layers, experts) = t.moe_shape().unwrap();
    let top_k = t.config.moe.as_ref().unwrap().top_k;
    let mut roomy = StaticPlan::uniform(layers, experts, top_k, &[64], 4);
    for l in &mut roomy.capacities.buckets[0].per_layer {
        l.iter_mut().for_each(|c| *c = 64);
    }
    for (policy, plan) in [(MoePolicy::Naive, None), (MoePolicy::StaticTiers, Some(Arc::new(roomy)))] {
        t.set_moe_execution(MoeExecution { policy, plan, renormalise_dropped: true, residency: None }).unwrap();
        t.take_moe_stats();
        let got = logits(&t, tokens);
        let stats = t.take_moe_stats();
        assert!(max_rel(&exact, &got) < 1e-5, "{policy}: {}", max_rel(&exact, &got));
        assert_eq!(stats.dropped, 0);
        assert_eq!(stats.routed, (40 * top_k * layers) as u64);
        let per_layer = stats.launches as f64 / layers as f64;
        match policy {
            MoePolicy::Naive => assert!(per_layer > 2.0 && per_layer <= experts as f64, "{per_layer}"),
            _ => assert!(per_layer <= 2.0, "two groups of four: {per_layer}"),
        }
    }
}

#[test]
fn calibrated_tiers_drop_few_tokens_and_keep_the_answer_close() {
    let t = model("tiny-llada-moe");
    let shape = CalibrationShape::for_model(&t, 16);
    let cal = calibrate_moe(&t, &prompts(&t, 40, 30), &shape, &mut |_, _| {}).unwrap();
    let plan = static_plan(&t, Some(&cal)).unwrap();
    let tokens = &prompts(&t, 45, 46)[44]; // not a calibration prompt
    let exact = logits(&t, tokens);
    t.set_moe_execution(MoeExecution {
        policy: MoePolicy::StaticTiers,
        plan: Some(plan),
        renormalise_dropped: true,
        residency: None,
    })
    .unwrap();
    t.take_moe_stats();
    let got = logits(&t, tokens);
    let stats = t.take_moe_stats();
    assert!(stats.drop_rate() < 0.25, "drop rate {}", stats.drop_rate());
    assert!(got.iter().all(|v| v.is_finite()));
    // Dropping changes some outputs but the argmax mostly agrees.
    let v = t.config.vocab;
    let argmax = |l: &[f32]| {
        l.chunks_exact(v)
            .map(|r| r.iter().enumerate().fold(0, |b, (i, x)| if *x > r[b] { i } else { b }))
            .collect::<Vec<_>>()
    };
    let (a, b) = (argmax(&exact), argmax(&got));
    let agree = a.iter().zip(&b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64;
    assert!(agree > 0.8, "argmax agreement {agree}");
}

#[test]
fn plans_are_checked_against_the_model() {
    let t = model("tiny-llada-moe");
    let (layers, experts) = t.moe_shape().unwrap();
    let wrong = StaticPlan::uniform(layers + 1, experts, 2, &[64], 4);
    let err = t
        .set_moe_execution(MoeExecution {
            policy: MoePolicy::StaticTiers,
            plan: Some(Arc::new(wrong)),
            renormalise_dropped: true,
            residency: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    let err = t
        .set_moe_execution(MoeExecution {
            policy: MoePolicy::StaticTiers,
            plan: None,
            renormalise_dropped: true,
            residency: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("needs a plan"), "{err}");
    let dense = model("tiny-llada");
    assert!(dense.moe_shape().is_none());
    let plan = StaticPlan::uniform(1, 2, 1, &[8], 1);
    assert!(dense
        .set_moe_execution(MoeExecution {
            policy: MoePolicy::StaticTiers,
            plan: Some(Arc::new(plan)),
            renormalise_dropped: true,
            residency: None
        })
        .is_err());
    assert!(calibrate_moe(&dense, &[vec![1, 2, 3]], &CalibrationShape::for_model(&dense, 4), &mut |_, _| {}).is_err());
}

#[test]
fn the_virtual_npu_charges_and_shows_expert_launches() {
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    use unmask_engine::backend::Backend;
    let t = Arc::new(model("tiny-llada-moe"));
    let (layers, experts) = t.moe_shape().unwrap();
    let top_k = t.config.moe.as_ref().unwrap().top_k;
    let mut roomy = StaticPlan::uniform(layers, experts, top_k, &[64], 4);
    for l in &mut roomy.capacities.buckets[0].per_layer {
        l.iter_mut().for_each(|c| *c = 64);
    }
    let roomy = Arc::new(roomy);
    let tokens = prompts(&t, 1, 48).remove(0);
    let pos: Vec<usize> = (0..tokens.len()).collect();
    let req = ForwardRequest { tokens: &tokens, positions: &pos, logits_rows: &pos[..1], kv: KvMode::Ignore };
    let mut sim = Vec::new();
    for (policy, plan) in
        [(MoePolicy::Cpu, None), (MoePolicy::Naive, None), (MoePolicy::StaticTiers, Some(roomy.clone()))]
    {
        t.set_moe_execution(MoeExecution { policy, plan, renormalise_dropped: true, residency: None }).unwrap();
        let mut npu =
            VirtualNpu::new(t.clone(), DeviceProfile::builtin("m2-max").unwrap(), VnpuConfig::default()).unwrap();
        let (out, stats) = npu.forward(&req, None).unwrap();
        assert!(out.moe.is_some());
        let moe_events = npu.timeline().events.iter().filter(|e| e.name.contains("MoE:")).count();
        assert_eq!(moe_events, if policy == MoePolicy::Cpu { 0 } else { layers }, "{policy}");
        sim.push(stats.simulated_s.unwrap());
    }
    t.set_moe_execution(MoeExecution::default()).unwrap();
    // Per-expert launches cost more simulated time than two group launches per layer, and both
    // more than the ideal dynamic graph.
    assert!(sim[1] > sim[2] && sim[2] > sim[0], "{sim:?}");
}

#[test]
fn residency_on_the_virtual_npu_runs_cold_groups_on_the_cpu_lane_with_the_same_answer() {
    use std::ops::ControlFlow;
    use unmask_engine::decode::CancelFlag;
    use unmask_engine::moe::{CapacityTiers, MoeSettings};
    use unmask_engine::run::{BackendSpec, ModelParts, RunPrompt, Session, SettingsOverrides};

    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada-moe");
    let parts = Arc::new(ModelParts::load(&dir).unwrap());
    let t = &parts.transformer;
    let cal = calibrate_moe(t, &prompts(t, 8, 24), &CalibrationShape::for_model(t, 16), &mut |_, _| {}).unwrap();
    // Groups of two: on the M2 Max profile a cold pair costs one CPU core less than a launch.
    let plan = Arc::new(StaticPlan::from_calibration(&cal, &CapacityTiers::default(), 2));
    let mut runs = Vec::new();
    for cpu_lane in [false, true] {
        let mut s = Session::open(parts.clone(), &BackendSpec::Vnpu { device: "m2-max".into() }).unwrap();
        s.set_moe_plan(plan.clone()).unwrap();
        let mut settings = s.settings(&SettingsOverrides::default()).unwrap();
        settings.moe = Some(MoeSettings { policy: MoePolicy::StaticTiers, renormalise_dropped: true, cpu_lane });
        let ids = s.prompt_ids(RunPrompt::Raw("Sort: pear apple fig kiwi")).unwrap();
        let o = s.run(&ids, &settings, &CancelFlag::new(), &mut |_| ControlFlow::Continue(())).unwrap();
        runs.push((o.output.tokens.clone(), o.moe.unwrap()));
    }
    let (off, on) = (&runs[0], &runs[1]);
    assert_eq!(off.0, on.0, "the CPU lane computes the same kept rows");
    assert_eq!(off.1.cpu_lane_groups, 0);
    assert!(on.1.cpu_lane_groups > 0, "{:?}", on.1);
    assert_eq!(on.1.launches + on.1.cpu_lane_groups, off.1.launches);
    assert_eq!(on.1.dropped, off.1.dropped);
}
