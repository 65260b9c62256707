//! Behaviour of the decoding API on the tiny golden models and on a scripted backend: caches,
//! streaming deltas, cancellation, validation, CFG, seeded randomness, early stop, logit
//! skipping, AR decoding and chat.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::{Backend, ForwardStats};
use unmask_engine::decode::cache::DecodeCache;
use unmask_engine::decode::{
    channel_sink, discard_frames, generate, CacheMode, CancelFlag, Canvas, ChatSession, DecodeOutput, DecodeSettings,
    DreamAlg, Remasking, StepFrame, StopReason, TokenState,
};
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::TensorSource;
use unmask_engine::model::{
    load_transformer, ChatTemplate, ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig, TextTokenizer,
};
use unmask_engine::EngineError;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name)
}

fn cpu(name: &str) -> Box<dyn Backend> {
    let (t, _) = load_transformer(&golden(name)).expect("load tiny model");
    Box::new(CpuBackend::new(Arc::new(t)))
}

fn prompt(name: &str, i: usize) -> Vec<u32> {
    let g = SafetensorsSource::open(&golden(name).join("golden.safetensors")).unwrap();
    let t = g.get("input_ids").unwrap();
    let seq = t.shape[1];
    t.to_i64_vec().unwrap()[i * seq..(i + 1) * seq].iter().map(|&x| x as u32).collect()
}

fn run(be: &mut dyn Backend, p: &[u32], s: &DecodeSettings) -> (DecodeOutput, Vec<StepFrame>) {
    let mut frames = Vec::new();
    let out = generate(be, p, s, &CancelFlag::new(), |f| {
        frames.push(f.clone());
        ControlFlow::Continue(())
    })
    .expect("decode");
    (out, frames)
}

fn agreement(a: &[u32], b: &[u32]) -> f64 {
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len().max(1) as f64
}

// ------------------------------------------------------------------------------------ caches

/// With one block covering the whole generated region, the prefix cache's first step (the
/// block-start full forward) is exactly the no-cache step; later steps reuse the prompt's K/V
/// computed against the all-mask canvas (stale in layers ≥ 1 of a bidirectional model), so only
/// agreement is reported.
#[test]
fn prefix_cache_single_block_first_step_is_exact() {
    for model in ["llada", "dream"] {
        let mut be = cpu(model);
        let p = prompt(model, 0);
        let base = DecodeSettings {
            gen_length: 16,
            block_length: 16,
            steps: 16,
            alg: DreamAlg::MaskgitPlus,
            ..Default::default()
        };
        let (ref_out, ref_frames) = run(be.as_mut(), &p, &base);
        let (out, frames) = run(be.as_mut(), &p, &DecodeSettings { cache: CacheMode::Prefix, ..base.clone() });
        assert_eq!(frames[0].changes, ref_frames[0].changes, "{model}: block-start step differs");
        assert_eq!(frames[0].forward_tokens, p.len() + 16);
        assert!(
            frames[1..].iter().all(|f| f.forward_tokens == 16 + usize::from(model == "dream")),
            "{model}: window size"
        );
        println!("{model} prefix cache, one block: token agreement {:.3}", agreement(&out.tokens, &ref_out.tokens));
    }
}

/// The cache window machinery is exact when the cache holds what a full forward would compute:
/// right after the block-start forward (before any commit), a windowed forward (prefix: Read over
/// block + suffix; dual: ReadWrite over the block) returns the same logits rows as the full one,
/// including Dream's shifted row for the block's first position.
#[test]
fn cache_windows_reproduce_full_forward_logits_on_unchanged_canvas() {
    for model in ["llada", "dream"] {
        for mode in [CacheMode::Prefix, CacheMode::Dual] {
            let mut be = cpu(model);
            let shift = be.config().shift_logits;
            let p = prompt(model, 1);
            let canvas = Canvas::new(&p, 16, 255);
            let len = canvas.len();
            let positions: Vec<usize> = (0..len).collect();
            let block = (p.len(), p.len() + 8);
            let masked = canvas.masked_in(block.0, block.1);
            let src: Vec<usize> = masked.iter().map(|&q| if shift { q - 1 } else { q }).collect();
            let mut cache = DecodeCache::new(be.as_ref(), mode, len);
            let plan0 = cache.plan(0, block, len);
            assert_eq!((plan0.start, plan0.end, plan0.kv), (0, len, KvMode::ReadWrite));
            let req =
                ForwardRequest { tokens: canvas.tokens(), positions: &positions, logits_rows: &src, kv: plan0.kv };
            let (full, _) = be.forward(&req, cache.kv_mut()).unwrap();
            cache.after_forward(&plan0, block);
            let plan1 = cache.plan(1, block, len);
            assert_eq!(plan1.start, block.0 - usize::from(shift));
            assert_eq!(plan1.end, if mode == CacheMode::Dual { block.1 } else { len });
            let rows: Vec<usize> = src.iter().map(|&r| r - plan1.start).collect();
            let req = ForwardRequest {
                tokens: &canvas.tokens()[plan1.start..plan1.end],
                positions: &positions[plan1.start..plan1.end],
                logits_rows: &rows,
                kv: plan1.kv,
            };
            let (win, _) = be.forward(&req, cache.kv_mut()).unwrap();
            let scale = full.logits.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = full.logits.iter().zip(&win.logits).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
            assert!(err < 1e-4, "{model} {mode:?}: windowed logits differ by {err}");
        }
    }
}

