//! Multi-block speculative decoding on the tiny golden LLaDA (random weights, deterministic)
//! behind a fake static-shape backend: block discipline, the exact no-acceptance invariant,
//! bucket padding from the cost profile, acceptance accounting, settings compatibility.

#[path = "common/npu.rs"]
mod common;

use std::ops::ControlFlow;
use std::sync::Arc;

use common::{model, prompt, run_npu, FakeNpu};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::Backend;
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{generate, CacheMode, CancelFlag, DecodeSettings, StepFrame, TokenState};
use unmask_engine::EngineError;

fn base() -> DecodeSettings {
    DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() }
}

fn spec(trigger: usize, lookahead: usize, accept: bool) -> Option<SpeculativeSettings> {
    Some(SpeculativeSettings { trigger, max_lookahead: lookahead, accept_drafts: accept, ..Default::default() })
}

/// Commits (non-speculative changes) are always inside the frame's current block; drafts are
/// always outside it, after it, and stay `Masked`.
#[test]
fn never_commits_outside_the_current_block() {
    for (name, cache) in [
        ("llada", CacheMode::None),
        ("llada", CacheMode::Prefix),
        ("llada", CacheMode::Dual),
        ("dream", CacheMode::Prefix),
        ("dream", CacheMode::Dual),
    ] {
        for accept in [false, true] {
            let mut be = FakeNpu::new(model(name), Some(vec![8, 16, 32, 64]));
            let p = prompt(name, 0);
            let s = DecodeSettings { cache, speculative: spec(8, 16, accept), threshold: Some(0.5), ..base() };
            let (out, stats, frames) = run_npu(&mut be, &p, &s);
            assert!(stats.drafts > 0, "{name} {cache:?}: lookahead never drafted");
            for f in &frames {
                for c in &f.changes {
                    if c.speculative {
                        assert!(c.pos >= f.block.1 && c.state == TokenState::Masked, "draft {c:?} in step {}", f.step);
                    } else {
                        assert!((f.block.0..f.block.1).contains(&c.pos), "commit {c:?} outside block {:?}", f.block);
                    }
                }
            }
            let mask = be.config().mask_token_id.unwrap();
            assert!(out.canvas.generated().iter().all(|&t| t != mask), "{name} {cache:?}: masks left");
        }
    }
}

/// Without a cache the window is the whole canvas, so speculation adds LM-head rows only and,
/// with acceptance off, the run is token-for-token (and commit-for-commit) the reference loop.
#[test]
fn without_acceptance_and_cache_equals_the_reference_loop() {
    for threshold in [None, Some(0.3)] {
        assert_speculation_off_path_equals_reference("llada", &DecodeSettings { threshold, ..base() });
    }
}

/// Runs prompts 0 and 1 of `name` through the reference decoder and through the NPU-aware loop
/// (speculation on, acceptance off, no cache): same tokens, same commits at every step.
fn assert_speculation_off_path_equals_reference(name: &str, s: &DecodeSettings) {
    let m = model(name);
    for i in 0..2 {
        let p = prompt(name, i);
        let mut cpu: Box<dyn Backend> = Box::new(CpuBackend::new(Arc::clone(&m)));
        let mut ref_frames: Vec<StepFrame> = Vec::new();
        let reference = generate(cpu.as_mut(), &p, s, &CancelFlag::new(), |f| {
            ref_frames.push(f.clone());
            ControlFlow::Continue(())
        })
        .unwrap();
        let mut be = FakeNpu::new(Arc::clone(&m), Some(vec![16, 64]));
        let (out, stats, frames) =
            run_npu(&mut be, &p, &DecodeSettings { speculative: spec(8, 32, false), ..s.clone() });
        assert!(stats.drafts > 0);
        assert_eq!(out.tokens, reference.tokens, "{name} {s:?} prompt {i}");
        let commits = |fs: &[StepFrame]| -> Vec<Vec<(usize, u32)>> {
            fs.iter().map(|f| f.changes.iter().filter(|c| !c.speculative).map(|c| (c.pos, c.token)).collect()).collect()
        };
        assert_eq!(commits(&frames), commits(&ref_frames));
    }
}

/// With the prefix cache and a bucket-padded window, lookahead confined to the padding (no
/// trigger extension) only adds rows: speculation on (acceptance off) equals speculation off.
#[test]
fn drafts_in_bucket_padding_do_not_change_the_run() {
    let m = model("llada");
    let p = prompt("llada", 0);
    let s = DecodeSettings { cache: CacheMode::Prefix, ..base() };
    let mut off = FakeNpu::new(Arc::clone(&m), Some(vec![16, 32, 64]));
    let (a, _, _) = run_npu(&mut off, &p, &s);
    let mut on = FakeNpu::new(Arc::clone(&m), Some(vec![16, 32, 64]));
    let (b, stats, _) = run_npu(&mut on, &p, &DecodeSettings { speculative: spec(0, 0, false), ..s.clone() });
    assert!(stats.drafts > 0, "the padding held no future masks");
    assert_eq!(a.tokens, b.tokens);
    // The forwards were the same shapes; only the row requests grew.
    let shapes = |be: &FakeNpu| be.forwards().iter().map(|f| (f.start, f.len)).collect::<Vec<_>>();
    assert_eq!(shapes(&off), shapes(&on));
}

