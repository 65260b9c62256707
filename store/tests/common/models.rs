//! Test models: the embedded tiny-llada, and a GGUF export of it made once per test binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use unmask_engine::model::gguf::writer::export_gguf;
use unmask_engine::tensor::DType;

/// The embedded default model (an HF directory).
pub fn tiny_llada() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada")
}

/// tiny-llada exported to a Q8_0 GGUF (with its tokenizer), generated on first use.
pub fn tiny_llada_gguf() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        export_gguf(&tiny_llada(), &d.path().join("tiny-llada-q8_0.gguf"), DType::Q8_0).unwrap();
        d
    });
    dir.path().join("tiny-llada-q8_0.gguf")
}

/// A GGUF without an embedded tokenizer (a golden test file): the engine cannot chat with it.
pub fn gguf_without_tokenizer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/gguf/tiny-llama-q8_0.gguf")
}
