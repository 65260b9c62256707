//! Downloads against a local HTTP server: a whole download registers the model; pause keeps the
//! partial file and resume continues it with a `Range` request; cancel removes the partial files;
//! the chosen revision and single GGUF file are what is requested.

#[path = "common/http_server.rs"]
mod http_server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use unmask_app_lib::downloads::DownloadChoice;
use unmask_app_lib::dto::DownloadEvent;
use unmask_app_lib::sink::CollectSink;
use unmask_app_lib::{AppErrorKind, AppState};

/// A repository model other than the embedded one (the store refuses a second copy of the same
/// weights).
fn model_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models").join(name)
}

/// Waits (generously: the machine may be loaded) until `pred` holds for the events so far.
async fn wait_for(sink: &CollectSink<DownloadEvent>, what: &str, pred: impl Fn(&[DownloadEvent]) -> bool) {
    for _ in 0..2400 {
        if pred(&sink.events()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}; events: {:?}", sink.events());
}

fn finished(ev: &[DownloadEvent]) -> bool {
    ev.iter().any(|e| matches!(e, DownloadEvent::Finished { .. } | DownloadEvent::Failed { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_registers_the_model() {
    let server = http_server::serve(model_dir("tiny-draft"), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = CollectSink::<DownloadEvent>::default();
    let id = state
        .start_download(
            &server.base_url,
            "unmask/tiny-copy",
            &DownloadChoice::default(),
            Some("tiny-copy"),
            Arc::new(sink.clone()),
        )
        .await
        .expect("start");
    wait_for(&sink, "the download to end", finished).await;
    let events = sink.events();
    let model = events
        .iter()
        .find_map(|e| match e {
            DownloadEvent::Finished { download_id, model } if *download_id == id => Some(model.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no finished event: {events:?}"));
    assert_eq!(model.name, "tiny-copy");
    assert!(!model.embedded);
    let progress: Vec<u64> =
        events.iter().filter_map(|e| if let DownloadEvent::Progress { bytes, .. } = e { Some(*bytes) } else { None }).collect();
    assert!(!progress.is_empty());
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "progress goes forward: {progress:?}");
    assert!(state.list_models().await.expect("models").iter().any(|m| m.name == "tiny-copy"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_the_partial_file_and_resume_continues_with_a_range_request() {
    // ~64 KiB per 20 ms: the 8.9 MB weights take seconds, so a pause lands mid-file.
    let server = http_server::serve(model_dir("tiny-ar"), Some((64 << 10, Duration::from_millis(20)))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = CollectSink::<DownloadEvent>::default();
    let id = state
        .start_download(
            &server.base_url,
            "unmask/tiny-resume",
            &DownloadChoice::default(),
            None,
            Arc::new(sink.clone()),
        )
        .await
        .expect("start");
    wait_for(&sink, "weights progress", |ev| {
        ev.iter().any(|e| matches!(e, DownloadEvent::Progress { file, bytes, .. } if file == "model.safetensors" && *bytes > 0))
    })
    .await;
    state.pause_download(id).await.expect("pause");
    assert!(matches!(sink.events().last(), Some(DownloadEvent::Paused { download_id }) if *download_id == id));
    assert!(!finished(&sink.events()));
    let partial = state.store.partial_download_dir("unmask/tiny-resume", "main").expect("dir");
    assert!(partial.exists(), "partial files kept at {}", partial.display());
    assert!(state.pause_download(id).await.is_err(), "already paused");

    state.resume_download(id).await.expect("resume");
    wait_for(&sink, "the download to end", finished).await;
    let events = sink.events();
    assert!(events.iter().any(|e| matches!(e, DownloadEvent::Resumed { .. })));
    assert!(events.iter().any(|e| matches!(e, DownloadEvent::Finished { .. })), "{events:?}");
    let ranges = server.ranges.lock().expect("ranges").clone();
    assert!(ranges.iter().any(|r| r.starts_with("bytes=") && r != "bytes=0-"), "resume used a Range request: {ranges:?}");
    assert!(state.list_models().await.expect("models").iter().any(|m| m.name == "tiny-resume"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_discards_the_partial_download() {
    let server = http_server::serve(model_dir("tiny-ar"), Some((64 << 10, Duration::from_millis(20)))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = CollectSink::<DownloadEvent>::default();
    let id = state
        .start_download(
            &server.base_url,
            "unmask/tiny-cancel",
            &DownloadChoice::default(),
            None,
            Arc::new(sink.clone()),
        )
        .await
        .expect("start");
    wait_for(&sink, "progress", |ev| ev.iter().any(|e| matches!(e, DownloadEvent::Progress { bytes, .. } if *bytes > 0))).await;
    state.cancel_download(id).await.expect("cancel");
    assert!(matches!(sink.events().last(), Some(DownloadEvent::Cancelled { download_id }) if *download_id == id));
    let partial = state.store.partial_download_dir("unmask/tiny-cancel", "main").expect("dir");
    assert!(!partial.exists(), "{} removed", partial.display());
    assert!(!state.list_models().await.expect("models").iter().any(|m| m.name.contains("cancel")));
    assert!(state.resume_download(id).await.is_err(), "a cancelled download is gone");
    let err = state
        .start_download("ftp://x", "a/b", &DownloadChoice::default(), None, Arc::new(sink))
        .await
        .expect_err("bad URL");
    assert_eq!(err.kind, AppErrorKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chosen_revision_and_file_are_requested() {
    let server = http_server::serve(model_dir("tiny-draft"), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open");
    let sink = CollectSink::<DownloadEvent>::default();
    let at_v1 = DownloadChoice { revision: Some("v1"), file: None };
    state
        .start_download(&server.base_url, "unmask/tiny-rev", &at_v1, None, Arc::new(sink.clone()))
        .await
        .expect("start");
    wait_for(&sink, "the download to end", finished).await;
    let model = state.list_models().await.expect("models").into_iter().find(|m| m.name == "tiny-rev");
    let model = model.unwrap_or_else(|| panic!("not registered; events: {:?}", sink.events()));
    assert!(model.source.ends_with("unmask/tiny-rev@v1"), "{}", model.source);
    assert!(server.paths().iter().all(|p| p.starts_with("/unmask/tiny-rev/resolve/v1/")), "{:?}", server.paths());
    assert!(
        model.weights_bytes > 0 && model.weights_bytes < model.size_bytes,
        "weights are the safetensors: {model:?}"
    );
    assert!(model.kv_bytes_per_token > 0 && model.context_tokens > 0, "{model:?}");

    // One GGUF file: only that file is fetched (this server has none, so the download fails).
    let sink = CollectSink::<DownloadEvent>::default();
    let one = DownloadChoice { revision: None, file: Some("tiny-Q8_0.gguf") };
    state
        .start_download(&server.base_url, "unmask/tiny-gguf", &one, None, Arc::new(sink.clone()))
        .await
        .expect("start");
    wait_for(&sink, "the download to end", finished).await;
    assert!(
        matches!(sink.events().last(), Some(DownloadEvent::Failed { message, .. }) if message.contains("404")),
        "{:?}",
        sink.events()
    );
    let gguf: Vec<String> = server.paths().into_iter().filter(|p| p.contains("tiny-gguf")).collect();
    assert_eq!(gguf, vec!["/unmask/tiny-gguf/resolve/main/tiny-Q8_0.gguf".to_owned()]);
    let bad = DownloadChoice { revision: None, file: Some("model.safetensors") };
    let err =
        state.start_download(&server.base_url, "unmask/x", &bad, None, Arc::new(sink)).await.expect_err("not gguf");
    assert_eq!(err.kind, AppErrorKind::Invalid);
}
