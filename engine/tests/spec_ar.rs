//! Speculative AR decoding: lossless under every schedule (greedy output token-identical to the
//! target alone on the embedded tiny-ar / tiny-draft pair; sampled output distributed as the
//! target's, tested on a 4-token vocabulary), K/V reuse across chat turns, cancellation and
//! the errors a mismatched pair gets.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::{Backend, ForwardStats};
use unmask_engine::decode::ar::generate_ar;
use unmask_engine::decode::spec_ar::{generate_speculative, SpecArCaches, SpecArSettings, SpecArStats, SpecSchedule};
use unmask_engine::decode::{discard_frames, CancelFlag, DecodeOutput, DecodeSettings, StepFrame, StopReason};
use unmask_engine::model::{load_transformer, ChatMessage, ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig};
use unmask_engine::run::ModelParts;
use unmask_engine::EngineError;

const SCHEDULES: [SpecSchedule; 3] = [SpecSchedule::Sync, SpecSchedule::Adaptive, SpecSchedule::Async];

fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(name)
}

fn load(name: &str) -> ModelParts {
    ModelParts::load(&model_dir(name)).expect("embedded model")
}

fn cpu(m: &ModelParts) -> CpuBackend {
    CpuBackend::new(m.transformer.clone())
}

fn chat_prompt(m: &ModelParts, text: &str) -> Vec<u32> {
    m.tokenizer.encode(&m.template.render(&[ChatMessage::user(text)], true)).unwrap()
}

fn greedy(gen_length: usize) -> DecodeSettings {
    DecodeSettings { gen_length, temperature: 0.0, ..Default::default() }
}

fn speculate(
    target: &mut dyn Backend,
    draft: &mut dyn Backend,
    prompt: &[u32],
    s: &DecodeSettings,
    spec: &SpecArSettings,
) -> (DecodeOutput, SpecArStats, Vec<StepFrame>) {
    let mut frames = Vec::new();
    let (out, stats) = generate_speculative(
        target,
        draft,
        prompt,
        s,
        spec,
        &CancelFlag::new(),
        &mut |f: &StepFrame| {
            frames.push(f.clone());
            ControlFlow::Continue(())
        },
        &mut SpecArCaches::default(),
    )
    .expect("speculative decoding");
    (out, stats, frames)
}

const PROMPTS: [&str; 6] = [
    "Reverse: river stone cloud",
    "What is 417+285?",
    "Continue: It was a bright cold day in April, and the",
    "Sort: pear apple fig",
    "a=3 b=7 c=1. What is b?",
    "Tell me about the sea.",
];

#[test]
fn greedy_output_is_the_targets_under_every_schedule() {
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let (mut target, mut draft) = (cpu(&target_m), cpu(&draft_m));
    let mut total = SpecArStats::default();
    for text in PROMPTS {
        let p = chat_prompt(&target_m, text);
        let s = greedy(48);
        let reference = generate_ar(&mut target, &p, &s, &CancelFlag::new(), &mut discard_frames).unwrap();
        for schedule in SCHEDULES {
            for draft_len in [1, 3, 6] {
                let spec = SpecArSettings { schedule, draft_len, ..Default::default() };
                let (out, stats, frames) = speculate(&mut target, &mut draft, &p, &s, &spec);
                assert_eq!(out.tokens, reference.tokens, "{schedule} draft_len {draft_len} on {text:?}");
                assert_eq!(out.stop_reason, reference.stop_reason);
                assert_eq!(stats.verify_forwards, out.forwards);
                assert!(stats.accepted <= stats.offered && stats.offered <= stats.drafted);
                // Every committed token is in exactly one frame, in order.
                let streamed: Vec<u32> = frames.iter().flat_map(|f| f.changes.iter().map(|c| c.token)).collect();
                assert_eq!(streamed, out.tokens);
                // Each refusal marks the target's token that replaced the draft: the last change
                // of its round, never an accepted draft, never equal to what it replaced. Only
                // a stop inside the last round can drop its mark.
                let refused = frames.iter().flat_map(|f| &f.changes).filter(|c| c.rejected_draft.is_some()).count();
                assert!(refused <= stats.rejections && refused + 1 >= stats.rejections, "{refused} marks, {stats:?}");
                for f in &frames {
                    for (i, c) in f.changes.iter().enumerate() {
                        if c.rejected_draft.is_some() {
                            assert!(i + 1 == f.changes.len() && !c.speculative && c.rejected_draft != Some(c.token), "{f:?}");
                        }
                    }
                }
                total.offered += stats.offered;
                total.accepted += stats.accepted;
                total.rejections += stats.rejections;
            }
        }
    }
    // The pair disagrees sometimes and agrees often: both paths of the rule ran.
    assert!(total.rejections > 0 && total.accepted > 0, "{total:?}");
}

