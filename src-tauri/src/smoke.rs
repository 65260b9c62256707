//! Smoke mode for the real-window test (`scripts/app-smoke.sh`): with `UNMASK_SMOKE_SCREENSHOT`
//! set, the app generates once with the embedded model after the window is up, writes the run's
//! summary next to the screenshot, shows the answer in the window, takes a screenshot of the X
//! display (ImageMagick `import -window root`) and exits 0, or 1 when the run did not complete.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tauri::{AppHandle, Manager};

use crate::dto::{BackendChoice, DecodeSettings, GenerateEvent, GenerateRequest, RunStatus};
use crate::sink::CollectSink;
use crate::state::AppState;

/// Environment variable: where to write the screenshot (turns smoke mode on).
pub const SCREENSHOT_ENV: &str = "UNMASK_SMOKE_SCREENSHOT";

/// Smoke-mode settings from the environment.
#[derive(Debug, Clone)]
pub struct SmokeConfig {
    pub screenshot: PathBuf,
    /// Time for the web view to paint before and after the run.
    pub settle: Duration,
}

impl SmokeConfig {
    /// `Some` when `UNMASK_SMOKE_SCREENSHOT` is set.
    pub fn from_env() -> Option<Self> {
        let screenshot = std::env::var_os(SCREENSHOT_ENV).filter(|s| !s.is_empty()).map(PathBuf::from)?;
        let settle = std::env::var("UNMASK_SMOKE_SETTLE_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
        Some(SmokeConfig { screenshot, settle: Duration::from_millis(settle) })
    }
}

/// Runs the smoke sequence on the async runtime; exits the process when done.
pub fn start(app: AppHandle, state: Arc<AppState>, cfg: SmokeConfig) {
    tauri::async_runtime::spawn(async move {
        let code = match run(&app, &state, &cfg).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!("smoke run failed: {e}");
                eprintln!("smoke run failed: {e}");
                1
            }
        };
        app.exit(code);
        // `exit` asks the event loop to stop; make sure the process ends even if it hangs.
        tokio::time::sleep(Duration::from_secs(10)).await;
        std::process::exit(code);
    });
}

async fn run(app: &AppHandle, state: &Arc<AppState>, cfg: &SmokeConfig) -> anyhow::Result<()> {
    tokio::time::sleep(cfg.settle).await;
    let sink = CollectSink::<GenerateEvent>::default();
    let request = GenerateRequest {
        conversation_id: None,
        model_id: None,
        prompt: "What is 2+3?".into(),
        settings: DecodeSettings { gen_length: 32, block_length: 16, steps: 32, ..DecodeSettings::default() },
        overridden: None,
        backend: BackendChoice::cpu(),
        replace_from_message_id: None,
        system_prompt: None,
        draft_model_id: None,
    };
    let summary = state.generate(request, Arc::new(sink.clone())).await.map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let events = sink.events();
    let frames: usize =
        events.iter().map(|e| if let GenerateEvent::Frames { frames } = e { frames.len() } else { 0 }).sum();
    if let Some(dir) = cfg.screenshot.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let report = serde_json::json!({ "summary": summary, "events": events.len(), "frames": frames });
    std::fs::write(cfg.screenshot.with_extension("json"), serde_json::to_vec_pretty(&report)?)?;
    if let Some(w) = app.get_webview_window("main") {
        let text = serde_json::to_string(&format!("smoke run {} ({:?}, {frames} frames): {}", summary.id, summary.status, summary.output))?;
        let js = format!(
            "(function(){{var p=document.createElement('pre');p.id='unmask-smoke';p.style.cssText='position:fixed;left:8px;bottom:8px;right:8px;padding:8px;background:#fffbe6;color:#222;font:14px monospace;white-space:pre-wrap;z-index:99999';p.textContent={text};document.body.appendChild(p);}})();"
        );
        let _ = w.eval(&js);
    }
    tokio::time::sleep(cfg.settle).await;
    let shot = tokio::process::Command::new("import")
        .args(["-window", "root"])
        .arg(&cfg.screenshot)
        .status()
        .await;
    match shot {
        Ok(s) if s.success() => {}
        Ok(s) => anyhow::bail!("`import -window root` exited with {s}"),
        Err(e) => anyhow::bail!("running ImageMagick `import`: {e}"),
    }
    if summary.status != RunStatus::Completed {
        anyhow::bail!("the run ended as {:?}", summary.status);
    }
    Ok(())
}