/// Prefix / dual cache drift against the no-cache trajectory (reported, sanity-checked only).
#[test]
fn cache_drift_is_measured() {
    let cases = [
        ("llada", DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() }),
        (
            "llada",
            DecodeSettings { gen_length: 32, block_length: 8, steps: 32, threshold: Some(0.1), ..Default::default() },
        ),
        (
            "dream",
            DecodeSettings {
                gen_length: 32,
                block_length: 8,
                steps: 32,
                alg: DreamAlg::MaskgitPlus,
                ..Default::default()
            },
        ),
        (
            "dream",
            DecodeSettings { gen_length: 32, block_length: 8, steps: 32, alg: DreamAlg::Entropy, ..Default::default() },
        ),
    ];
    for (model, base) in cases {
        let mut be = cpu(model);
        for pi in 0..3 {
            let p = prompt(model, pi);
            let (ref_out, _) = run(be.as_mut(), &p, &base);
            for mode in [CacheMode::Prefix, CacheMode::Dual] {
                let (out, frames) = run(be.as_mut(), &p, &DecodeSettings { cache: mode, ..base.clone() });
                assert_eq!(out.tokens.len(), ref_out.tokens.len());
                assert!(
                    out.canvas.masked_in(0, out.canvas.len()).is_empty(),
                    "{model} {mode:?}: canvas not fully decoded"
                );
                // Every block starts with one full forward; the other steps forward a window.
                let full = frames.iter().filter(|f| f.forward_tokens == out.canvas.len()).count();
                assert_eq!(full, base.num_blocks(), "{model} {mode:?}: block-start forwards");
                println!(
                    "drift {model} prompt {pi} {:?} threshold {:?} {mode:?}: agreement {:.3} ({} vs {} forwards)",
                    base.alg,
                    base.threshold,
                    agreement(&out.tokens, &ref_out.tokens),
                    out.forwards,
                    ref_out.forwards
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------ streaming

#[test]
fn frames_are_deltas_and_replay_to_the_final_canvas() {
    let mut be = cpu("llada");
    let p = prompt("llada", 2);
    for s in [
        DecodeSettings { gen_length: 24, block_length: 8, steps: 12, ..Default::default() },
        DecodeSettings {
            gen_length: 24,
            block_length: 8,
            steps: 12,
            threshold: Some(0.1),
            cache: CacheMode::Dual,
            ..Default::default()
        },
    ] {
        let (out, frames) = run(be.as_mut(), &p, &s);
        assert_eq!(out.frames, frames.len());
        let mut replay = Canvas::new(&p, s.gen_length, 255);
        let mut seen = std::collections::HashSet::new();
        let mut committed = 0;
        for f in &frames {
            for c in &f.changes {
                assert!(seen.insert(c.pos), "position {} changed twice (not a delta)", c.pos);
                assert!(c.pos >= f.block.0 && c.pos < f.block.1);
                assert!(!c.revised && !c.speculative);
                assert_eq!(c.state, TokenState::Stable);
                replay.apply(c, f.step);
            }
            committed += f.changes.len();
            assert_eq!(f.committed_total, committed);
        }
        assert_eq!(replay.tokens(), out.canvas.tokens());
        assert_eq!(committed, s.gen_length);
        assert!((out.tokens_per_forward - s.gen_length as f64 / out.forwards as f64).abs() < 1e-12);
    }
}

#[test]
fn channel_adapter_streams_frames_to_another_thread() {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let mut be = cpu("llada");
        let s = DecodeSettings { gen_length: 16, block_length: 8, steps: 8, ..Default::default() };
        generate(be.as_mut(), &prompt("llada", 0), &s, &CancelFlag::new(), channel_sink(tx)).unwrap()
    });
    let frames: Vec<StepFrame> = rx.iter().collect();
    let out = handle.join().unwrap();
    assert_eq!(frames.len(), out.frames);
    assert_eq!(frames.iter().map(|f| f.changes.len()).sum::<usize>(), 16);
}

#[test]
fn cancellation_returns_cancelled() {
    let mut be = cpu("llada");
    let p = prompt("llada", 0);
    let s = DecodeSettings { gen_length: 16, block_length: 8, steps: 16, ..Default::default() };
    let cancel = CancelFlag::new();
    let flag = cancel.clone();
    let mut seen = 0;
    let err = generate(be.as_mut(), &p, &s, &cancel, |_| {
        seen += 1;
        if seen == 3 {
            flag.cancel();
        }
        ControlFlow::Continue(())
    })
    .unwrap_err();
    assert!(matches!(err, EngineError::Cancelled), "{err}");
    assert_eq!(seen, 3);
    // A flag set before the call stops it before the first forward.
    let pre = CancelFlag::new();
    pre.cancel();
    assert!(matches!(generate(be.as_mut(), &p, &s, &pre, discard_frames), Err(EngineError::Cancelled)));
}

#[test]
fn callback_break_stops_early() {
    let mut be = cpu("llada");
    let s = DecodeSettings { gen_length: 16, block_length: 8, steps: 16, ..Default::default() };
    let out = generate(be.as_mut(), &prompt("llada", 0), &s, &CancelFlag::new(), |f| {
        if f.step == 1 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(out.stop_reason, StopReason::CallerStopped);
    assert_eq!(out.steps, 2);
}

// ------------------------------------------------------------------------------------ settings

#[test]
fn settings_validation_errors() {
    let mut be = cpu("llada");
    let p = prompt("llada", 0);
    let bad = |s: DecodeSettings, be: &mut Box<dyn Backend>, p: &[u32]| {
        generate(be.as_mut(), p, &s, &CancelFlag::new(), discard_frames).unwrap_err()
    };
    let d = DecodeSettings { gen_length: 16, block_length: 8, steps: 16, ..Default::default() };
    assert!(matches!(
        bad(DecodeSettings { block_length: 5, ..d.clone() }, &mut be, &p),
        EngineError::InvalidRequest(_)
    ));
    assert!(matches!(bad(DecodeSettings { steps: 7, ..d.clone() }, &mut be, &p), EngineError::InvalidRequest(_)));
    assert!(matches!(bad(DecodeSettings { gen_length: 0, ..d.clone() }, &mut be, &p), EngineError::InvalidRequest(_)));
    assert!(matches!(
        bad(DecodeSettings { threshold: Some(1.5), ..d.clone() }, &mut be, &p),
        EngineError::InvalidRequest(_)
    ));
    assert!(matches!(
        bad(DecodeSettings { cfg_scale: 1.0, cache: CacheMode::Prefix, ..d.clone() }, &mut be, &p),
        EngineError::InvalidRequest(_)
    ));
    assert!(matches!(bad(d.clone(), &mut be, &[1, 255, 3]), EngineError::InvalidRequest(_)));
    let e = bad(DecodeSettings { gen_length: 128, block_length: 32, steps: 128, ..d.clone() }, &mut be, &p);
    assert!(matches!(e, EngineError::ContextOverflow { len: 140, max: 128 }), "{e}");
    // Threshold decoding ignores `steps`.
    assert!(generate(
        be.as_mut(),
        &p,
        &DecodeSettings { steps: 7, threshold: Some(0.5), ..d },
        &CancelFlag::new(),
        discard_frames
    )
    .is_ok());
}

#[test]
fn settings_defaults_and_serde_roundtrip() {
    let d = DecodeSettings::default();
    assert_eq!((d.gen_length, d.block_length, d.steps, d.temperature), (128, 32, 128, 0.0));
    assert_eq!(
        (d.remasking, d.cache, d.threshold, d.alg, d.eps),
        (Remasking::LowConfidence, CacheMode::None, None, DreamAlg::Origin, 1e-3)
    );
    let s = DecodeSettings { threshold: Some(0.9), cache: CacheMode::Dual, alg: DreamAlg::TopkMargin, ..d };
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"dual\"") && json.contains("\"topk-margin\""), "{json}");
    assert_eq!(serde_json::from_str::<DecodeSettings>(&json).unwrap(), s);
    // Recordings written before the spellings were unified still read.
    let old = json.replace("topk-margin", "topk_margin").replace("low-confidence", "low_confidence");
    assert_eq!(serde_json::from_str::<DecodeSettings>(&old).unwrap(), s);
    let partial: DecodeSettings = serde_json::from_str(r#"{"gen_length": 64, "remasking": "random"}"#).unwrap();
    assert_eq!((partial.gen_length, partial.block_length, partial.remasking), (64, 32, Remasking::Random));
}

// ------------------------------------------------------------------------------------ variants

#[test]
fn cfg_runs_two_forwards_per_step() {
    let mut be = cpu("llada");
    let p = prompt("llada", 0);
    let s = DecodeSettings { gen_length: 16, block_length: 8, steps: 8, cfg_scale: 1.5, ..Default::default() };
    let (out, _) = run(be.as_mut(), &p, &s);
    assert_eq!(out.forwards, 2 * out.steps);
    let (plain, _) = run(be.as_mut(), &p, &DecodeSettings { cfg_scale: 0.0, ..s });
    println!("cfg 1.5 vs none: agreement {:.3}", agreement(&out.tokens, &plain.tokens));
    assert!(out.tokens.iter().all(|&t| t != 255));
}

#[test]
fn random_draws_are_reproducible_per_seed() {
    let p = prompt("llada", 1);
    let mut be = cpu("llada");
    let llada = [
        DecodeSettings {
            gen_length: 16,
            block_length: 8,
            steps: 16,
            remasking: Remasking::Random,
            ..Default::default()
        },
        DecodeSettings { gen_length: 16, block_length: 8, steps: 16, temperature: 1.0, ..Default::default() },
    ];
    for s in llada {
        let a = run(be.as_mut(), &p, &DecodeSettings { seed: 7, ..s.clone() });
        let b = run(be.as_mut(), &p, &DecodeSettings { seed: 7, ..s.clone() });
        assert_eq!(
            a.1.iter().map(|f| &f.changes).collect::<Vec<_>>(),
            b.1.iter().map(|f| &f.changes).collect::<Vec<_>>()
        );
        let seeds: Vec<Vec<StepFrame>> =
            (0..4).map(|seed| run(be.as_mut(), &p, &DecodeSettings { seed, ..s.clone() }).1).collect();
        assert!(seeds.windows(2).any(|w| w[0] != w[1]), "different seeds never changed the trajectory");
    }
    let mut dream = cpu("dream");
    let p = prompt("dream", 0);
    for alg in [DreamAlg::Origin, DreamAlg::Entropy] {
        let s = DecodeSettings {
            gen_length: 16,
            block_length: 16,
            steps: 8,
            temperature: 0.7,
            top_p: Some(0.9),
            top_k: Some(20),
            alg,
            alg_temp: Some(0.5),
            seed: 3,
            ..Default::default()
        };
        let a = run(dream.as_mut(), &p, &s);
        let b = run(dream.as_mut(), &p, &s);
        assert_eq!(a.0.tokens, b.0.tokens);
        assert!(a.0.tokens.iter().all(|&t| t != 255), "{alg:?}: masks left");
    }
}

// ------------------------------------------------------------------------ scripted backend

/// A backend whose logits are a fixed function of position: token `(p * 7) % 50` with a
/// confidence falling with p, or EOS from `eos_from` on. Records every request.
struct Scripted {
    cfg: ModelConfig,
    eos_from: usize,
    requests: Vec<(Vec<usize>, Vec<usize>, KvMode)>,
}

impl Scripted {
    fn new(eos_from: usize) -> Self {
        let (t, _) = load_transformer(&golden("llada")).unwrap();
        Scripted { cfg: t.config.clone(), eos_from, requests: Vec::new() }
    }
}

impl Backend for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(&self.cfg, capacity)
    }
    fn forward(
        &mut self,
        req: &ForwardRequest,
        cache: Option<&mut KvCache>,
    ) -> unmask_engine::Result<(ForwardOutput, ForwardStats)> {
        if req.kv == KvMode::ReadWrite {
            if let Some(c) = cache {
                c.mark_valid(req.positions.iter().copied());
            }
        }
        self.requests.push((req.positions.to_vec(), req.logits_rows.to_vec(), req.kv));
        let v = self.cfg.vocab;
        let mut logits = vec![0.0f32; req.logits_rows.len() * v];
        for (i, &r) in req.logits_rows.iter().enumerate() {
            let p = req.positions[r];
            let tok = if p >= self.eos_from { 254 } else { (p * 7) % 50 };
            logits[i * v + tok] = 20.0 - p as f32 * 0.1;
        }
        let out = ForwardOutput {
            rows: req.logits_rows.to_vec(),
            logits,
            vocab: v,
            context_len: req.tokens.len(),
            flops: 0.0,
            moe: None,
        };
        Ok((out, ForwardStats { simulated_s: Some(0.5), tokens: req.tokens.len(), ..Default::default() }))
    }
}

#[test]
fn logits_are_requested_only_for_masked_block_positions() {
    for mode in [CacheMode::None, CacheMode::Prefix, CacheMode::Dual] {
        let mut be = Scripted::new(usize::MAX);
        let p = vec![1u32, 2, 3, 4];
        let s = DecodeSettings { gen_length: 16, block_length: 4, steps: 8, cache: mode, ..Default::default() };
        let (out, frames) = run(&mut be, &p, &s);
        let mut canvas = Canvas::new(&p, 16, 255);
        for ((positions, rows, _), f) in be.requests.iter().zip(&frames) {
            let wanted: Vec<usize> = canvas.masked_in(f.block.0, f.block.1);
            let asked: Vec<usize> = rows.iter().map(|&r| positions[r]).collect();
            assert_eq!(asked, wanted, "{mode:?}: rows requested");
            assert_eq!(positions.len(), f.forward_tokens);
            for c in &f.changes {
                canvas.apply(c, f.step);
            }
        }
        assert_eq!(out.simulated_s, Some(0.5 * out.forwards as f64));
        assert_eq!(frames[0].simulated_s, Some(0.5));
        assert_eq!(out.tokens[0], 28, "position 4 scripted as (4 * 7) % 50");
    }
}

#[test]
fn early_stop_after_a_block_ending_in_eos() {
    let p = vec![1u32, 2, 3, 4];
    // EOS from position 10 on: block [8, 12) ends in EOS, the block [12, 16) and later never run.
    let mut be = Scripted::new(10);
    let s = DecodeSettings { gen_length: 24, block_length: 4, steps: 24, early_stop_eos: true, ..Default::default() };
    let (out, frames) = run(&mut be, &p, &s);
    assert_eq!(out.stop_reason, StopReason::Eos);
    assert_eq!(frames.last().unwrap().block, (8, 12));
    assert_eq!(out.tokens.len(), 24);
    assert!(out.tokens[6..].iter().all(|&t| t == 254), "{:?}", out.tokens);
    assert_eq!(out.steps, 8, "two blocks of four one-token steps");
    // Threshold decoding stops at EOS too, and without early stop everything is decoded.
    let mut be = Scripted::new(10);
    let (out, _) = run(&mut be, &p, &DecodeSettings { threshold: Some(0.9), ..s.clone() });
    assert_eq!(out.stop_reason, StopReason::Eos);
    let mut be = Scripted::new(10);
    let (out, _) = run(&mut be, &p, &DecodeSettings { early_stop_eos: false, ..s });
    assert_eq!(out.stop_reason, StopReason::Completed);
    assert_eq!(out.steps, 24);
}

#[test]
fn threshold_commits_in_parallel() {
    // Every scripted confidence is ~1, so a threshold commits a whole block per forward.
    let mut be = Scripted::new(usize::MAX);
    let s = DecodeSettings {
        gen_length: 16,
        block_length: 8,
        threshold: Some(0.9),
        cache: CacheMode::Prefix,
        ..Default::default()
    };
    let (out, frames) = run(&mut be, &[1, 2, 3], &s);
    assert_eq!(out.forwards, 2);
    assert_eq!(frames.iter().map(|f| f.changes.len()).collect::<Vec<_>>(), vec![8, 8]);
    assert_eq!(out.tokens_per_forward, 8.0);
}

// ------------------------------------------------------------------------------------ AR

#[test]
fn ar_greedy_matches_transformers_generate() {
    let g = SafetensorsSource::open(&golden("llama").join("golden.safetensors")).unwrap();
    let greedy: Vec<u32> = g.get("greedy_ids").unwrap().to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    let mut be = cpu("llama");
    // transformers generated without stopping: an EOS id the greedy answer never produces.
    let never = (0..be.config().vocab as u32).rev().find(|t| !greedy.contains(t)).unwrap();
    let s = DecodeSettings { gen_length: greedy.len(), eos_token_id: Some(never), ..Default::default() };
    let (out, frames) = run(be.as_mut(), &prompt("llama", 0), &s);
    assert_eq!(out.tokens, greedy);
    assert_eq!(frames.len(), greedy.len());
    assert!(frames.iter().all(|f| f.changes.len() == 1));
    assert_eq!(frames[0].forward_tokens, 12);
    assert_eq!(frames[1].forward_tokens, 1);
    let sampled = DecodeSettings { temperature: 0.8, top_k: Some(10), seed: 5, ..s };
    assert_eq!(
        run(be.as_mut(), &prompt("llama", 0), &sampled).0.tokens,
        run(be.as_mut(), &prompt("llama", 0), &sampled).0.tokens
    );
}

// ------------------------------------------------------------------------------------ chat

/// A word-level tokenizer over the tiny vocab: `w0`..`w249`, the LLaDA template's specials at
/// 250..253, EOS 254, mask 255.
fn tiny_tokenizer() -> TextTokenizer {
    use std::collections::HashMap;
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    use tokenizers::{AddedToken, Tokenizer};
    let specials =
        ["<|start_header_id|>", "<|end_header_id|>", "<|startoftext|>", "<|eot_id|>", "<|endoftext|>", "<|mdm_mask|>"];
    let mut vocab: HashMap<String, u32> = (0..250).map(|i| (format!("w{i}"), i)).collect();
    vocab.insert("user".into(), 10);
    vocab.insert("assistant".into(), 11);
    for (i, s) in specials.iter().enumerate() {
        vocab.insert((*s).into(), 250 + i as u32);
    }
    let model = WordLevel::builder().vocab(vocab.into_iter().collect()).unk_token("w0".into()).build().unwrap();
    let mut tok = Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(Whitespace {}));
    tok.add_special_tokens(&specials.iter().map(|s| AddedToken::from(*s, true)).collect::<Vec<_>>());
    TextTokenizer::from_tokenizer(tok, std::path::Path::new("test-tokenizer")).unwrap()
}

