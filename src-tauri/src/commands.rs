//! The Tauri commands: thin wrappers that take the shared [`AppState`] and forward to its
//! methods (all logic and its tests live there).

use std::path::PathBuf;
use std::sync::Arc;

use tauri::ipc::Channel;
use tauri::State;

use crate::dto::*;
use crate::error::AppError;
use crate::state::AppState;

type St<'a> = State<'a, Arc<AppState>>;

/// Version, data folder, hardware, default model, vNPU devices.
#[tauri::command]
#[specta::specta]
pub async fn app_info(state: St<'_>) -> Result<AppInfo, AppError> {
    state.app_info().await
}

/// Every registered model.
#[tauri::command]
#[specta::specta]
pub async fn list_models(state: St<'_>) -> Result<Vec<ModelEntry>, AppError> {
    state.list_models().await
}

/// Registers a model folder or `.gguf` file from disk.
#[tauri::command]
#[specta::specta]
pub async fn import_model(state: St<'_>, path: String, name: Option<String>) -> Result<ModelEntry, AppError> {
    state.import_model(&path, name.as_deref()).await
}

/// Removes a model.
#[tauri::command]
#[specta::specta]
pub async fn delete_model(state: St<'_>, id: i64) -> Result<(), AppError> {
    state.delete_model(id).await
}

/// A model's runs.
#[tauri::command]
#[specta::specta]
pub async fn model_runs(state: St<'_>, id: i64) -> Result<Vec<RunSummary>, AppError> {
    state.model_runs(id).await
}

/// Starts a download of `repo` at `revision` (null = `main`): the whole model, or only `file`
/// (one `.gguf` of the repository); returns its id.
#[tauri::command]
#[specta::specta]
pub async fn start_download(
    state: St<'_>,
    base_url: String,
    repo: String,
    revision: Option<String>,
    file: Option<String>,
    name: Option<String>,
    on_event: Channel<DownloadEvent>,
) -> Result<u32, AppError> {
    let choice = crate::downloads::DownloadChoice { revision: revision.as_deref(), file: file.as_deref() };
    state.inner().start_download(&base_url, &repo, &choice, name.as_deref(), Arc::new(on_event)).await
}

/// Environment variable that, in debug builds, supplies the path a file picker would return
/// (native dialogs cannot be driven over WebDriver).
pub const TEST_PICK_ENV: &str = "UNMASK_E2E_PICK";

/// Debug builds: the path in `UNMASK_E2E_PICK`, which the UI takes instead of opening the
/// native picker. Release builds: always null.
#[tauri::command]
#[specta::specta]
pub async fn test_picked_path() -> Result<Option<String>, AppError> {
    if cfg!(debug_assertions) {
        Ok(std::env::var(TEST_PICK_ENV).ok().filter(|p| !p.is_empty()))
    } else {
        Ok(None)
    }
}

/// Pauses a download (partial files kept).
#[tauri::command]
#[specta::specta]
pub async fn pause_download(state: St<'_>, id: u32) -> Result<(), AppError> {
    state.pause_download(id).await
}

/// Resumes a paused download.
#[tauri::command]
#[specta::specta]
pub async fn resume_download(state: St<'_>, id: u32) -> Result<(), AppError> {
    state.inner().resume_download(id).await
}

/// Cancels a download (partial files deleted).
#[tauri::command]
#[specta::specta]
pub async fn cancel_download(state: St<'_>, id: u32) -> Result<(), AppError> {
    state.cancel_download(id).await
}

/// Every decoding parameter with its explanation.
#[tauri::command]
#[specta::specta]
pub async fn settings_schema() -> Result<Vec<SettingInfo>, AppError> {
    Ok(crate::schema::settings_schema())
}

/// Built-in and user presets.
#[tauri::command]
#[specta::specta]
pub async fn list_presets(state: St<'_>) -> Result<Vec<Preset>, AppError> {
    state.list_presets().await
}

