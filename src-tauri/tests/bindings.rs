//! The committed `ui/src/lib/bindings.ts` must be what tauri-specta generates from this crate.
//! Set `UNMASK_UPDATE_BINDINGS=1` to rewrite it instead of failing.

#[test]
fn committed_bindings_match_the_generated_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = dir.path().join("bindings.ts");
    unmask_app_lib::bindings::export(&fresh).expect("export");
    let generated = std::fs::read_to_string(&fresh).expect("read generated");
    let committed_path = unmask_app_lib::bindings::default_path();
    if std::env::var_os("UNMASK_UPDATE_BINDINGS").is_some() {
        std::fs::write(&committed_path, &generated).expect("write bindings");
        return;
    }
    let committed = std::fs::read_to_string(&committed_path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo run -p unmask-app --bin export-bindings`", committed_path.display()));
    assert!(
        committed == generated,
        "{} is out of date; run `cargo run -p unmask-app --bin export-bindings` and commit it",
        committed_path.display()
    );
    // The contract's command names and shapes are in the file.
    for name in ["generate", "stop_generation", "start_download", "rerun_with_presets", "perfetto_json", "settings_schema"] {
        assert!(generated.contains(&format!("\"{name}\"")), "command {name} missing");
    }
    for ty in ["GenerateEvent", "DownloadEvent", "TimelineView", "RunDetail", "AppError", "ModelEntry"] {
        assert!(generated.contains(&format!("export type {ty}")), "type {ty} missing");
    }
}