#[test]
fn chat_session_appends_trimmed_replies() {
    let mut be = cpu("llada");
    let tok = tiny_tokenizer();
    let s = DecodeSettings { gen_length: 16, block_length: 8, steps: 8, ..Default::default() };
    let mut chat = ChatSession::new(ChatTemplate::Llada, s);
    let r1 = chat.reply(be.as_mut(), &tok, "w5 w6 w7", &CancelFlag::new(), discard_frames).unwrap();
    assert_eq!(chat.messages.len(), 2);
    assert_eq!(chat.messages[1].content, r1.text);
    assert!(r1.tokens.len() <= 16 && !r1.tokens.contains(&254) && !r1.tokens.contains(&253));
    let stop = chat.stop_ids(be.as_ref(), &tok);
    assert!(stop.contains(&253) && stop.contains(&254));
    let first_prompt_len = r1.output.canvas.prompt_len();
    let r2 = chat.reply(be.as_mut(), &tok, "w8", &CancelFlag::new(), discard_frames).unwrap();
    assert_eq!(chat.messages.len(), 4);
    assert!(r2.output.canvas.prompt_len() > first_prompt_len);
    // A failing turn leaves the history as it was.
    let long = "w1 ".repeat(200);
    assert!(chat.reply(be.as_mut(), &tok, &long, &CancelFlag::new(), discard_frames).is_err());
    assert_eq!(chat.messages.len(), 4);
}

