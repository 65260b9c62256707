//! The UI's recorded fixtures (`ui/tests/fixtures/`) must come from the embedded model as it is now:
//! when the model's weights change, this fails until the fixtures are re-recorded with
//! `cargo test -p unmask-app --test record_fixtures -- --ignored`, so the UI tests and the committed
//! screenshots never show answers the model no longer gives; the same holds for the settings schema,
//! model entry and devices that the e2e mock serves (`app-data.json`).

use std::path::PathBuf;

use unmask_app_lib::AppState;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ui/tests/fixtures")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixtures_were_recorded_from_the_current_embedded_model() -> anyhow::Result<()> {
    let rerecord = "re-record them: cargo test -p unmask-app --test record_fixtures -- --ignored";
    let from_path = fixtures_dir().join("recorded-from.json");
    let from: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&from_path).map_err(|e| anyhow::anyhow!("{}: {e}; {rerecord}", from_path.display()))?,
    )?;
    let data = tempfile::tempdir()?;
    let state = AppState::open(data.path()).await.map_err(|e| anyhow::anyhow!(e.message))?;
    let models = state.list_models().await.map_err(|e| anyhow::anyhow!(e.message))?;
    let embedded = models.iter().find(|m| m.embedded).ok_or_else(|| anyhow::anyhow!("no embedded model registered"))?;
    assert_eq!(from["model"], embedded.name.as_str(), "fixtures were recorded from another model; {rerecord}");
    assert_eq!(
        from["sha256"],
        embedded.sha256.as_str(),
        "the embedded model {} changed since ui/tests/fixtures were recorded; {rerecord}",
        embedded.name
    );
    // The e2e mock serves this schema, model entry and device list: they must be what the app has now.
    let data_path = fixtures_dir().join(unmask_app_lib::fixtures::APP_DATA_FILE);
    let committed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&data_path).map_err(|e| anyhow::anyhow!("{}: {e}; {rerecord}", data_path.display()))?,
    )?;
    let info = state.app_info().await.map_err(|e| anyhow::anyhow!(e.message))?;
    let current = unmask_app_lib::fixtures::app_data(embedded, &info.devices)?;
    for key in ["schema", "models", "devices"] {
        assert_eq!(committed[key], current[key], "{}: `{key}` is out of date; {rerecord}", data_path.display());
    }
    // Every recording names that model in its run summary.
    for entry in std::fs::read_dir(fixtures_dir())? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") || path == from_path || path == data_path {
            continue;
        }
        let run: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        assert_eq!(
            run["detail"]["summary"]["modelName"],
            embedded.name.as_str(),
            "{} was recorded from another model; {rerecord}",
            path.display()
        );
    }
    Ok(())
}
