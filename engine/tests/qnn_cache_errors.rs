//! The QNN backend's context-binary cache (a second start reloads instead of rebuilding, proven
//! by the mock's call record) and its failure modes: missing library, too-old API, provider
//! errors in finalize/execute — typed errors, no crash, no lost cache state.

#[path = "common/qnn.rs"]
mod qnn;

use std::sync::Arc;

use qnn::*;
use qnn_sys::{QnnError, StatusCode};
use unmask_engine::backend::qnn::{Bucket, Outcome, QnnBackend, QnnOptions, QnnPrecision};
use unmask_engine::backend::Backend;
use unmask_engine::model::{ForwardRequest, KvMode};
use unmask_engine::EngineError;

/// Calls that build graphs; a reload must make none of them.
const BUILD_CALLS: [&str; 4] = ["graphCreate", "tensorCreateGraphTensor", "graphAddNode", "graphFinalize"];

#[test]
fn second_start_reloads_context_binaries_without_building() {
    let t = model("qwen2");
    let ids = &prompts("qwen2")[0];
    let dir = tempfile::tempdir().unwrap();
    let opts = |mock: &Mock| QnnOptions {
        cache_dir: Some(dir.path().to_path_buf()),
        layers_per_graph: 1,
        ..options(mock, QnnPrecision::W8A16)
    };

    // First "process": builds every context it uses and writes binaries + sidecars.
    let first = {
        let mock = Mock::new();
        let mut q = QnnBackend::new(Arc::clone(&t), opts(&mock)).unwrap();
        let logits = forward_all(&mut q, ids);
        assert_eq!(q.stats().contexts_built, 3, "two layer groups + the head");
        assert!(q
            .outcomes()
            .iter()
            .all(|(_, o)| matches!(o, Outcome::Built { reason } if reason.contains("no cached"))));
        let calls = mock.calls();
        assert_eq!(count(&calls, "graphFinalize"), 3);
        assert_eq!(count(&calls, "contextCreateFromBinary"), 0);
        logits
    };
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 6, "a .bin and a .json per context: {files:?}");

    // Second "process": a fresh provider instance (its own state and call log) and a new backend.
    let mock = Mock::new();
    let mut q = QnnBackend::new(Arc::clone(&t), opts(&mock)).unwrap();
    let second = forward_all(&mut q, ids);
    assert_eq!(second, first, "reloaded graphs compute the same logits bit for bit");
    assert_eq!((q.stats().contexts_loaded, q.stats().contexts_built), (3, 0));
    let calls = mock.calls();
    for c in BUILD_CALLS {
        assert_eq!(count(&calls, c), 0, "{c} called on reload: {calls:?}");
    }
    assert_eq!(count(&calls, "contextCreateFromBinary"), 3);
    assert_eq!(count(&calls, "graphRetrieve"), 3);
    assert_eq!(count(&calls, "graphExecute"), 3);

    // A different precision is a different key: it builds, and leaves the W8A16 entries alone.
    let mock = Mock::new();
    let mut f = QnnBackend::new(Arc::clone(&t), QnnOptions { precision: QnnPrecision::F32, ..opts(&mock) }).unwrap();
    forward_all(&mut f, ids);
    assert_eq!(f.stats().contexts_built, 3);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 12);
}

#[test]
fn stale_or_corrupt_cache_entries_are_rebuilt() {
    let t = model("llama");
    let dir = tempfile::tempdir().unwrap();
    let bucket = Bucket { tokens: 8, cached: 0 };
    let opts =
        |mock: &Mock| QnnOptions { cache_dir: Some(dir.path().to_path_buf()), ..options(mock, QnnPrecision::F32) };
    let key = {
        let mock = Mock::new();
        let mut q = QnnBackend::new(Arc::clone(&t), opts(&mock)).unwrap();
        q.prepare(bucket).unwrap();
        q.outcomes()[0].0.clone()
    };
    // Flip one byte of the binary: the sidecar's hash catches it and the context is rebuilt.
    let bin = dir.path().join(format!("{key}.bin"));
    let mut bytes = std::fs::read(&bin).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&bin, &bytes).unwrap();
    let mock = Mock::new();
    let mut q = QnnBackend::new(Arc::clone(&t), opts(&mock)).unwrap();
    q.prepare(bucket).unwrap();
    assert!(
        matches!(&q.outcomes()[0].1, Outcome::Built { reason } if reason.contains("does not match")),
        "{:?}",
        q.outcomes()
    );
    // The provider rejecting a (valid) binary also falls back to building, not to an error.
    let mock = Mock::new();
    mock.inject_error("contextCreateFromBinary", 5005);
    let mut q = QnnBackend::new(Arc::clone(&t), opts(&mock)).unwrap();
    q.prepare(bucket).unwrap();
    assert!(
        matches!(&q.outcomes()[0].1, Outcome::Built { reason } if reason.contains("rejected")),
        "{:?}",
        q.outcomes()
    );
    // Other weights: same file name space, different fingerprint → no collision.
    let other = model("qwen2");
    let mock = Mock::new();
    let mut q = QnnBackend::new(other, opts(&mock)).unwrap();
    q.prepare(bucket).unwrap();
    assert_ne!(q.outcomes()[0].0, key);
}

