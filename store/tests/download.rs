//! Downloads against a local HTTP server that serves the embedded model's real files and
//! injects faults.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http_server::{sha256_hex, Fault, TestServer};
use common::models::tiny_llada;
use unmask_store::{
    CancellationToken, DownloadConfig, DownloadEvent, DownloadRequest, ModelFormat, RemoteFile, Store, StoreError,
    Validation,
};

const REPO: &str = "unmask/tiny-llada";
const REV: &str = "main";
const WEIGHTS: &str = "model.safetensors";
/// Files of the embedded model the server offers (the standard HF layout).
const FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors",
];

/// Fast retries and timeouts that still tolerate a loaded machine.
fn config(server: &TestServer) -> DownloadConfig {
    DownloadConfig {
        endpoint: server.endpoint(),
        token: None,
        max_retries: 4,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        stall_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        progress_interval: Duration::from_millis(0),
        validation: Validation::Full,
    }
}

async fn serve_tiny_llada() -> TestServer {
    let server = TestServer::start().await;
    server.add_dir(REPO, REV, &tiny_llada(), FILES);
    server
}

type Events = Arc<Mutex<Vec<DownloadEvent>>>;

async fn download(
    store: &Store,
    req: &DownloadRequest,
    cfg: &DownloadConfig,
    cancel: &CancellationToken,
) -> (Result<unmask_store::ModelRecord, StoreError>, Vec<DownloadEvent>) {
    let events: Events = Arc::default();
    let ev = events.clone();
    let r = store.download_model(req, cfg, cancel, &mut move |e| ev.lock().unwrap().push(e)).await;
    let ev = events.lock().unwrap().clone();
    (r, ev)
}

fn weights_len() -> usize {
    std::fs::metadata(tiny_llada().join(WEIGHTS)).unwrap().len() as usize
}

