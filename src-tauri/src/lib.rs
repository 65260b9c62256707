//! Unmask's app (Tauri 2): chat with live denoising, profiler, model manager and comparisons,
//! over the embedded engine and store. Commands are thin wrappers ([`commands`]) over
//! [`state::AppState`]; types are exported to TypeScript by tauri-specta ([`bindings`]).

pub mod backends;
pub mod batcher;
pub mod bindings;
pub mod commands;
pub mod conversations;
pub mod downloads;
pub mod dto;
pub mod error;
pub mod fixtures;
pub mod generate;
pub mod models;
pub mod presets;
pub mod runs;
pub mod schema;
pub mod sink;
pub mod smoke;
pub mod state;
pub mod timeline;

pub use error::{AppError, AppErrorKind, AppResult};
pub use state::AppState;

use tauri::Manager;

/// Starts the app (desktop `main`, and the mobile entry point).
#[cfg_attr(mobile, tauri::mobile_entry_point)]
pub fn run() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .try_init();
    let specta = bindings::builder::<tauri::Wry>();
    let result = tauri::Builder::default()
        // Native file/folder picker for model import.
        .plugin(tauri_plugin_dialog::init())
        // Links in answers (`target="_blank"`, http(s)/mailto only) open in the system browser;
        // without it WebKitGTK drops new-window requests and a click does nothing.
        .plugin(tauri_plugin_opener::init())
        .invoke_handler(specta.invoke_handler())
        .setup(move |app| {
            specta.mount_events(app.handle());
            let data_dir = data_dir(app)?;
            let state = tauri::async_runtime::block_on(AppState::open(data_dir))?;
            app.manage(state.clone());
            if let Some(cfg) = smoke::SmokeConfig::from_env() {
                smoke::start(app.handle().clone(), state, cfg);
            }
            Ok(())
        })
        .run(tauri::generate_context!());
    if let Err(e) = result {
        tracing::error!("the app failed: {e}");
        std::process::exit(1);
    }
}

/// `$UNMASK_DATA_DIR`, else the store's platform folder; on Android/iOS (no such folder for a
/// native library) Tauri's app data folder.
fn data_dir(app: &tauri::App) -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    match unmask_store::default_data_dir() {
        Ok(d) => Ok(d),
        Err(_) => Ok(app.path().app_data_dir()?),
    }
}
