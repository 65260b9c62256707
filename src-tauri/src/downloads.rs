//! Model downloads with progress, pause, resume and cancel on top of the store's resumable
//! downloader: pause cancels the transfer but keeps the partial files, resume starts it again
//! (the store continues with `Range` requests), cancel also discards the partial files.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use unmask_store::{CancellationToken, DownloadConfig, DownloadRequest, StoreError};

use crate::dto::DownloadEvent;
use crate::error::{AppError, AppResult};
use crate::sink::EventSink;
use crate::state::AppState;

/// Shared sink of a download's events.
pub type DownloadSink = Arc<dyn EventSink<DownloadEvent>>;

/// Revision downloaded when none is given.
pub const DEFAULT_REVISION: &str = "main";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    Paused,
    Cancelled,
}

struct Job {
    request: DownloadRequest,
    config: DownloadConfig,
    sink: DownloadSink,
    token: CancellationToken,
    phase: Phase,
    /// Finished tasks (so resume waits until the paused one has let go of its lock).
    task: Option<tokio::task::JoinHandle<()>>,
}

/// What to fetch from a repository: which revision, and the whole model or one GGUF file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DownloadChoice<'a> {
    /// Branch, tag or commit; `None` or empty = `main`.
    pub revision: Option<&'a str>,
    /// One `.gguf` file of the repository; `None` or empty = the whole HF-layout model.
    pub file: Option<&'a str>,
}

impl DownloadChoice<'_> {
    /// The store's request for `repo`. Errors: a file that is not a `.gguf`, unsafe names.
    pub fn request(&self, repo: &str) -> AppResult<DownloadRequest> {
        let revision = self.revision.map(str::trim).filter(|r| !r.is_empty()).unwrap_or(DEFAULT_REVISION);
        // One path component: a branch, tag or commit, never a path out of the staging folder.
        if revision.contains(['/', '\\']) || revision.starts_with('.') {
            return Err(AppError::invalid(format!("`{revision}` is not a branch, tag or commit name")));
        }
        match self.file.map(str::trim).filter(|f| !f.is_empty()) {
            None => Ok(DownloadRequest::hf(repo, revision)),
            Some(file) => {
                if !file.to_ascii_lowercase().ends_with(".gguf") {
                    return Err(AppError::invalid(format!(
                        "`{file}`: a single file must be a .gguf; leave it empty for the whole model"
                    )));
                }
                unmask_store::safe_relative_path(file).map_err(AppError::from)?;
                Ok(DownloadRequest::gguf(repo, revision, file))
            }
        }
    }
}

/// Downloads of this session by id.
#[derive(Default)]
pub struct Downloads {
    next: AtomicU32,
    jobs: Mutex<HashMap<u32, Job>>,
}

impl Downloads {
    fn lock(&self) -> AppResult<std::sync::MutexGuard<'_, HashMap<u32, Job>>> {
        self.jobs.lock().map_err(|_| AppError::internal("download table poisoned"))
    }
}

