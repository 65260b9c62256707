//! Our forward pass against logits recorded with HF transformers on random-initialised tiny models
//! of every supported architecture (`tests/reference/make_tiny_models.py`, files in `tests/golden/`).

use unmask_engine::kernels::quant::TensorToF32;
use std::path::{Path, PathBuf};

use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::TensorSource;
use unmask_engine::model::{load_transformer, ForwardRequest, KvMode, Transformer};

fn golden_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name)
}

struct Golden {
    ids: Vec<Vec<u32>>,
    logits: Vec<f32>,
    vocab: usize,
    greedy: Option<Vec<u32>>,
}

fn read_golden(dir: &Path) -> Golden {
    let g = SafetensorsSource::open(&dir.join("golden.safetensors")).unwrap();
    let ids_t = g.get("input_ids").unwrap();
    let (np, seq) = (ids_t.shape[0], ids_t.shape[1]);
    let ids: Vec<u32> = ids_t.to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    let lt = g.get("logits").unwrap();
    let greedy = g
        .contains("greedy_ids")
        .then(|| g.get("greedy_ids").unwrap().to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect());
    Golden {
        ids: ids.chunks(seq).map(|c| c.to_vec()).take(np).collect(),
        vocab: lt.shape[2],
        logits: lt.to_f32_vec().unwrap(),
        greedy,
    }
}

fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

fn full_forward(t: &Transformer, ids: &[u32]) -> Vec<f32> {
    let pos: Vec<usize> = (0..ids.len()).collect();
    let rows: Vec<usize> = (0..ids.len()).collect();
    t.forward(&ForwardRequest { tokens: ids, positions: &pos, logits_rows: &rows, kv: KvMode::Ignore }, None)
        .unwrap()
        .logits
}

fn check_arch(name: &str) {
    let dir = golden_dir(name);
    let (t, _) = load_transformer(&dir).unwrap();
    let g = read_golden(&dir);
    assert_eq!(g.vocab, t.config.vocab);
    let seq = g.ids[0].len();
    for (i, ids) in g.ids.iter().enumerate() {
        let ours = full_forward(&t, ids);
        let want = &g.logits[i * seq * g.vocab..(i + 1) * seq * g.vocab];
        let err = max_rel_err(&ours, want);
        assert!(err < 1e-4, "{name} prompt {i}: max relative error {err}");
    }
    if let Some(greedy) = &g.greedy {
        // Greedy AR continuation with the KV cache, one token per forward.
        let mut cache = t.new_cache(t.config.max_seq);
        let prompt = &g.ids[0];
        let pos: Vec<usize> = (0..prompt.len()).collect();
        let out = t
            .forward(
                &ForwardRequest {
                    tokens: prompt,
                    positions: &pos,
                    logits_rows: &[prompt.len() - 1],
                    kv: KvMode::ReadWrite,
                },
                Some(&mut cache),
            )
            .unwrap();
        let mut next = argmax(out.row(0));
        let mut got = vec![next];
        for step in 0..greedy.len() - 1 {
            let p = prompt.len() + step;
            let out = t
                .forward(
                    &ForwardRequest { tokens: &[next], positions: &[p], logits_rows: &[0], kv: KvMode::ReadWrite },
                    Some(&mut cache),
                )
                .unwrap();
            next = argmax(out.row(0));
            got.push(next);
        }
        assert_eq!(&got, greedy, "{name}: greedy tokens differ");
    }
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn llada_matches_transformers() {
    check_arch("llada");
}
#[test]
fn dream_matches_transformers() {
    check_arch("dream");
}
#[test]
fn llada_moe_matches_transformers() {
    check_arch("llada_moe");
}
#[test]
fn llama_matches_transformers() {
    check_arch("llama");
}
#[test]
fn qwen2_matches_transformers() {
    check_arch("qwen2");
}
#[test]
fn qwen3_matches_transformers() {
    check_arch("qwen3");
}
#[test]
fn qwen3_moe_matches_transformers() {
    check_arch("qwen3_moe");
}

/// The prefix-cache path gives the same logits as a full bidirectional forward when the cache
/// holds exactly what a full forward would compute (block = suffix, prefix cached from the same input).
#[test]
fn prefix_cache_equals_full_forward_for_llada() {
    let dir = golden_dir("llada");
    let (t, _) = load_transformer(&dir).unwrap();
    let g = read_golden(&dir);
    let ids = &g.ids[0];
    let full = full_forward(&t, ids);
    let mut cache = t.new_cache(32);
    let pos: Vec<usize> = (0..ids.len()).collect();
    t.forward(
        &ForwardRequest { tokens: ids, positions: &pos, logits_rows: &[], kv: KvMode::ReadWrite },
        Some(&mut cache),
    )
    .unwrap();
    cache.invalidate_from(8);
    let out = t
        .forward(
            &ForwardRequest { tokens: &ids[8..], positions: &pos[8..], logits_rows: &[0, 1, 2, 3], kv: KvMode::Read },
            Some(&mut cache),
        )
        .unwrap();
    let err = max_rel_err(&out.logits, &full[8 * g.vocab..12 * g.vocab]);
    assert!(err < 1e-4, "prefix-cached block differs: {err}");
}