/// Every windowed (non-refresh) dense forward has a bucket's token count unless clipped at the
/// canvas end, the window slides with the first uncached position, and the trigger makes
/// windows reach past the block.
#[test]
fn windows_are_padded_to_the_cost_profile_buckets() {
    let buckets = vec![8, 16, 24, 32];
    let mut be = FakeNpu::new(model("llada"), Some(buckets.clone()));
    let p = prompt("llada", 0);
    let s = DecodeSettings { cache: CacheMode::Prefix, speculative: spec(3, 8, true), ..base() };
    let (out, stats, frames) = run_npu(&mut be, &p, &s);
    let len = p.len() + s.gen_length;
    assert_eq!(stats.buckets, buckets);
    let fwds = be.forwards();
    assert_eq!(fwds.len(), out.forwards);
    let mut starts = Vec::new();
    for (f, w) in fwds.iter().zip(&stats.windows) {
        assert_eq!((f.start, f.start + f.len), (w.start, w.end));
        if f.len == len {
            continue; // block-start refresh
        }
        assert!(buckets.contains(&f.len) || f.start + f.len == len, "window {f:?} not a bucket");
        starts.push(f.start);
    }
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "window start moved left: {starts:?}");
    assert!(starts.windows(2).any(|w| w[0] < w[1]), "window never slid");
    assert!(stats.windows.iter().zip(&frames).any(|(w, f)| w.lookahead && w.end > f.block.1));
}

/// The CPU backend has no profile: the settings' buckets apply, or exact windows without them.
#[test]
fn cpu_without_profile_uses_settings_buckets() {
    let p = prompt("llada", 0);
    let mut cpu = CpuBackend::new(model("llada"));
    let s = DecodeSettings { cache: CacheMode::Prefix, speculative: spec(4, 8, true), ..base() };
    let (_, stats, _) = run_npu(&mut cpu, &p, &s);
    assert!(stats.buckets.is_empty());
    assert!(stats.windows.iter().all(|w| w.padded == w.end - w.start));
    let bucketed = DecodeSettings {
        speculative: Some(SpeculativeSettings { token_buckets: vec![16], ..SpeculativeSettings::default() }),
        ..s.clone()
    };
    let (_, stats, _) = run_npu(&mut cpu, &p, &bucketed);
    assert_eq!(stats.buckets, vec![16]);
}

/// With the one-token-per-step schedule every accepted draft saves exactly one step, and the
/// final canvas is fully decoded.
#[test]
fn accepted_drafts_save_steps() {
    let mut total_accepted = 0;
    for i in 0..2 {
        let p = prompt("llada", i);
        for cache in [CacheMode::None, CacheMode::Prefix] {
            let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
            let s = DecodeSettings {
                cache,
                speculative: Some(SpeculativeSettings {
                    trigger: 8,
                    max_lookahead: 8,
                    accept_top_k: 8,
                    ..Default::default()
                }),
                ..base()
            };
            let (out, stats, _) = run_npu(&mut be, &p, &s);
            assert_eq!(out.steps + stats.accepted, 32, "{cache:?}");
            assert_eq!(out.canvas.committed_total(), 32);
            total_accepted += stats.accepted;
            println!("prompt {i} {cache:?}: drafts {} accepted {} steps {}", stats.drafts, stats.accepted, out.steps);
        }
    }
    assert!(total_accepted > 0, "no draft was ever accepted");
}

/// Aggressive acceptance commits drafts as drafted (their token and confidence), even where the
/// block's fresh forward disagrees; with a confidence floor of 0 every draft of a block is taken on
/// its first step.
#[test]
fn confident_drafts_are_committed_as_drafted() {
    let p = prompt("llada", 0);
    let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
    let s = DecodeSettings {
        speculative: Some(SpeculativeSettings {
            trigger: 8,
            max_lookahead: 8,
            accept_confidence: Some(0.0),
            ..Default::default()
        }),
        ..base()
    };
    let (out, stats, frames) = run_npu(&mut be, &p, &s);
    // More than the top-k rule (k = 2) could ever take in the three later blocks.
    assert!(stats.accepted > 6, "accepted {}", stats.accepted);
    assert_eq!(out.steps + stats.accepted, 32);
    assert_eq!(out.canvas.committed_total(), 32);
    // Each accepted position got the token of its latest draft.
    let mut drafted = std::collections::HashMap::new();
    let mut as_drafted = 0;
    for f in &frames {
        for c in &f.changes {
            if c.speculative {
                drafted.insert(c.pos, c.token);
            } else if drafted.get(&c.pos) == Some(&c.token) {
                as_drafted += 1;
            }
        }
    }
    assert!(as_drafted >= stats.accepted, "{as_drafted} commits equal their draft, {} accepted", stats.accepted);
    // Out-of-range floors are refused.
    let bad = DecodeSettings {
        speculative: Some(SpeculativeSettings { accept_confidence: Some(1.5), ..Default::default() }),
        ..base()
    };
    assert!(bad.validate().is_err());
}

