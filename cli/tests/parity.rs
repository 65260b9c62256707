//! The CLI and the app run one pipeline: the same request gives the same tokens and the same
//! recorded settings and backend, whichever front end ran it.

use std::process::Command;
use std::sync::Arc;

use unmask_app_lib::dto::{BackendChoice, DecodeSettings, GenerateRequest};
use unmask_app_lib::sink::CollectSink;
use unmask_app_lib::AppState;
use unmask_store::{Store, StoreError};

fn cli_run(data: &std::path::Path, prompt: &str, backend: &str) -> i64 {
    let out = Command::new(env!("CARGO_BIN_EXE_unmask"))
        .args(["--data-dir"])
        .arg(data)
        .args(["generate", prompt, "--json", "--no-live", "--backend", backend])
        // The app's settings form sends every one of these; the CLI gets them as flags.
        .args(["--gen-length", "32", "--block-length", "16", "--steps", "32", "--temperature", "0"])
        .args(["--remasking", "low-confidence", "--cache", "prefix", "--seed", "7", "--alg", "origin", "--cfg-scale", "0"])
        .output()
        .expect("run unmask");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["run_id"].as_i64().expect("run id")
}

async fn app_run(state: &AppState, prompt: &str, backend: BackendChoice) -> i64 {
    let settings = DecodeSettings {
        gen_length: 32,
        block_length: 16,
        steps: 32,
        seed: 7,
        cache: unmask_engine::decode::CacheMode::Prefix,
        ..DecodeSettings::default()
    };
    let req = GenerateRequest {
        conversation_id: None,
        model_id: None,
        prompt: prompt.into(),
        settings,
        overridden: None,
        backend,
        replace_from_message_id: None,
        system_prompt: None,
        draft_model_id: None,
    };
    state.generate(req, Arc::new(CollectSink::default())).await.expect("app generate").id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_and_app_record_the_same_run_for_the_same_request() -> Result<(), StoreError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = AppState::open(dir.path()).await.expect("open app state");
    for (prompt, cli_backend, app_backend) in [
        ("What is 12+7?", "cpu", BackendChoice::cpu()),
        ("Reverse: fig pear", "vnpu:sm8650", BackendChoice::vnpu("sm8650")),
    ] {
        let app_id = app_run(&state, prompt, app_backend).await;
        let cli_id = cli_run(dir.path(), prompt, cli_backend);
        let store = Store::open(dir.path()).await?;
        let (a, c) = (store.run_detail(app_id).await?, store.run_detail(cli_id).await?);
        assert_eq!(a.settings, c.settings, "recorded settings differ for {prompt:?}");
        assert!(a.settings.early_stop_eos, "both front ends stop at EOS by default");
        assert_eq!(a.backend, c.backend);
        assert_eq!(a.backend.to_string(), cli_backend);
        assert_eq!(a.output_tokens, c.output_tokens, "tokens differ for {prompt:?}");
        assert_eq!(a.output.as_deref().map(str::trim), c.output.as_deref().map(str::trim));
        assert_eq!(a.metrics.forwards, c.metrics.forwards);
        assert_eq!(a.metrics.tokens_per_forward, c.metrics.tokens_per_forward);
    }
    Ok(())
}