#[test]
fn llada_moe_and_dream_run_with_every_cache_and_threshold() {
    for model in ["llada_moe", "dream"] {
        let mut be = cpu(model);
        let p = prompt(model, 0);
        for cache in [CacheMode::None, CacheMode::Prefix, CacheMode::Dual] {
            for threshold in [None, Some(0.3)] {
                let s = DecodeSettings {
                    gen_length: 16,
                    block_length: 8,
                    steps: 8,
                    cache,
                    threshold,
                    alg: DreamAlg::TopkMargin,
                    ..Default::default()
                };
                let (out, frames) = run(be.as_mut(), &p, &s);
                assert!(out.canvas.masked_in(0, out.canvas.len()).is_empty(), "{model} {cache:?} {threshold:?}");
                assert_eq!(frames.iter().map(|f| f.changes.len()).sum::<usize>(), 16);
            }
        }
    }
}

/// A position whose prediction is the MASK token stays masked (as in the references) and the
/// block still terminates: after its planned steps the mask token is banned.
#[test]
fn predicted_mask_tokens_stay_masked_and_blocks_terminate() {
    struct MaskAt(Scripted, usize);
    impl Backend for MaskAt {
        fn name(&self) -> String {
            "mask-at".into()
        }
        fn config(&self) -> &ModelConfig {
            self.0.config()
        }
        fn new_cache(&self, capacity: usize) -> KvCache {
            self.0.new_cache(capacity)
        }
        fn forward(
            &mut self,
            req: &ForwardRequest,
            cache: Option<&mut KvCache>,
        ) -> unmask_engine::Result<(ForwardOutput, ForwardStats)> {
            let (mut out, stats) = self.0.forward(req, cache)?;
            let v = out.vocab;
            for (i, &r) in req.logits_rows.iter().enumerate() {
                if req.positions[r] == self.1 {
                    out.logits[i * v + 255] = 100.0; // the most confident prediction is MASK
                }
            }
            Ok((out, stats))
        }
    }
    for threshold in [None, Some(0.5)] {
        let mut be = MaskAt(Scripted::new(usize::MAX), 5);
        let s = DecodeSettings { gen_length: 8, block_length: 4, steps: 8, threshold, ..Default::default() };
        let (out, frames) = run(&mut be, &[1, 2, 3], &s);
        assert!(out.tokens.iter().all(|&t| t != 255), "{threshold:?}: {:?}", out.tokens);
        let commit_of_5 = frames.iter().position(|f| f.changes.iter().any(|c| c.pos == 5)).unwrap();
        assert!(commit_of_5 >= 3, "{threshold:?}: position 5 committed at frame {commit_of_5}");
        assert_eq!(frames.iter().map(|f| f.changes.len()).sum::<usize>(), 8);
    }
}