#[test]
fn missing_library_is_a_typed_error() {
    let t = model("llama");
    let opts = QnnOptions { library: "/nonexistent/libQnnHtp.so".into(), ..QnnOptions::default() };
    let err = QnnBackend::new(t, opts).err().expect("must fail");
    assert!(matches!(&err, EngineError::Qnn(QnnError::LibraryLoad { .. })), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/libQnnHtp.so"), "{err}");
}

#[test]
fn too_old_api_version_is_refused() {
    let mock = Mock::new();
    mock.set_api_version(2, 14, 0);
    let err = QnnBackend::new(model("llama"), options(&mock, QnnPrecision::F32)).err().expect("must fail");
    assert!(matches!(&err, EngineError::Qnn(QnnError::ApiVersionTooOld { .. })), "{err:?}");
    assert!(err.to_string().contains("2.14.0"), "{err}");
}

fn api_code(e: &EngineError) -> (&'static str, u16) {
    match e {
        EngineError::Qnn(QnnError::Api { function, code: StatusCode(c) }) => (function, *c),
        other => panic!("expected a QNN API error, got {other:?}"),
    }
}

#[test]
fn provider_failures_in_finalize_and_execute_are_typed_and_recoverable() {
    let mock = Mock::new();
    let t = model("llama");
    let ids = &prompts("llama")[0];
    let mut q = QnnBackend::new(Arc::clone(&t), options(&mock, QnnPrecision::F32)).unwrap();
    let mut cache = q.new_cache(32);
    let pos: Vec<usize> = (0..ids.len()).collect();
    let req = ForwardRequest { tokens: ids, positions: &pos, logits_rows: &[11], kv: KvMode::ReadWrite };

    mock.inject_error("graphFinalize", 6022);
    let err = q.forward(&req, Some(&mut cache)).expect_err("finalize fails");
    assert_eq!(api_code(&err), ("graphFinalize", 6022));
    assert!(err.to_string().contains("GRAPH_ERROR_FINALIZE_FAILED"), "{err}");
    assert_eq!(cache.valid_count(), 0, "a failed forward leaves the cache untouched");

    mock.inject_error("graphFinalize", 0);
    mock.inject_error("graphExecute", 6033);
    let err = q.forward(&req, Some(&mut cache)).expect_err("execute fails");
    assert_eq!(api_code(&err), ("graphExecute", 6033));
    assert_eq!(cache.valid_count(), 0);

    mock.inject_error("graphAddNode", 6005);
    let err = q.prepare(Bucket { tokens: 1, cached: 16 }).expect_err("add node fails");
    assert_eq!(api_code(&err), ("graphAddNode", 6005));

    // Cleared faults: the same backend works and matches a fresh one.
    mock.inject_error("graphExecute", 0);
    mock.inject_error("graphAddNode", 0);
    let (out, _) = q.forward(&req, Some(&mut cache)).expect("recovers");
    assert_eq!(cache.valid_count(), ids.len());
    let fresh = Mock::new();
    let mut q2 = QnnBackend::new(Arc::clone(&t), options(&fresh, QnnPrecision::F32)).unwrap();
    let mut c2 = q2.new_cache(32);
    assert_eq!(q2.forward(&req, Some(&mut c2)).unwrap().0.logits, out.logits);
    drop(q);
    assert_eq!(mock.live_handles(), 0, "everything freed after failures; last error: {}", mock.last_error());
}

#[test]
fn bad_requests_are_rejected_before_the_provider() {
    let mock = Mock::new();
    let mut q = QnnBackend::new(model("llama"), options(&mock, QnnPrecision::F32)).unwrap();
    // (tokens, positions, logits rows, KV mode)
    type Case = (Vec<u32>, Vec<usize>, Vec<usize>, KvMode);
    let cases: Vec<Case> = vec![
        (vec![1, 2], vec![0], vec![0], KvMode::Ignore), // positions ≠ tokens
        (vec![9999], vec![0], vec![0], KvMode::Ignore), // outside vocab
        (vec![1], vec![0], vec![3], KvMode::Ignore),    // logits row outside the block
        (vec![1], vec![0], vec![0], KvMode::Read),      // KV mode without a cache
        (vec![1], vec![500], vec![0], KvMode::Ignore),  // past max_seq
    ];
    mock.clear_calls();
    for (tokens, positions, rows, kv) in cases {
        let r = q.forward(&ForwardRequest { tokens: &tokens, positions: &positions, logits_rows: &rows, kv }, None);
        assert!(matches!(r, Err(EngineError::InvalidRequest(_) | EngineError::ContextOverflow { .. })), "{r:?}");
    }
    // A cache of another model's shape is refused too.
    let mut wrong = model("qwen3").new_cache(16);
    let r = q.forward(
        &ForwardRequest { tokens: &[1], positions: &[0], logits_rows: &[0], kv: KvMode::Read },
        Some(&mut wrong),
    );
    assert!(matches!(r, Err(EngineError::InvalidRequest(_))), "{r:?}");
    assert!(mock.calls().is_empty(), "no QNN call for invalid requests: {:?}", mock.calls());
}