#[test]
fn the_async_verifier_is_exact_with_or_without_the_drafters_core() {
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let (mut target, mut draft) = (cpu(&target_m), cpu(&draft_m));
    for text in ["Reverse: lamp north Velvet", "What is 68+75?"] {
        let p = chat_prompt(&target_m, text);
        let s = greedy(32);
        let reference = generate_ar(&mut target, &p, &s, &CancelFlag::new(), &mut discard_frames).unwrap();
        for verifier_shares_cores in [true, false] {
            let spec = SpecArSettings { schedule: SpecSchedule::Async, verifier_shares_cores, ..Default::default() };
            let (out, stats, _) = speculate(&mut target, &mut draft, &p, &s, &spec);
            assert_eq!(out.tokens, reference.tokens, "verifier_shares_cores {verifier_shares_cores} on {text:?}");
            assert_eq!(stats.verify_forwards, out.forwards);
        }
    }
}

#[test]
fn a_draft_identical_to_the_target_is_always_accepted() {
    let m = load("tiny-ar");
    let (mut target, mut draft) = (cpu(&m), cpu(&m));
    let p = chat_prompt(&m, "Repeat: one two three four");
    let s = greedy(40);
    for schedule in [SpecSchedule::Sync, SpecSchedule::Async] {
        let spec = SpecArSettings { schedule, draft_len: 4, history_control: false, time_control: false, ..Default::default() };
        let (out, stats, frames) = speculate(&mut target, &mut draft, &p, &s, &spec);
        assert_eq!(stats.rejections, 0, "{schedule}: {stats:?}");
        assert!(frames.iter().flat_map(|f| &f.changes).all(|c| c.rejected_draft.is_none()));
        assert_eq!(stats.accepted, stats.offered);
        if schedule == SpecSchedule::Sync && out.tokens.len() > 10 {
            // 4 drafts + a bonus token per verification.
            assert!(out.tokens_per_forward > 3.0, "{}", out.tokens_per_forward);
        }
    }
}

#[test]
fn chat_turns_reuse_both_caches_and_stay_exact() {
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let (mut target, mut draft) = (cpu(&target_m), cpu(&draft_m));
    let mut caches = SpecArCaches::default();
    let s = greedy(24);
    let spec = SpecArSettings { schedule: SpecSchedule::Async, ..Default::default() };
    let mut history = vec![ChatMessage::user("What is 12+7?")];
    for turn in 0..3 {
        let p = target_m.tokenizer.encode(&target_m.template.render(&history, true)).unwrap();
        let reference = generate_ar(&mut target, &p, &s, &CancelFlag::new(), &mut discard_frames).unwrap();
        let (out, _) =
            generate_speculative(&mut target, &mut draft, &p, &s, &spec, &CancelFlag::new(), &mut discard_frames, &mut caches)
                .unwrap();
        assert_eq!(out.tokens, reference.tokens, "turn {turn}");
        let stop = [target_m.transformer.config.eos_token_id, target_m.transformer.config.eot_token_id];
        let answer: Vec<u32> = out.tokens.iter().copied().take_while(|t| !stop.contains(&Some(*t))).collect();
        history.push(ChatMessage::assistant(target_m.tokenizer.decode(&answer, true)));
        history.push(ChatMessage::user(["And 30+4?", "Reverse: a b c"][turn % 2]));
    }
}

