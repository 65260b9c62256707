//! Shared by the QNN backend tests: the mock QNN provider (built by the tests, one private copy
//! per test, exactly as qnn-sys's own tests do), the tiny golden models and comparison helpers.

#![allow(dead_code)]

#[path = "../../../qnn-sys/tests/common/mod.rs"]
pub mod mock;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use mock::Mock;
use unmask_engine::backend::qnn::{BucketPlan, QnnOptions, QnnPrecision};
use unmask_engine::backend::Backend;
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::TensorSource;
use unmask_engine::model::{load_transformer, ForwardRequest, KvMode, Transformer};

pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name)
}

pub fn tiny_llada_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada")
}

pub fn model(name: &str) -> Arc<Transformer> {
    Arc::new(load_transformer(&golden(name)).expect("load tiny model").0)
}

pub fn tiny_llada() -> Arc<Transformer> {
    Arc::new(load_transformer(&tiny_llada_dir()).expect("load tiny-llada").0)
}

/// The three recorded prompts of a golden model.
pub fn prompts(name: &str) -> Vec<Vec<u32>> {
    let g = SafetensorsSource::open(&golden(name).join("golden.safetensors")).unwrap();
    let t = g.get("input_ids").unwrap();
    let seq = t.shape[1];
    let ids: Vec<u32> = t.to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    ids.chunks(seq).map(<[u32]>::to_vec).collect()
}

/// Small buckets so the golden prompts (12 tokens) pad: tokens 1/8/16/32, cached 16/64.
pub fn test_buckets() -> BucketPlan {
    BucketPlan::new(&[1, 8, 16, 32], &[16, 64]).unwrap()
}

/// Options for the mock at `precision` with [`test_buckets`], whole stack in one graph.
pub fn options(mock: &Mock, precision: QnnPrecision) -> QnnOptions {
    QnnOptions { library: mock.path().to_path_buf(), precision, buckets: Some(test_buckets()), ..QnnOptions::default() }
}

/// Logits of every row of `ids` at positions 0.., no cache.
pub fn forward_all(b: &mut dyn Backend, ids: &[u32]) -> Vec<f32> {
    let pos: Vec<usize> = (0..ids.len()).collect();
    b.forward(&ForwardRequest { tokens: ids, positions: &pos, logits_rows: &pos, kv: KvMode::Ignore }, None)
        .expect("forward")
        .0
        .logits
}

/// `max |a − b| / max |b|`.
pub fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

pub fn argmax(x: &[f32]) -> usize {
    x.iter().enumerate().fold(0, |best, (i, v)| if *v > x[best] { i } else { best })
}

/// Fraction of rows (of width `vocab`) whose argmax agrees.
pub fn top1_agreement(a: &[f32], b: &[f32], vocab: usize) -> f64 {
    let rows = a.len() / vocab;
    let same =
        (0..rows).filter(|&r| argmax(&a[r * vocab..(r + 1) * vocab]) == argmax(&b[r * vocab..(r + 1) * vocab])).count();
    same as f64 / rows as f64
}

/// Count of a call name in the mock's log.
pub fn count(calls: &[String], name: &str) -> usize {
    calls.iter().filter(|c| *c == name).count()
}