impl AppState {
    /// Starts downloading `repo` at `revision` (default `main`) from `base_url` (a Hugging Face
    /// compatible endpoint): the whole HF-layout model, or only `file` (one `.gguf` of the
    /// repository). Events go to `sink`. Returns the download id for pause / resume / cancel.
    pub async fn start_download(
        self: &Arc<Self>,
        base_url: &str,
        repo: &str,
        choice: &DownloadChoice<'_>,
        name: Option<&str>,
        sink: DownloadSink,
    ) -> AppResult<u32> {
        let base_url = base_url.trim();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(AppError::invalid(format!("`{base_url}` is not an http(s) URL")));
        }
        let repo = repo.trim();
        unmask_store::safe_relative_path(repo).map_err(AppError::from)?;
        let mut request = choice.request(repo)?;
        request.name = name.map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned);
        let config = DownloadConfig { endpoint: base_url.to_owned(), ..DownloadConfig::default() };
        let id = self.downloads.next.fetch_add(1, Ordering::SeqCst) + 1;
        let job = Job { request, config, sink, token: CancellationToken::new(), phase: Phase::Running, task: None };
        self.downloads.lock()?.insert(id, job);
        self.spawn_download(id)?;
        Ok(id)
    }

    fn spawn_download(self: &Arc<Self>, id: u32) -> AppResult<()> {
        let (request, config, sink, token) = {
            let jobs = self.downloads.lock()?;
            let job = jobs.get(&id).ok_or_else(|| AppError::not_found(format!("download {id} not found")))?;
            (job.request.clone(), job.config.clone(), job.sink.clone(), job.token.clone())
        };
        let me = self.clone();
        let task = tokio::spawn(async move {
            let progress_sink = sink.clone();
            let mut on_event = move |ev: unmask_store::DownloadEvent| {
                if let unmask_store::DownloadEvent::Progress { file, file_done, file_total, done, total } = ev {
                    let _ = progress_sink.send(DownloadEvent::Progress {
                        download_id: id,
                        file,
                        bytes: done,
                        total_bytes: total,
                        file_bytes: file_done,
                        file_total_bytes: file_total,
                    });
                }
            };
            let result = me.store.download_model(&request, &config, &token, &mut on_event).await;
            let phase = me.downloads.lock().ok().and_then(|j| j.get(&id).map(|j| j.phase));
            match (result, phase) {
                (Ok(model), _) => {
                    let event = match me.model_entry(&model).await {
                        Ok(entry) => DownloadEvent::Finished { download_id: id, model: entry },
                        Err(e) => DownloadEvent::Failed { download_id: id, message: e.message },
                    };
                    let _ = sink.send(event);
                    if let Ok(mut jobs) = me.downloads.lock() {
                        jobs.remove(&id);
                    }
                }
                // Paused or cancelled: the command that did it reports it.
                (Err(StoreError::Cancelled), Some(Phase::Paused | Phase::Cancelled)) => {}
                (Err(e), _) => {
                    let _ = sink.send(DownloadEvent::Failed { download_id: id, message: AppError::from(e).message });
                    if let Ok(mut jobs) = me.downloads.lock() {
                        jobs.remove(&id);
                    }
                }
            }
        });
        if let Some(job) = self.downloads.lock()?.get_mut(&id) {
            job.task = Some(task);
        }
        Ok(())
    }

    /// Stops the transfer, keeping the partial files for [`resume_download`](Self::resume_download).
    pub async fn pause_download(&self, id: u32) -> AppResult<()> {
        let (task, sink) = {
            let mut jobs = self.downloads.lock()?;
            let job = jobs.get_mut(&id).ok_or_else(|| AppError::not_found(format!("download {id} not found")))?;
            if job.phase != Phase::Running {
                return Err(AppError::invalid(format!("download {id} is not running")));
            }
            job.phase = Phase::Paused;
            job.token.cancel();
            (job.task.take(), job.sink.clone())
        };
        if let Some(t) = task {
            let _ = t.await;
        }
        let _ = sink.send(DownloadEvent::Paused { download_id: id });
        Ok(())
    }

    /// Continues a paused download where it stopped.
    pub async fn resume_download(self: &Arc<Self>, id: u32) -> AppResult<()> {
        let sink = {
            let mut jobs = self.downloads.lock()?;
            let job = jobs.get_mut(&id).ok_or_else(|| AppError::not_found(format!("download {id} not found")))?;
            if job.phase != Phase::Paused {
                return Err(AppError::invalid(format!("download {id} is not paused")));
            }
            job.phase = Phase::Running;
            job.token = CancellationToken::new();
            job.sink.clone()
        };
        let _ = sink.send(DownloadEvent::Resumed { download_id: id });
        self.spawn_download(id)
    }

    /// Stops a download and deletes its partial files.
    pub async fn cancel_download(&self, id: u32) -> AppResult<()> {
        let (task, sink, request) = {
            let mut jobs = self.downloads.lock()?;
            let job = jobs.get_mut(&id).ok_or_else(|| AppError::not_found(format!("download {id} not found")))?;
            job.phase = Phase::Cancelled;
            job.token.cancel();
            (job.task.take(), job.sink.clone(), job.request.clone())
        };
        if let Some(t) = task {
            let _ = t.await;
        }
        self.store.discard_partial_download(&request.repo, &request.revision).await?;
        self.downloads.lock()?.remove(&id);
        let _ = sink.send(DownloadEvent::Cancelled { download_id: id });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_defaults_to_the_whole_model_at_main() {
        let r = DownloadChoice::default().request("o/m").expect("request");
        assert_eq!((r.revision.as_str(), r.files), ("main", None));
        let r = DownloadChoice { revision: Some("  "), file: Some("") }.request("o/m").expect("request");
        assert_eq!((r.revision.as_str(), r.files), ("main", None));
    }

    #[test]
    fn choice_takes_a_revision_and_one_gguf_file() {
        let r =
            DownloadChoice { revision: Some("v1.0"), file: Some("gguf/m-Q4_K.gguf") }.request("o/m").expect("request");
        assert_eq!(r.revision, "v1.0");
        let files = r.files.expect("one file");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "gguf/m-Q4_K.gguf");
    }

    #[test]
    fn choice_refuses_other_files_and_path_like_revisions() {
        let err = DownloadChoice { file: Some("model.safetensors"), ..Default::default() }
            .request("o/m")
            .expect_err("not gguf");
        assert!(err.message.contains(".gguf"), "{}", err.message);
        assert!(DownloadChoice { file: Some("../x.gguf"), ..Default::default() }.request("o/m").is_err());
        assert!(DownloadChoice { revision: Some("a/b"), ..Default::default() }.request("o/m").is_err());
        assert!(DownloadChoice { revision: Some(".."), ..Default::default() }.request("o/m").is_err());
    }
}
