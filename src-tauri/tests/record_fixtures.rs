//! Records real step streams of the embedded model for the UI's tests:
//! `ui/tests/fixtures/reference-cpu.json` and `spec-revision-vnpu.json`, each
//! `{ request, events: GenerateEvent[], detail: RunDetail }`, plus `recorded-from.json` naming the
//! model they came from (checked by `tests/fixtures_fresh.rs`, so CI fails when the embedded model
//! changes and the fixtures were not re-recorded), and `app-data.json`: the settings schema, the
//! embedded model's entry and the device list that the UI's e2e mock serves.
//!
//! Ignored in normal runs (it rewrites committed files, and wall times differ per run):
//! `cargo test -p unmask-app --test record_fixtures -- --ignored` (`UNMASK_FIXTURES_DIR` overrides
//! the output folder).

use std::path::PathBuf;
use std::sync::Arc;

use unmask_app_lib::dto::{BackendChoice, DecodeSettings, GenerateEvent, GenerateRequest};
use unmask_app_lib::sink::CollectSink;
use unmask_app_lib::AppState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites ui/tests/fixtures; run explicitly"]
async fn record_fixtures() -> anyhow::Result<()> {
    let out = std::env::var_os("UNMASK_FIXTURES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ui/tests/fixtures"));
    std::fs::create_dir_all(&out)?;
    let data = tempfile::tempdir()?;
    let state = AppState::open(data.path()).await.map_err(|e| anyhow::anyhow!(e.message))?;
    let base = DecodeSettings { gen_length: 32, block_length: 16, steps: 32, ..DecodeSettings::default() };
    let cases = [
        ("reference-cpu.json", "What is 2+3?", base.clone(), BackendChoice::cpu()),
        (
            "spec-revision-vnpu.json",
            "Reverse: pear apple fig",
            DecodeSettings { speculative: true, revision: true, ..base },
            BackendChoice::vnpu("sm8750"),
        ),
    ];
    let embedded = state
        .list_models()
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?
        .into_iter()
        .find(|m| m.embedded)
        .ok_or_else(|| anyhow::anyhow!("the embedded model is not registered"))?;
    let from = serde_json::json!({ "model": embedded.name, "sha256": embedded.sha256 });
    std::fs::write(out.join("recorded-from.json"), serde_json::to_string_pretty(&from)? + "\n")?;
    let info = state.app_info().await.map_err(|e| anyhow::anyhow!(e.message))?;
    let app_data = unmask_app_lib::fixtures::app_data(&embedded, &info.devices)?;
    std::fs::write(out.join(unmask_app_lib::fixtures::APP_DATA_FILE), serde_json::to_string_pretty(&app_data)? + "\n")?;
    for (file, prompt, settings, backend) in cases {
        let request = GenerateRequest {
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
        let sink = CollectSink::<GenerateEvent>::default();
        let summary = state.generate(request.clone(), Arc::new(sink.clone())).await.map_err(|e| anyhow::anyhow!(e.message))?;
        assert_eq!(summary.status, unmask_app_lib::dto::RunStatus::Completed);
        let detail = state.get_run(summary.id).await.map_err(|e| anyhow::anyhow!(e.message))?;
        let doc = serde_json::json!({ "request": request, "events": sink.events(), "detail": detail });
        let path = out.join(file);
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {} ({} events, output {:?})", path.display(), sink.events().len(), summary.output);
    }
    Ok(())
}
