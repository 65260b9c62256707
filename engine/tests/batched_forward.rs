//! Cross-request batching: a packed forward gives each sequence what it gets alone, and decodes
//! on their own threads sharing a `ForwardBatcher` produce the tokens they produce alone while
//! their forwards really are packed.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use unmask_engine::backend::batch::{ForwardBatcher, MAX_PASSED_OVER};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::{Backend, ForwardStats};
use unmask_engine::decode::{generate, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{
    load_model, BatchItem, ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig, Transformer,
};
use unmask_engine::Result;

fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(name)
}

fn transformer(name: &str) -> Arc<Transformer> {
    Arc::new(load_model(&model_dir(name)).unwrap().transformer)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Three sequences of different lengths and cache use, alone and packed.
fn packed_equals_alone(name: &str) {
    let m = transformer(name);
    let vocab = m.config.vocab as u32;
    let seq = |seed: u32, n: usize| -> Vec<u32> { (0..n as u32).map(|i| (seed * 131 + i * 17 + 7) % vocab).collect() };

    // Sequence A: no cache. B: a cache holding a 12-token prefix, block read and written.
    // C: its own cache, read only.
    let (a_tok, b_pre, b_tok, c_pre, c_tok) = (seq(1, 9), seq(2, 12), seq(3, 6), seq(4, 5), seq(5, 11));
    let prefill = |pre: &[u32]| -> KvCache {
        let mut kc = m.new_cache(64);
        let pos: Vec<usize> = (0..pre.len()).collect();
        let req = ForwardRequest { tokens: pre, positions: &pos, logits_rows: &[], kv: KvMode::ReadWrite };
        m.forward(&req, Some(&mut kc)).unwrap();
        kc
    };
    let a_pos: Vec<usize> = (0..a_tok.len()).collect();
    let b_pos: Vec<usize> = (12..12 + b_tok.len()).collect();
    let c_pos: Vec<usize> = (5..5 + c_tok.len()).collect();
    let a_rows: Vec<usize> = (0..a_tok.len()).collect();
    let (b_rows, c_rows) = (vec![0, 3, 5], vec![10, 2]);
    let a = ForwardRequest { tokens: &a_tok, positions: &a_pos, logits_rows: &a_rows, kv: KvMode::Ignore };
    let b = ForwardRequest { tokens: &b_tok, positions: &b_pos, logits_rows: &b_rows, kv: KvMode::ReadWrite };
    let c = ForwardRequest { tokens: &c_tok, positions: &c_pos, logits_rows: &c_rows, kv: KvMode::Read };

    let (mut b_alone_kc, mut c_alone_kc) = (prefill(&b_pre), prefill(&c_pre));
    let alone = [
        m.forward(&a, None).unwrap(),
        m.forward(&b, Some(&mut b_alone_kc)).unwrap(),
        m.forward(&c, Some(&mut c_alone_kc)).unwrap(),
    ];

    let (mut b_kc, mut c_kc) = (prefill(&b_pre), prefill(&c_pre));
    let mut items = [
        BatchItem { req: a.clone(), cache: None },
        BatchItem { req: b.clone(), cache: Some(&mut b_kc) },
        BatchItem { req: c.clone(), cache: Some(&mut c_kc) },
    ];
    let packed: Vec<ForwardOutput> = m.forward_batch(&mut items).into_iter().map(|r| r.unwrap()).collect();
    for (i, (p, s)) in packed.iter().zip(&alone).enumerate() {
        assert_eq!(p.rows, s.rows, "{name} seq {i}");
        assert_eq!(p.context_len, s.context_len, "{name} seq {i}");
        let d = max_abs_diff(&p.logits, &s.logits);
        assert!(d <= 1e-4, "{name} seq {i}: packed logits differ from alone by {d}");
        let rel = (p.flops - s.flops).abs() / s.flops;
        assert!(rel < 0.05, "{name} seq {i}: flops {} packed vs {} alone", p.flops, s.flops);
    }
    // The written cache is the one the lone forward writes; the read-only one is untouched.
    for li in 0..m.config.n_layers {
        for pos in 0..20 {
            assert_eq!(b_kc.is_valid(pos), b_alone_kc.is_valid(pos));
            if b_kc.is_valid(pos) {
                assert!(max_abs_diff(&b_kc.k_row(li, pos), &b_alone_kc.k_row(li, pos)) <= 1e-5);
                assert!(max_abs_diff(&b_kc.v_row(li, pos), &b_alone_kc.v_row(li, pos)) <= 1e-5);
            }
        }
    }
    assert_eq!(c_kc.valid_count(), 5);
}

#[test]
fn a_packed_forward_gives_each_sequence_its_lone_result() {
    packed_equals_alone("tiny-llada");
    packed_equals_alone("tiny-ar");
    packed_equals_alone("tiny-llada-moe");
}

#[test]
fn an_invalid_sequence_fails_alone_and_the_others_still_run() {
    let m = transformer("tiny-llada");
    let good_tok = [3u32, 4, 5];
    let bad_tok = [3u32, m.config.vocab as u32 + 9];
    let pos = [0usize, 1, 2];
    let good = ForwardRequest { tokens: &good_tok, positions: &pos, logits_rows: &[2], kv: KvMode::Ignore };
    let bad = ForwardRequest { tokens: &bad_tok, positions: &pos[..2], logits_rows: &[1], kv: KvMode::Ignore };
    let mut items = [BatchItem { req: bad, cache: None }, BatchItem { req: good.clone(), cache: None }];
    let out = m.forward_batch(&mut items);
    let err = out[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("outside vocab"), "{err}");
    let alone = m.forward(&good, None).unwrap();
    assert!(max_abs_diff(&out[1].as_ref().unwrap().logits, &alone.logits) <= 1e-5);
}

fn settings(gen_length: usize) -> DecodeSettings {
    DecodeSettings { gen_length, block_length: gen_length, steps: gen_length, ..Default::default() }
}

fn decode(backend: &mut dyn Backend, prompt: &[u32], s: &DecodeSettings) -> Vec<u32> {
    generate(backend, prompt, s, &CancelFlag::new(), |_: &StepFrame| ControlFlow::Continue(())).unwrap().tokens
}

#[test]
fn decodes_sharing_a_batcher_give_their_lone_tokens_and_are_packed() {
    let loaded = load_model(&model_dir("tiny-llada")).unwrap();
    let prompts: Vec<Vec<u32>> = ["What is 3+4?", "Sort: pear fig apple", "Reverse: stone", "What is 12+30?"]
        .iter()
        .map(|p| loaded.tokenizer.encode(p).unwrap())
        .collect();
    let m = Arc::new(loaded.transformer);
    // Different answer lengths: decodes leave the batch at different times.
    let lengths = [16, 8, 16, 24];
    let mut alone_backend = CpuBackend::new(m.clone());
    let alone: Vec<Vec<u32>> =
        prompts.iter().zip(lengths).map(|(p, n)| decode(&mut alone_backend, p, &settings(n))).collect();

    let batcher = ForwardBatcher::new(Box::new(CpuBackend::new(m.clone())));
    let start = Arc::new(Barrier::new(prompts.len()));
    let threads: Vec<_> = prompts
        .iter()
        .cloned()
        .zip(lengths)
        .map(|(p, n)| {
            let (batcher, start) = (batcher.clone(), start.clone());
            std::thread::spawn(move || {
                let mut member = batcher.member();
                let joined = batcher.join();
                start.wait();
                let tokens = decode(&mut member, &p, &settings(n));
                drop(joined);
                tokens
            })
        })
        .collect();
    let batched: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(batched, alone, "batching changed a decode's tokens");
    let c = batcher.counters();
    assert_eq!(c.forwards, lengths.iter().sum::<usize>() as u64, "one forward per step of each decode");
    assert_eq!(c.largest, 4, "all four decodes joined before the first forward: it carries all four");
    assert!(c.mean_batch() > 2.0, "forwards were not packed: {c:?}");
}

#[test]
fn a_decode_going_ahead_runs_without_waiting_for_the_pack_and_the_others_are_not_starved() {
    let loaded = load_model(&model_dir("tiny-llada")).unwrap();
    let prompts: Vec<Vec<u32>> = ["What is 5+6?", "Reverse: lamp desk", "Sort: kiwi plum fig"]
        .iter()
        .map(|p| loaded.tokenizer.encode(p).unwrap())
        .collect();
    let m = Arc::new(loaded.transformer);
    let n = 16;
    let mut alone_backend = CpuBackend::new(m.clone());
    let alone: Vec<Vec<u32>> = prompts.iter().map(|p| decode(&mut alone_backend, p, &settings(n))).collect();

    let batcher = ForwardBatcher::new(Box::new(CpuBackend::new(m.clone())));
    // Steps each decode has taken; the first decode goes ahead.
    let steps: Arc<Vec<AtomicUsize>> = Arc::new((0..prompts.len()).map(|_| AtomicUsize::new(0)).collect());
    let others_when_first_done = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(prompts.len()));
    let threads: Vec<_> = prompts
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, p)| {
            let (batcher, start, steps, seen) =
                (batcher.clone(), start.clone(), steps.clone(), others_when_first_done.clone());
            std::thread::spawn(move || {
                let mut member = batcher.member();
                let joined = batcher.join();
                joined.go_ahead(i == 0);
                start.wait();
                let out = generate(&mut member, &p, &settings(n), &CancelFlag::new(), |_: &StepFrame| {
                    steps[i].fetch_add(1, Ordering::SeqCst);
                    ControlFlow::Continue(())
                })
                .unwrap();
                if i == 0 {
                    *seen.lock().unwrap() = steps.iter().skip(1).map(|s| s.load(Ordering::SeqCst)).collect();
                }
                drop(joined);
                out.tokens
            })
        })
        .collect();
    let batched: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(batched, alone, "going ahead changed a decode's tokens");
    // Every packed forward carries the decode going ahead; the others' blocks join at most one
    // in MAX_PASSED_OVER + 1 of them while it runs.
    let bound = n.div_ceil(MAX_PASSED_OVER as usize + 1);
    let seen = others_when_first_done.lock().unwrap().clone();
    assert!(seen.iter().all(|&s| s <= bound), "others took {seen:?} steps while the first took {n} (bound {bound})");
    let c = batcher.counters();
    assert_eq!(c.forwards, (n * prompts.len()) as u64, "one forward per step of each decode");
    assert!(c.passed_over > 0, "no forward went ahead: {c:?}");
}