/// `generate` dispatches on the settings; old settings JSON stays valid; unsupported
/// combinations are typed errors.
#[test]
fn settings_select_the_loop_and_stay_compatible() {
    let old: DecodeSettings = serde_json::from_str(r#"{"gen_length": 32, "block_length": 8, "steps": 32}"#).unwrap();
    assert!(old.speculative.is_none() && old.revision.is_none());
    let new: DecodeSettings = serde_json::from_str(r#"{"speculative": {"trigger": 2}, "revision": {}}"#).unwrap();
    assert_eq!(new.speculative.as_ref().map(|s| (s.trigger, s.max_lookahead)), Some((2, 32)));
    assert_eq!(new.revision.as_ref().map(|r| r.stable_threshold), Some(0.9));

    let p = prompt("llada", 0);
    let mut cpu: Box<dyn Backend> = Box::new(CpuBackend::new(model("llada")));
    let s = DecodeSettings { speculative: spec(4, 8, false), ..base() };
    let mut drafts = 0;
    generate(cpu.as_mut(), &p, &s, &CancelFlag::new(), |f| {
        drafts += f.changes.iter().filter(|c| c.speculative).count();
        ControlFlow::Continue(())
    })
    .unwrap();
    assert!(drafts > 0, "generate did not route to the speculative loop");

    let ar: Box<dyn Backend> = Box::new(CpuBackend::new(model("llama")));
    let mut ar = ar;
    let ap = prompt("llama", 0);
    assert!(
        matches!(
            unmask_engine::decode::dual_path::run(ar.as_mut(), &ap, &s, &CancelFlag::new(), &mut |_| {
                ControlFlow::Continue(())
            }),
            Err(EngineError::InvalidRequest(_))
        ),
        "a causal model has no canvas to speculate on"
    );
}

/// Dream (shifted logits: row p − 1 predicts p) runs in the NPU-aware loop: without a cache and
/// with acceptance off it is commit-for-commit Dream's reference decoder.
#[test]
fn dream_without_acceptance_and_cache_equals_the_reference_loop() {
    assert_speculation_off_path_equals_reference(
        "dream",
        &DecodeSettings { alg: unmask_engine::decode::DreamAlg::Entropy, ..base() },
    );
}

/// A backend that records the attention context of every forward.
struct ContextLog {
    inner: CpuBackend,
    log: Vec<(usize, usize, usize)>,
}

impl Backend for ContextLog {
    fn name(&self) -> String {
        "context-log".into()
    }
    fn config(&self) -> &unmask_engine::model::ModelConfig {
        self.inner.config()
    }
    fn new_cache(&self, capacity: usize) -> unmask_engine::model::KvCache {
        self.inner.new_cache(capacity)
    }
    fn forward(
        &mut self,
        req: &unmask_engine::model::ForwardRequest,
        cache: Option<&mut unmask_engine::model::KvCache>,
    ) -> unmask_engine::Result<(unmask_engine::model::ForwardOutput, unmask_engine::backend::ForwardStats)> {
        let r = self.inner.forward(req, cache)?;
        self.log.push((req.positions.first().copied().unwrap_or(0), req.tokens.len(), r.0.context_len));
        Ok(r)
    }
    fn cost_profile(&self) -> Option<unmask_engine::backend::CostProfile> {
        Some(unmask_engine::backend::CostProfile { token_buckets: vec![8, 16, 32, 64], launch_overhead_s: 1e-3 })
    }
}

/// With the dual cache the window slides like the prefix cache's, but every forward also
/// attends to the cached K/V right of the window: the context is always the whole canvas,
/// whereas the prefix cache's windowed forwards see only the prefix and the window.
#[test]
fn dual_cache_windows_attend_to_the_cached_suffix() {
    let m = model("llada");
    let p = prompt("llada", 0);
    let len = p.len() + base().gen_length;
    let run = |cache| {
        let mut be = ContextLog { inner: CpuBackend::new(Arc::clone(&m)), log: Vec::new() };
        let s = DecodeSettings { cache, speculative: spec(4, 8, false), ..base() };
        let (out, _, _) = run_npu(&mut be, &p, &s);
        (out, be.log)
    };
    let (dual, dual_log) = run(CacheMode::Dual);
    let (_, prefix_log) = run(CacheMode::Prefix);
    let windowed = |log: &[(usize, usize, usize)]| log.iter().filter(|&&(start, n, _)| start > 0 || n < len).count();
    assert!(windowed(&dual_log) > 0, "dual cache never narrowed the window");
    assert!(dual_log.iter().all(|&(_, _, ctx)| ctx == len), "dual forwards see the whole canvas");
    assert!(prefix_log.iter().any(|&(start, n, ctx)| ctx < len && (start > 0 || n < len)), "prefix forwards see less");
    assert!(dual.canvas.generated().iter().all(|&t| t != 255));
}