#[tokio::test]
async fn downloads_standard_layout_verifies_and_registers() {
    let server = serve_tiny_llada().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    let model = r.unwrap();
    assert_eq!(model.name, "tiny-llada");
    assert_eq!(model.format, ModelFormat::Hf);
    assert_eq!(model.architecture, "llada");
    assert_eq!(model.path, "models/tiny-llada");
    assert!(model.source.starts_with("hf:http://127.0.0.1:") && model.source.ends_with("unmask/tiny-llada@main"));
    // Every file arrived intact, under its own name, with nothing left over.
    let folder = dir.path().join("models/tiny-llada");
    for f in FILES {
        assert_eq!(std::fs::read(folder.join(f)).unwrap(), std::fs::read(tiny_llada().join(f)).unwrap(), "{f}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".part") || n.ends_with(".json") && n.contains(".part") || n == ".lock")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(!dir.path().join("models/.downloads/unmask--tiny-llada@main").exists());
    let files = store.model_files(model.id).await.unwrap();
    assert_eq!(files.len(), FILES.len());
    let weights = files.iter().find(|f| f.rel_path == WEIGHTS).unwrap();
    assert_eq!(weights.sha256, sha256_hex(&std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()));
    // The optional index is absent: skipped, and model.safetensors fetched instead.
    assert!(events.contains(&DownloadEvent::FileSkipped { file: "model.safetensors.index.json".into() }));
    assert!(events.iter().any(|e| matches!(e, DownloadEvent::Progress { file, file_done, .. } if file == WEIGHTS && *file_done as usize == weights_len())));
    assert_eq!(events.last(), Some(&DownloadEvent::Registered { model_id: model.id }));
    // The downloaded model is the same one an import would register (same manifest hash).
    let err = store.import_model(&tiny_llada(), Some("again"), true).await.unwrap_err();
    assert!(matches!(err, StoreError::DuplicateModel { ref existing, .. } if existing == "tiny-llada"), "{err}");
    // Downloading it again is refused by name before any transfer.
    let before = server.requests(REPO, REV, WEIGHTS).len();
    let (r, _) = download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    assert!(matches!(r, Err(StoreError::DuplicateName(_))));
    assert_eq!(server.requests(REPO, REV, WEIGHTS).len(), before);
}

#[tokio::test]
async fn dropped_connections_resume_with_range_requests() {
    let server = serve_tiny_llada().await;
    server.push_fault(REPO, REV, WEIGHTS, Fault::DropAfter(3 << 20));
    server.push_fault(REPO, REV, WEIGHTS, Fault::DropAfter(5 << 20));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    r.unwrap();
    let reqs = server.requests(REPO, REV, WEIGHTS);
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert_eq!(reqs[0].range_start, None);
    assert_eq!((reqs[1].range_start, reqs[1].status), (Some(3 << 20), 206));
    assert_eq!((reqs[2].range_start, reqs[2].status), (Some(8 << 20), 206));
    // Resuming means the bytes crossed the wire once.
    let served: usize = reqs.iter().map(|r| r.body_bytes).sum();
    assert_eq!(served, weights_len());
    assert_eq!(events.iter().filter(|e| matches!(e, DownloadEvent::Retrying { .. })).count(), 2);
    assert_eq!(
        std::fs::read(dir.path().join("models/tiny-llada").join(WEIGHTS)).unwrap(),
        std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()
    );
}

#[tokio::test]
async fn server_without_range_support_restarts_from_zero() {
    let server = serve_tiny_llada().await;
    server.set_ranges(REPO, REV, WEIGHTS, false);
    server.push_fault(REPO, REV, WEIGHTS, Fault::DropAfter(4 << 20));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, _) = download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    let model = r.unwrap();
    let reqs = server.requests(REPO, REV, WEIGHTS);
    assert_eq!(reqs.len(), 2);
    assert_eq!((reqs[1].range_start, reqs[1].status), (Some(4 << 20), 200));
    let files = store.model_files(model.id).await.unwrap();
    let w = files.iter().find(|f| f.rel_path == WEIGHTS).unwrap();
    assert_eq!(w.size_bytes as usize, weights_len());
    assert_eq!(w.sha256, sha256_hex(&std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()));
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_then_give_up() {
    let server = serve_tiny_llada().await;
    server.push_fault(REPO, REV, "config.json", Fault::Status(500));
    server.push_fault(REPO, REV, "config.json", Fault::Status(503));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    r.unwrap();
    let delays: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match e {
            DownloadEvent::Retrying { file, attempt, delay_ms, .. } if file == "config.json" => {
                Some((*attempt, *delay_ms))
            }
            _ => None,
        })
        .collect();
    assert_eq!(delays, [(1, 10), (2, 20)]);

    // A server that keeps failing: the error names the URL and the last failure.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(dir2.path()).await.unwrap();
    for _ in 0..10 {
        server.push_fault(REPO, REV, "config.json", Fault::Status(502));
    }
    let (r, events) =
        download(&store2, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    match r {
        Err(StoreError::Download { url, reason }) => {
            assert!(url.ends_with("/unmask/tiny-llada/resolve/main/config.json"), "{url}");
            assert!(reason.contains("HTTP 502"), "{reason}");
        }
        other => panic!("expected a download error, got {other:?}"),
    }
    assert_eq!(events.iter().filter(|e| matches!(e, DownloadEvent::Retrying { .. })).count(), 4);
    assert!(store2.list_models().await.unwrap().is_empty());
}

#[tokio::test]
async fn stalled_transfers_are_detected_and_resumed() {
    let server = serve_tiny_llada().await;
    server.push_fault(REPO, REV, WEIGHTS, Fault::StallAfter(2 << 20, Duration::from_secs(20)));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let cfg = DownloadConfig { stall_timeout: Duration::from_millis(700), ..config(&server) };
    let (r, events) = download(&store, &DownloadRequest::hf(REPO, REV), &cfg, &CancellationToken::new()).await;
    r.unwrap();
    assert!(
        events.iter().any(|e| matches!(e, DownloadEvent::Retrying { file, reason, .. } if file == WEIGHTS && reason.starts_with("no data for"))),
        "{events:?}"
    );
    // The retry resumes from what arrived (all 2 MiB unless the loaded machine stalled earlier).
    let reqs = server.requests(REPO, REV, WEIGHTS);
    assert!(reqs.len() >= 2);
    assert!(matches!(reqs[1].range_start, Some(n) if n > 0 && n <= 2 << 20), "{reqs:?}");

    // Every attempt stalls: a typed `Stalled` error.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(dir2.path()).await.unwrap();
    for _ in 0..3 {
        server.push_fault(REPO, REV, "config.json", Fault::StallAfter(0, Duration::from_secs(20)));
    }
    let cfg = DownloadConfig { stall_timeout: Duration::from_millis(300), max_retries: 2, ..config(&server) };
    let (r, _) = download(&store2, &DownloadRequest::hf(REPO, REV), &cfg, &CancellationToken::new()).await;
    assert!(matches!(r, Err(StoreError::Stalled { .. })), "{r:?}");
}

#[tokio::test]
async fn slow_server_completes() {
    let server = serve_tiny_llada().await;
    server.push_fault(REPO, REV, "tokenizer.json", Fault::Slow { chunk: 8 << 10, delay: Duration::from_millis(15) });
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    r.unwrap();
    assert!(!events.iter().any(|e| matches!(e, DownloadEvent::Retrying { .. })), "{events:?}");
    let progress =
        events.iter().filter(|e| matches!(e, DownloadEvent::Progress { file, .. } if file == "tokenizer.json")).count();
    assert!(progress >= 3, "expected several progress events, got {progress}");
}

#[tokio::test]
async fn wrong_checksum_or_size_is_refused_and_nothing_is_registered() {
    let server = serve_tiny_llada().await;
    let wrong = "0".repeat(64);
    server.set_advertised_sha(REPO, REV, WEIGHTS, Some(&wrong));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    match r {
        Err(StoreError::ChecksumMismatch { file, expected, actual }) => {
            assert_eq!(file, WEIGHTS);
            assert_eq!(expected, wrong);
            assert_eq!(actual, sha256_hex(&std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()));
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    // One fresh retry, then the error; the bad bytes are not kept anywhere.
    assert_eq!(server.requests(REPO, REV, WEIGHTS).len(), 2);
    assert!(events.iter().any(|e| matches!(e, DownloadEvent::Retrying { reason, .. } if reason.contains("sha256"))));
    let staging = store.partial_download_dir(REPO, REV).unwrap();
    assert!(!staging.join(WEIGHTS).exists() && !staging.join("model.safetensors.part").exists());
    assert!(!dir.path().join("models/tiny-llada").exists());
    assert!(store.list_models().await.unwrap().is_empty());

    // A transfer corrupted once is fixed by the fresh retry.
    server.set_advertised_sha(
        REPO,
        REV,
        WEIGHTS,
        Some(&sha256_hex(&std::fs::read(tiny_llada().join(WEIGHTS)).unwrap())),
    );
    server.push_fault(REPO, REV, WEIGHTS, Fault::Corrupt);
    let (r, _) = download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    r.unwrap();

    // A caller-declared size that the server contradicts.
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(dir2.path()).await.unwrap();
    let mut req = DownloadRequest::hf(REPO, REV);
    req.files = Some(vec![RemoteFile { size: Some(12), ..RemoteFile::required("config.json") }]);
    let (r, _) = download(&store2, &req, &config(&server), &CancellationToken::new()).await;
    assert!(matches!(r, Err(StoreError::SizeMismatch { expected: 12, .. })), "{r:?}");
}

#[tokio::test]
async fn cancel_keeps_the_partial_file_and_the_next_call_resumes() {
    let server = serve_tiny_llada().await;
    server.push_fault(REPO, REV, WEIGHTS, Fault::Slow { chunk: 256 << 10, delay: Duration::from_millis(30) });
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let mut seen = 0u64;
    let r = store
        .download_model(&DownloadRequest::hf(REPO, REV), &config(&server), &cancel, &mut |e| {
            if let DownloadEvent::Progress { file, file_done, .. } = e {
                if file == WEIGHTS && file_done >= 1 << 20 {
                    seen = file_done;
                    c.cancel();
                }
            }
        })
        .await;
    assert!(matches!(r, Err(StoreError::Cancelled)), "{r:?}");
    assert!(seen >= 1 << 20);
    let part = store.partial_download_dir(REPO, REV).unwrap().join("model.safetensors.part");
    let kept = std::fs::metadata(&part).expect("partial file kept").len();
    assert!(kept >= seen && (kept as usize) < weights_len(), "kept {kept}");
    assert!(store.list_models().await.unwrap().is_empty());
    assert!(store.disk_usage().await.unwrap().partial_download_bytes >= kept);
    // The partial download can also be thrown away, and is then fetched from zero.
    let copy = std::fs::read(&part).unwrap();
    assert!(store.discard_partial_download(REPO, REV).await.unwrap());
    assert!(!part.exists());
    assert!(!store.discard_partial_download(REPO, REV).await.unwrap());
    // Put it back to test resuming (as if the discard had not happened).
    std::fs::create_dir_all(part.parent().unwrap()).unwrap();
    std::fs::write(&part, &copy).unwrap();
    std::fs::write(part.with_extension("part.json"), serde_json::json!({
        "url": format!("{}/{REPO}/resolve/{REV}/{WEIGHTS}", server.endpoint()), "etag": sha256_hex(&std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()), "total": weights_len()
    }).to_string()).unwrap();

    // A second call resumes where the first stopped.
    let (r, events) =
        download(&store, &DownloadRequest::hf(REPO, REV), &config(&server), &CancellationToken::new()).await;
    r.unwrap();
    assert!(events.contains(&DownloadEvent::FileStarted {
        file: WEIGHTS.into(),
        total: Some(weights_len() as u64),
        resumed_from: kept
    }));
    let reqs = server.requests(REPO, REV, WEIGHTS);
    assert_eq!(reqs.last().unwrap().range_start, Some(kept));
    assert_eq!(
        std::fs::read(dir.path().join("models/tiny-llada").join(WEIGHTS)).unwrap(),
        std::fs::read(tiny_llada().join(WEIGHTS)).unwrap()
    );
}

#[tokio::test]
async fn a_changed_remote_file_is_not_spliced_onto_an_old_part() {
    let server = serve_tiny_llada().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let mut cfg = config(&server);
    cfg.max_retries = 0;
    // First call: the weights transfer breaks and the call gives up, keeping the part.
    server.push_fault(REPO, REV, WEIGHTS, Fault::DropAfter(1 << 20));
    let (r, _) = download(&store, &DownloadRequest::hf(REPO, REV), &cfg, &CancellationToken::new()).await;
    assert!(matches!(r, Err(StoreError::Download { .. })), "{r:?}");
    // The file changes upstream (new ETag). If-Range makes the server send it whole.
    let mut new_bytes = std::fs::read(tiny_llada().join(WEIGHTS)).unwrap();
    let n = new_bytes.len();
    new_bytes[n - 1] ^= 1;
    server.replace(REPO, REV, WEIGHTS, new_bytes.clone());
    let (r, _) = download(
        &store,
        &DownloadRequest { name: Some("changed".into()), ..DownloadRequest::hf(REPO, REV) },
        &config(&server),
        &CancellationToken::new(),
    )
    .await;
    r.unwrap();
    let reqs = server.requests(REPO, REV, WEIGHTS);
    assert_eq!((reqs.last().unwrap().range_start, reqs.last().unwrap().status), (Some(1 << 20), 200));
    assert_eq!(std::fs::read(dir.path().join("models/changed").join(WEIGHTS)).unwrap(), new_bytes);
}

#[tokio::test]
async fn gguf_behind_an_lfs_redirect() {
    let server = TestServer::start().await;
    let bytes = std::fs::read(common::models::tiny_llada_gguf()).unwrap();
    let repo = "someone/tiny-llada-GGUF";
    server.add(repo, REV, "gguf/tiny-llada-q8_0.gguf", bytes.clone());
    server.set_redirect(repo, REV, "gguf/tiny-llada-q8_0.gguf", true);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let req = DownloadRequest::gguf(repo, REV, "gguf/tiny-llada-q8_0.gguf");
    let (r, _) = download(&store, &req, &config(&server), &CancellationToken::new()).await;
    let m = r.unwrap();
    assert_eq!(
        (m.format, m.name.as_str(), m.path.as_str()),
        (ModelFormat::Gguf, "tiny-llada-q8_0", "models/tiny-llada-q8_0/gguf/tiny-llada-q8_0.gguf")
    );
    assert_eq!(m.sha256, sha256_hex(&bytes));
    assert_eq!(m.quantization, "Q8_0");
    let reqs = server.requests(repo, REV, "gguf/tiny-llada-q8_0.gguf");
    assert_eq!(reqs.iter().map(|r| r.status).collect::<Vec<_>>(), [302, 200]);
    unmask_engine::model::load_model(&store.model_path(&m)).unwrap();

    // The sha256 the redirect advertises is enforced even though the CDN hop does not repeat it.
    let wrong = "a".repeat(64);
    server.set_advertised_sha(repo, REV, "gguf/tiny-llada-q8_0.gguf", Some(&wrong));
    let (r, _) = download(
        &store,
        &DownloadRequest { name: Some("other".into()), ..req },
        &config(&server),
        &CancellationToken::new(),
    )
    .await;
    assert!(matches!(r, Err(StoreError::ChecksumMismatch { ref expected, .. }) if *expected == wrong), "{r:?}");
}

#[tokio::test]
async fn missing_files_and_unsafe_names_give_clear_errors() {
    let server = serve_tiny_llada().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let cfg = config(&server);
    let cancel = CancellationToken::new();
    // A repo without the required files: 404 names the URL.
    let (r, _) = download(&store, &DownloadRequest::hf("nobody/nothing", REV), &cfg, &cancel).await;
    assert!(
        matches!(r, Err(StoreError::HttpStatus { status: 404, ref url }) if url.ends_with("nobody/nothing/resolve/main/config.json")),
        "{r:?}"
    );
    for (repo, rev, file) in [
        ("../../etc", REV, "config.json"),
        ("a/b/c", REV, "config.json"),
        (REPO, "../x", "config.json"),
        (REPO, "refs/pr/1", "config.json"),
        (REPO, REV, "../../../outside.gguf"),
        (REPO, REV, "/abs.gguf"),
        (REPO, REV, "x\\..\\y.gguf"),
        (REPO, REV, "weights.part"),
    ] {
        let (r, _) = download(&store, &DownloadRequest::gguf(repo, rev, file), &cfg, &cancel).await;
        assert!(matches!(r, Err(StoreError::UnsafeName { .. })), "{repo} {rev} {file}: {r:?}");
    }
    let (r, _) = download(
        &store,
        &DownloadRequest { name: Some("../evil".into()), ..DownloadRequest::hf(REPO, REV) },
        &cfg,
        &cancel,
    )
    .await;
    assert!(matches!(r, Err(StoreError::UnsafeName { .. })), "{r:?}");
    assert!(server.requests(REPO, REV, "config.json").is_empty(), "no request for refused names");
    // Failed downloads that got no file leave no staging folder behind.
    assert!(!store.partial_download_dir("nobody/nothing", REV).unwrap().exists());
}