/// A backend that panics on its third forward.
struct Faulty {
    inner: CpuBackend,
    calls: usize,
}

impl Backend for Faulty {
    fn name(&self) -> String {
        "faulty".into()
    }
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        self.inner.new_cache(capacity)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        self.calls += 1;
        assert!(self.calls != 3, "the backend broke");
        self.inner.forward(req, cache)
    }
}

#[test]
fn a_backend_panic_fails_the_packed_decodes_instead_of_hanging_them() {
    let loaded = load_model(&model_dir("tiny-llada")).unwrap();
    let prompt = loaded.tokenizer.encode("What is 2+2?").unwrap();
    let m = Arc::new(loaded.transformer);
    let batcher = ForwardBatcher::new(Box::new(Faulty { inner: CpuBackend::new(m), calls: 0 }));
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (batcher, start, prompt) = (batcher.clone(), start.clone(), prompt.clone());
            std::thread::spawn(move || {
                let mut member = batcher.member();
                let _joined = batcher.join();
                start.wait();
                generate(&mut member, &prompt, &settings(16), &CancelFlag::new(), |_: &StepFrame| {
                    ControlFlow::Continue(())
                })
                .map(|o| o.tokens)
            })
        })
        .collect();
    for t in threads {
        let err = t.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("panicked"), "{err}");
    }
    // The batcher still works after the failure.
    let mut member = batcher.member();
    assert_eq!(decode(&mut member, &prompt, &settings(8)).len(), 8);
}