/// AR chat turns reuse the conversation's K/V: the second call forwards only the new suffix and
/// produces the same tokens as a fresh run of the whole prompt.
#[test]
fn ar_prefix_cache_reuses_earlier_turns_exactly() {
    use unmask_engine::decode::ar::{generate_ar, generate_ar_reusing, ArPrefixCache};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/llama");
    let (t, _) = unmask_engine::model::load_transformer(&dir).unwrap();
    let mut backend = unmask_engine::backend::cpu::CpuBackend::new(std::sync::Arc::new(t));
    let settings = DecodeSettings { gen_length: 6, block_length: 6, steps: 6, ..Default::default() };
    let cancel = CancelFlag::new();
    let first: Vec<u32> = vec![3, 17, 42, 99, 7, 150, 23];
    let mut reuse = ArPrefixCache::default();
    let mut widths = Vec::new();
    let out1 = generate_ar_reusing(
        &mut backend,
        &first,
        &settings,
        &cancel,
        &mut |f: &StepFrame| {
            widths.push(f.forward_tokens);
            std::ops::ControlFlow::Continue(())
        },
        &mut reuse,
    )
    .unwrap();
    assert_eq!(widths[0], first.len());
    // Next turn: the history (prompt + reply) plus a new user message.
    let mut second = first.clone();
    second.extend_from_slice(&out1.tokens);
    second.extend_from_slice(&[11, 12, 13]);
    let mut widths2 = Vec::new();
    let out2 = generate_ar_reusing(
        &mut backend,
        &second,
        &settings,
        &cancel,
        &mut |f: &StepFrame| {
            widths2.push(f.forward_tokens);
            std::ops::ControlFlow::Continue(())
        },
        &mut reuse,
    )
    .unwrap();
    // Everything but the last fed-back reply token and the new message came from the cache.
    assert_eq!(widths2[0], second.len() - (first.len() + out1.tokens.len() - 1));
    let fresh =
        generate_ar(
            &mut backend,
            &second,
            &settings,
            &cancel,
            &mut |_: &StepFrame| std::ops::ControlFlow::Continue(()),
        )
        .unwrap();
    assert_eq!(out2.tokens, fresh.tokens);
}