/// Saves a user preset.
#[tauri::command]
#[specta::specta]
pub async fn save_preset(
    state: St<'_>,
    name: String,
    settings: DecodeSettings,
    backend: BackendChoice,
) -> Result<Preset, AppError> {
    state.save_preset(&name, &settings, &backend).await
}

/// Deletes a user preset.
#[tauri::command]
#[specta::specta]
pub async fn delete_preset(state: St<'_>, id: i64) -> Result<(), AppError> {
    state.delete_preset(id).await
}

/// Conversations, newest first.
#[tauri::command]
#[specta::specta]
pub async fn list_conversations(state: St<'_>) -> Result<Vec<Conversation>, AppError> {
    state.list_conversations().await
}

/// A conversation with its messages.
#[tauri::command]
#[specta::specta]
pub async fn get_conversation(state: St<'_>, id: i64) -> Result<ConversationDetail, AppError> {
    state.get_conversation(id).await
}

/// Deletes a conversation.
#[tauri::command]
#[specta::specta]
pub async fn delete_conversation(state: St<'_>, id: i64) -> Result<(), AppError> {
    state.delete_conversation(id).await
}

/// Renames a conversation.
#[tauri::command]
#[specta::specta]
pub async fn rename_conversation(state: St<'_>, id: i64, title: String) -> Result<Conversation, AppError> {
    state.rename_conversation(id, &title).await
}

/// Sets or clears the system prompt of a conversation.
#[tauri::command]
#[specta::specta]
pub async fn set_system_prompt(
    state: St<'_>,
    id: i64,
    system_prompt: Option<String>,
) -> Result<Conversation, AppError> {
    state.set_system_prompt(id, system_prompt.as_deref()).await
}

/// Conversations whose title or messages contain `query`, newest first.
#[tauri::command]
#[specta::specta]
pub async fn search_conversations(state: St<'_>, query: String) -> Result<Vec<Conversation>, AppError> {
    state.search_conversations(&query).await
}

/// One chat turn, streamed through `on_event`; resolves when the run ends.
#[tauri::command]
#[specta::specta]
pub async fn generate(
    state: St<'_>,
    request: GenerateRequest,
    on_event: Channel<GenerateEvent>,
) -> Result<RunSummary, AppError> {
    state.generate(request, Arc::new(on_event)).await
}

/// Stops a running generation.
#[tauri::command]
#[specta::specta]
pub async fn stop_generation(state: St<'_>, run_id: i64) -> Result<(), AppError> {
    state.stop_generation(run_id)
}

/// The latest runs.
#[tauri::command]
#[specta::specta]
pub async fn list_runs(state: St<'_>, model_id: Option<i64>, limit: u32) -> Result<Vec<RunSummary>, AppError> {
    state.list_runs(model_id, limit).await
}

/// One run with frames and timeline.
#[tauri::command]
#[specta::specta]
pub async fn get_run(state: St<'_>, id: i64) -> Result<RunDetail, AppError> {
    state.get_run(id).await
}

/// Several runs side by side.
#[tauri::command]
#[specta::specta]
pub async fn compare_runs(state: St<'_>, ids: Vec<i64>) -> Result<Vec<RunDetail>, AppError> {
    state.compare_runs(&ids).await
}

/// Writes a run's Perfetto JSON to `path`; returns the bytes written.
#[tauri::command]
#[specta::specta]
pub async fn export_perfetto(state: St<'_>, run_id: i64, path: String) -> Result<u64, AppError> {
    state.export_perfetto(run_id, &PathBuf::from(path)).await
}

/// A run's Perfetto JSON as a string (browser download in the UI).
#[tauri::command]
#[specta::specta]
pub async fn perfetto_json(state: St<'_>, run_id: i64) -> Result<String, AppError> {
    state.perfetto_json(run_id).await
}

/// Runs one prompt once per preset.
#[tauri::command]
#[specta::specta]
pub async fn rerun_with_presets(
    state: St<'_>,
    prompt: String,
    model_id: Option<i64>,
    preset_ids: Vec<i64>,
) -> Result<Vec<RunSummary>, AppError> {
    state.rerun_with_presets(&prompt, model_id, &preset_ids).await
}