#[test]
fn cancellation_and_a_caller_stop_end_every_schedule() {
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let (mut target, mut draft) = (cpu(&target_m), cpu(&draft_m));
    let p = chat_prompt(&target_m, "Continue: the old man and the");
    let s = DecodeSettings { eos_token_id: Some(4095), eot_token_id: Some(4095), ..greedy(64) };
    for schedule in SCHEDULES {
        let spec = SpecArSettings { schedule, ..Default::default() };
        let cancel = CancelFlag::new();
        cancel.cancel();
        let r = generate_speculative(&mut target, &mut draft, &p, &s, &spec, &cancel, &mut discard_frames, &mut SpecArCaches::default());
        assert!(matches!(r, Err(EngineError::Cancelled)), "{schedule}: {r:?}");
        let mut seen = 0;
        let (out, _) = generate_speculative(
            &mut target,
            &mut draft,
            &p,
            &s,
            &spec,
            &CancelFlag::new(),
            &mut |_: &StepFrame| {
                seen += 1;
                if seen == 2 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
            &mut SpecArCaches::default(),
        )
        .unwrap();
        assert_eq!(out.stop_reason, StopReason::CallerStopped, "{schedule}");
        assert!(out.tokens.len() < 64);
    }
}

#[test]
fn a_mismatched_pair_is_refused_with_a_reason() {
    let target_m = load("tiny-ar");
    let mut target = cpu(&target_m);
    let p = chat_prompt(&target_m, "hi");
    let (llada, _) = load_transformer(&model_dir("tiny-llada")).unwrap();
    let mut diffusion = CpuBackend::new(Arc::new(llada));
    let r = generate_speculative(
        &mut target,
        &mut diffusion,
        &p,
        &greedy(8),
        &SpecArSettings::default(),
        &CancelFlag::new(),
        &mut discard_frames,
        &mut SpecArCaches::default(),
    );
    let msg = r.expect_err("refused").to_string();
    assert!(msg.contains("autoregressive"), "{msg}");

    let mut other_vocab = Bigram::new(4, 1.0, 0);
    let r = generate_speculative(
        &mut target,
        &mut other_vocab,
        &p,
        &greedy(8),
        &SpecArSettings::default(),
        &CancelFlag::new(),
        &mut discard_frames,
        &mut SpecArCaches::default(),
    );
    let msg = r.expect_err("refused").to_string();
    assert!(msg.contains("vocabulary"), "{msg}");

    let bad = SpecArSettings { draft_len: 0, ..Default::default() };
    let mut draft = cpu(&load("tiny-draft"));
    let r = generate_speculative(&mut target, &mut draft, &p, &greedy(8), &bad, &CancelFlag::new(), &mut discard_frames, &mut SpecArCaches::default());
    assert!(r.expect_err("refused").to_string().contains("draft_len"));
}

/// A causal "model" over a tiny vocabulary whose next-token logits depend only on the previous
/// token (a bigram table), so exact sequence probabilities are known.
struct Bigram {
    cfg: ModelConfig,
    table: Vec<Vec<f32>>,
}

impl Bigram {
    fn new(vocab: usize, sharpness: f32, salt: u32) -> Self {
        let (t, _) = load_transformer(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llama")).unwrap();
        let mut cfg = t.config.clone();
        cfg.vocab = vocab;
        cfg.eos_token_id = None;
        cfg.eot_token_id = None;
        cfg.pad_token_id = None;
        let table = (0..vocab)
            .map(|a| {
                (0..vocab)
                    .map(|b| {
                        let h = (a as u32 * 7 + b as u32 * 13 + salt * 5) % 11;
                        sharpness * h as f32 / 10.0
                    })
                    .collect()
            })
            .collect();
        Bigram { cfg, table }
    }
    fn probs(&self, prev: usize) -> Vec<f64> {
        let row = &self.table[prev];
        let m = row.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f64> = row.iter().map(|&l| ((l - m) as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }
}

impl Backend for Bigram {
    fn name(&self) -> String {
        "bigram".into()
    }
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(&self.cfg, capacity)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> unmask_engine::Result<(ForwardOutput, ForwardStats)> {
        if let (KvMode::ReadWrite, Some(c)) = (req.kv, cache) {
            c.mark_valid(req.positions.iter().copied());
        }
        let v = self.cfg.vocab;
        let mut logits = Vec::with_capacity(req.logits_rows.len() * v);
        for &r in req.logits_rows {
            logits.extend_from_slice(&self.table[req.tokens[r] as usize]);
        }
        let out = ForwardOutput { rows: req.logits_rows.to_vec(), logits, vocab: v, context_len: req.tokens.len(), flops: 0.0, moe: None };
        Ok((out, ForwardStats { tokens: req.tokens.len(), ..Default::default() }))
    }
}

/// Sampled speculative decoding draws 3-token continuations with exactly the target's
/// probabilities (chi-square over all 64 sequences), for a draft that disagrees with it.
#[test]
fn sampled_output_follows_the_target_distribution() {
    let v = 4;
    let target_probe = Bigram::new(v, 2.0, 0);
    let exact: HashMap<Vec<u32>, f64> = (0..v * v * v)
        .map(|i| {
            let seq = vec![(i / 16) as u32, ((i / 4) % 4) as u32, (i % 4) as u32];
            let mut p = 1.0;
            let mut prev = 0usize;
            for &t in &seq {
                p *= target_probe.probs(prev)[t as usize];
                prev = t as usize;
            }
            (seq, p)
        })
        .collect();
    for (schedule, n) in [(SpecSchedule::Sync, 12_000), (SpecSchedule::Adaptive, 12_000), (SpecSchedule::Async, 4_000)] {
        let mut target = Bigram::new(v, 2.0, 0);
        let mut draft = Bigram::new(v, 3.0, 1);
        let spec = SpecArSettings { schedule, draft_len: 2, ..Default::default() };
        let mut counts: HashMap<Vec<u32>, usize> = HashMap::new();
        let mut stats_total = SpecArStats::default();
        for seed in 0..n {
            let s = DecodeSettings { gen_length: 3, temperature: 1.0, seed, ..Default::default() };
            let (out, stats) = generate_speculative(
                &mut target,
                &mut draft,
                &[0],
                &s,
                &spec,
                &CancelFlag::new(),
                &mut discard_frames,
                &mut SpecArCaches::default(),
            )
            .unwrap();
            *counts.entry(out.tokens).or_default() += 1;
            stats_total.accepted += stats.accepted;
            stats_total.rejections += stats.rejections;
        }
        let chi2: f64 = exact
            .iter()
            .map(|(seq, p)| {
                let e = p * n as f64;
                let o = *counts.get(seq).unwrap_or(&0) as f64;
                (o - e).powi(2) / e
            })
            .sum();
        // 63 degrees of freedom: P(chi2 > 103.4) = 0.001.
        assert!(chi2 < 103.4, "{schedule}: chi2 {chi2:.1}");
        assert!(stats_total.accepted > 0 && stats_total.rejections > 0, "{schedule}: {stats_total:?}");
    }
}

/// The target on the virtual NPU (verifications charged simulated time), the draft on the CPU:
/// same tokens as plain AR on the virtual NPU, and the simulated time covers only the target.
#[test]
fn a_virtual_npu_target_stays_exact_and_is_charged_simulated_time() {
    use unmask_engine::backend::vnpu::profile::DeviceProfile;
    use unmask_engine::backend::vnpu::{VirtualNpu, VnpuConfig};
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let npu = || VirtualNpu::new(target_m.transformer.clone(), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let mut draft = cpu(&draft_m);
    let p = chat_prompt(&target_m, "What is 417+285?");
    let s = greedy(32);
    let mut plain = npu();
    let reference = generate_ar(&mut plain, &p, &s, &CancelFlag::new(), &mut discard_frames).unwrap();
    for schedule in SCHEDULES {
        let mut target = npu();
        let spec = SpecArSettings { schedule, ..Default::default() };
        let (out, stats, _) = speculate(&mut target, &mut draft, &p, &s, &spec);
        assert_eq!(out.tokens, reference.tokens, "{schedule}");
        assert!(out.simulated_s.is_some_and(|t| t > 0.0), "{schedule}");
        assert_eq!(stats.verify_forwards, out.forwards);
    }
}

/// Two asynchronous runs at once (two chat requests on a server) both finish: each run's
/// drafter and verifier loops block inside thread pools of their own, never in pools another
/// run is holding.
#[test]
fn concurrent_asynchronous_runs_both_finish() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for salt in 0..2u32 {
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            let mut target = Bigram::new(4, 2.0, 0);
            let mut draft = Bigram::new(4, 3.0, 1 + salt);
            let spec = SpecArSettings { schedule: SpecSchedule::Async, draft_len: 2, ..Default::default() };
            for seed in 0..200 {
                let s = DecodeSettings { gen_length: 6, temperature: 1.0, seed, ..Default::default() };
                let r = generate_speculative(&mut target, &mut draft, &[0], &s, &spec, &CancelFlag::new(), &mut discard_frames, &mut SpecArCaches::default());
                if let Err(e) = r {
                    let _ = done_tx.send(Err(e.to_string()));
                    return;
                }
            }
            let _ = done_tx.send(Ok(()));
        });
    }
    for _ in 0..2 {
        match done_rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(r) => r.expect("asynchronous run"),
            Err(_) => panic!("two concurrent asynchronous runs did not finish within 120 s (deadlock)"),
        }
    }
}

/// The measured trace the profiler draws: one Drafter span per draft, one Verifier span per
/// verification, a queue sample per verification, a verdict per judged draft; in turn on one
/// thread for `sync`/`adaptive`.
#[test]
fn the_trace_has_a_span_per_draft_and_per_verification() {
    use unmask_engine::decode::spec_ar::trace::SpecTask;
    let (target_m, draft_m) = (load("tiny-ar"), load("tiny-draft"));
    let (mut target, mut draft) = (cpu(&target_m), cpu(&draft_m));
    let p = chat_prompt(&target_m, "Reverse: river stone cloud");
    for schedule in SCHEDULES {
        let spec = SpecArSettings { schedule, draft_len: 3, ..Default::default() };
        let (out, stats, _) = speculate(&mut target, &mut draft, &p, &greedy(32), &spec);
        let t = &stats.trace;
        let count = |task| t.spans.iter().filter(|s| s.task == task).count();
        assert_eq!(count(SpecTask::Draft), stats.drafted, "{schedule}");
        assert_eq!(count(SpecTask::Verify), stats.verify_forwards, "{schedule}");
        assert_eq!(t.queue_depth.len(), stats.verify_forwards, "{schedule}");
        let judged: usize = t.spans.iter().map(|s| s.offered).sum();
        let accepted: usize = t.spans.iter().map(|s| s.accepted).sum();
        assert_eq!((judged, accepted), (stats.offered, stats.accepted), "{schedule}");
        // Per judged draft: every accepted one, and the first refused one of each verification
        // that refused one; entropies are those the draft model reported (finite, >= 0).
        let refused = t.verdicts.iter().filter(|v| !v.1).count();
        assert_eq!((t.verdicts.len() - refused, refused), (stats.accepted, stats.rejections), "{schedule}");
        assert!(t.verdicts.iter().all(|v| v.0.is_finite() && v.0 >= 0.0), "{schedule}");
        assert!(t.spans.windows(2).all(|w| w[0].start_s <= w[1].start_s), "{schedule}: time order");
        let end = t.spans.iter().map(|s| s.start_s + s.dur_s).fold(0.0, f64::max);
        assert!(end <= out.wall_s + 1e-3, "{schedule}: spans end by the run's end ({end} > {})", out.wall_s);
        if schedule != SpecSchedule::Async {
            // One thread: a span starts after the previous one ended.
            assert!(t.spans.windows(2).all(|w| w[1].start_s + 1e-9 >= w[0].start_s + w[0].dur_s), "{schedule}: overlap");
        }
    }
}
