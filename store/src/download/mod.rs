//! Model downloads from a Hugging Face-style layout, `{endpoint}/{repo}/resolve/{revision}/{file}`,
//! into `models/.downloads/OWNER--NAME@REVISION/` and, once every file is verified and the engine
//! accepts the model, atomically into `models/NAME/`. Interrupted or cancelled downloads resume
//! on the next call with the same repo and revision.

mod fetch;

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::{Result, StoreError};
use crate::hashing;
use crate::import::{inspect_model, Validation};
use crate::models::{ModelFile, ModelFormat, ModelRecord, NewModel};
use crate::paths::{self, DOWNLOADS_DIR, MODELS_DIR};
use crate::Store;
use fetch::{fetch_file, Expected, FetchError, Progress};

/// Environment variable naming the Hub endpoint (default `https://huggingface.co`).
pub const ENDPOINT_ENV: &str = "UNMASK_HF_ENDPOINT";
/// Environment variable holding a Hub access token (sent only to the endpoint's host).
pub const TOKEN_ENV: &str = "HF_TOKEN";

/// Knobs of the downloader.
#[derive(Debug, Clone, PartialEq)]
pub struct DownloadConfig {
    /// Base URL, e.g. `https://huggingface.co` or a mirror.
    pub endpoint: String,
    /// Bearer token for the endpoint (gated repos).
    pub token: Option<String>,
    /// Retries per file after a failure that made no progress (network errors, 5xx, stalls).
    pub max_retries: u32,
    /// First retry delay; doubles per retry up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// A response that delivers no bytes for this long is abandoned and retried.
    pub stall_timeout: Duration,
    pub connect_timeout: Duration,
    /// Minimum time between progress events of one file (the first and last are always sent).
    pub progress_interval: Duration,
    /// How the engine checks the downloaded model before it is registered.
    pub validation: Validation,
}

impl Default for DownloadConfig {
    /// Reads `UNMASK_HF_ENDPOINT` and `HF_TOKEN`; 10 retries with backoff 2 s → 60 s; 30 s stall
    /// timeout; progress at most every 250 ms.
    fn default() -> Self {
        DownloadConfig {
            endpoint: std::env::var(ENDPOINT_ENV)
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "https://huggingface.co".into()),
            token: std::env::var(TOKEN_ENV).ok().filter(|s| !s.is_empty()),
            max_retries: 10,
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(60),
            stall_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(15),
            progress_interval: Duration::from_millis(250),
            validation: Validation::Full,
        }
    }
}

/// A file to fetch from the repo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFile {
    /// Path inside the repo (`model.safetensors`, `gguf/model-q8_0.gguf`).
    pub path: String,
    /// Expected size, if known (else taken from the server's headers).
    pub size: Option<u64>,
    /// Expected SHA-256 hex, if known (else the Hub's `X-Linked-Etag`/`ETag` when it is one).
    pub sha256: Option<String>,
    /// A missing (404) optional file is skipped.
    pub optional: bool,
}

impl RemoteFile {
    /// A required file with nothing known about it.
    pub fn required(path: &str) -> Self {
        RemoteFile { path: path.to_owned(), size: None, sha256: None, optional: false }
    }
    /// An optional file.
    pub fn optional(path: &str) -> Self {
        RemoteFile { optional: true, ..RemoteFile::required(path) }
    }
}

/// What to download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownloadRequest {
    /// Repo id, `owner/name`.
    pub repo: String,
    /// Branch, tag or commit (`main`).
    pub revision: String,
    /// Files to fetch; `None` = the standard HF layout (config.json, tokenizer.json, optional
    /// generation/tokenizer configs, and model.safetensors or the shards listed in
    /// model.safetensors.index.json). One `.gguf` file makes a GGUF model.
    pub files: Option<Vec<RemoteFile>>,
    /// Name to register under (default: the repo's name, or the GGUF file's stem).
    pub name: Option<String>,
}

impl DownloadRequest {
    /// An HF-format model repo, standard layout.
    pub fn hf(repo: &str, revision: &str) -> Self {
        DownloadRequest { repo: repo.to_owned(), revision: revision.to_owned(), files: None, name: None }
    }
    /// One GGUF file of a repo.
    pub fn gguf(repo: &str, revision: &str, file: &str) -> Self {
        DownloadRequest {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            files: Some(vec![RemoteFile::required(file)]),
            name: None,
        }
    }
}

/// Progress of a download, for a progress bar (serialises as `{"event": "progress", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum DownloadEvent {
    /// A file starts (or resumes from `resumed_from` bytes).
    FileStarted { file: String, total: Option<u64>, resumed_from: u64 },
    /// Bytes so far: of this file, and of the whole download (`total` when all sizes are known).
    Progress { file: String, file_done: u64, file_total: Option<u64>, done: u64, total: Option<u64> },
    /// A failure that will be retried after `delay_ms`.
    Retrying { file: String, attempt: u32, delay_ms: u64, reason: String },
    /// A file is complete and verified.
    FileDone { file: String, bytes: u64, sha256: String },
    /// An optional file the repo does not have.
    FileSkipped { file: String },
    /// All files are here; the engine is checking the model.
    Validating,
    /// The model is registered.
    Registered { model_id: i64 },
}

/// `{endpoint}/{repo}/resolve/{revision}/{file}`.
pub fn file_url(endpoint: &str, repo: &str, revision: &str, file: &str) -> String {
    format!("{}/{repo}/resolve/{revision}/{file}", endpoint.trim_end_matches('/'))
}

/// Holds the per-repo download lock; removes the lock file on drop, and the staging folder too
/// when nothing else is in it (a download that failed before its first byte leaves no trace).
struct StagingLock {
    dir: PathBuf,
    path: PathBuf,
    file: Option<File>,
}

impl StagingLock {
    fn take(dir: &Path) -> Result<StagingLock> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let path = dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(StagingLock { dir: dir.to_owned(), path, file: Some(file) }),
            Err(TryLockError::WouldBlock) => {
                Err(StoreError::InvalidRequest(format!("another download into {} is running", dir.display())))
            }
            Err(TryLockError::Error(e)) => Err(StoreError::io(&path, e)),
        }
    }
    fn release(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
            // Fails (harmlessly) unless the folder is empty.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

impl Drop for StagingLock {
    fn drop(&mut self) {
        self.release();
    }
}

fn check_revision(rev: &str) -> Result<()> {
    paths::safe_relative_path(rev).and_then(|p| {
        if p.components().count() == 1 {
            Ok(())
        } else {
            Err(StoreError::unsafe_name(rev, "revision must be one name or commit hash"))
        }
    })
}

impl Store {
    /// Folder of the partial download of `repo@revision`.
    pub fn partial_download_dir(&self, repo: &str, revision: &str) -> Result<PathBuf> {
        paths::check_repo_id(repo)?;
        check_revision(revision)?;
        Ok(self.models_dir().join(DOWNLOADS_DIR).join(format!("{}@{revision}", repo.replace('/', "--"))))
    }

    /// Deletes the partial download of `repo@revision` (refused while it is running).
    pub async fn discard_partial_download(&self, repo: &str, revision: &str) -> Result<bool> {
        let dir = self.partial_download_dir(repo, revision)?;
        if !dir.exists() {
            return Ok(false);
        }
        let lock = StagingLock::take(&dir)?;
        drop(lock);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(StoreError::io(&dir, e)),
        }
    }

    /// Downloads a model and registers it. Progress goes to `on_event`; `cancel` stops it,
    /// keeping the partial files so that calling again resumes. Errors: unsafe names, HTTP
    /// errors after retries, size/sha256 mismatches, a model the engine refuses, duplicates.
    pub async fn download_model(
        &self,
        req: &DownloadRequest,
        cfg: &DownloadConfig,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(DownloadEvent) + Send),
    ) -> Result<ModelRecord> {
        paths::check_repo_id(&req.repo)?;
        check_revision(&req.revision)?;
        let files = req.files.clone().unwrap_or_else(|| {
            vec![
                RemoteFile::required("config.json"),
                RemoteFile::optional("generation_config.json"),
                RemoteFile::required("tokenizer.json"),
                RemoteFile::optional("tokenizer_config.json"),
                RemoteFile::optional("special_tokens_map.json"),
                RemoteFile::optional("model.safetensors.index.json"),
            ]
        });
        let discover = req.files.is_none();
        for f in &files {
            check_remote_name(&f.path)?;
        }
        let ggufs: Vec<&RemoteFile> = files.iter().filter(|f| f.path.to_ascii_lowercase().ends_with(".gguf")).collect();
        let format = match ggufs.len() {
            0 => ModelFormat::Hf,
            1 if files.len() == 1 => ModelFormat::Gguf,
            _ => return Err(StoreError::InvalidRequest("a GGUF download takes exactly one .gguf file".into())),
        };
        let name = match &req.name {
            Some(n) => n.clone(),
            None => match format {
                ModelFormat::Gguf => {
                    let stem = Path::new(&ggufs[0].path).file_stem().map(|s| s.to_string_lossy().into_owned());
                    paths::model_name_from(&stem.unwrap_or_default())
                }
                ModelFormat::Hf => paths::model_name_from(req.repo.rsplit('/').next().unwrap_or(&req.repo)),
            },
        };
        paths::check_model_name(&name)?;
        if self.model_by_name(&name).await?.is_some() {
            return Err(StoreError::DuplicateName(name));
        }
        let target = self.models_dir().join(&name);
        if target.exists() {
            return Err(StoreError::InvalidRequest(format!(
                "{} already exists but is not a registered model; remove it or pick another name",
                target.display()
            )));
        }
        let staging = self.partial_download_dir(&req.repo, &req.revision)?;
        let mut lock = StagingLock::take(&staging)?;

        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(cfg.connect_timeout)
            .user_agent(concat!("unmask/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| StoreError::Internal(format!("HTTP client: {e}")))?;
        let total = files.iter().map(|f| f.size).sum::<Option<u64>>().filter(|_| !discover);
        let mut queue: std::collections::VecDeque<RemoteFile> = files.into();
        let mut done_files: Vec<ModelFile> = Vec::new();
        let mut done_bytes = 0u64;
        let mut saw_index = false;
        while let Some(f) = queue.pop_front() {
            let rel = paths::safe_relative_path(&f.path)?;
            let dest = staging.join(&rel);
            let url = file_url(&cfg.endpoint, &req.repo, &req.revision, &f.path);
            let expected = Expected { size: f.size, sha256: f.sha256.clone() };
            let got = if dest.exists() {
                // Finished by an earlier call: verify again rather than trust it.
                let d = dest.clone();
                let (size, sha256) = tokio::task::spawn_blocking(move || hashing::hash_file(&d, None, |_| {}))
                    .await
                    .map_err(|e| StoreError::Internal(format!("hash task: {e}")))??;
                let size_ok = f.size.is_none_or(|s| s == size);
                let sha_ok = f.sha256.as_deref().is_none_or(|s| s.eq_ignore_ascii_case(&sha256));
                if size_ok && sha_ok {
                    on_event(DownloadEvent::FileDone { file: f.path.clone(), bytes: size, sha256: sha256.clone() });
                    Ok(fetch::Fetched { size, sha256 })
                } else {
                    std::fs::remove_file(&dest).map_err(|e| StoreError::io(&dest, e))?;
                    let mut progress = Progress { emit: on_event, done_before: done_bytes, total };
                    fetch_file(&client, cfg, cancel, &f.path, &url, &dest, &expected, &mut progress).await
                }
            } else {
                let mut progress = Progress { emit: on_event, done_before: done_bytes, total };
                fetch_file(&client, cfg, cancel, &f.path, &url, &dest, &expected, &mut progress).await
            };
            match got {
                Ok(got) => {
                    done_bytes += got.size;
                    done_files.push(ModelFile {
                        rel_path: paths::to_stored(&rel),
                        size_bytes: got.size,
                        sha256: got.sha256,
                    });
                    if discover && f.path == "model.safetensors.index.json" {
                        saw_index = true;
                        for shard in shard_names(&dest)? {
                            queue.push_back(RemoteFile::required(&shard));
                        }
                    }
                }
                Err(FetchError::NotFound) if f.optional => {
                    on_event(DownloadEvent::FileSkipped { file: f.path.clone() })
                }
                Err(FetchError::NotFound) => {
                    return Err(StoreError::HttpStatus { url, status: 404 });
                }
                Err(FetchError::Other(e)) => return Err(e),
            }
            if discover
                && queue.is_empty()
                && !saw_index
                && !done_files.iter().any(|d| d.rel_path == "model.safetensors")
            {
                queue.push_back(RemoteFile::required("model.safetensors"));
            }
        }

        on_event(DownloadEvent::Validating);
        let model_rel = match format {
            ModelFormat::Gguf => done_files[0].rel_path.clone(),
            ModelFormat::Hf => String::new(),
        };
        let check_path =
            if model_rel.is_empty() { staging.clone() } else { paths::resolve_stored(&staging, &model_rel) };
        let validation = cfg.validation;
        let info = tokio::task::spawn_blocking(move || inspect_model(&check_path, validation))
            .await
            .map_err(|e| StoreError::Internal(format!("validation task: {e}")))??;
        let sha256 = match format {
            ModelFormat::Gguf => done_files[0].sha256.clone(),
            ModelFormat::Hf => hashing::manifest_hash(
                &done_files.iter().map(|f| (f.rel_path.clone(), f.sha256.clone())).collect::<Vec<_>>(),
            ),
        };
        if let Some(existing) = self.model_by_sha256(&sha256).await? {
            lock.release();
            let _ = std::fs::remove_dir_all(&staging);
            return Err(StoreError::DuplicateModel { existing: existing.name, sha256 });
        }
        lock.release();
        std::fs::rename(&staging, &target).map_err(|e| StoreError::io(&target, e))?;
        let stored = match format {
            ModelFormat::Gguf => format!("{MODELS_DIR}/{name}/{model_rel}"),
            ModelFormat::Hf => format!("{MODELS_DIR}/{name}"),
        };
        let new = NewModel {
            name: name.clone(),
            architecture: info.architecture,
            format,
            quantization: info.quantization,
            sha256,
            source: format!("hf:{}/{}@{}", cfg.endpoint.trim_end_matches('/'), req.repo, req.revision),
            path: stored,
            in_place: false,
            config: serde_json::to_value(&info.config).map_err(|e| StoreError::Internal(e.to_string()))?,
            files: done_files,
        };
        match self.insert_model(&new).await {
            Ok(rec) => {
                on_event(DownloadEvent::Registered { model_id: rec.id });
                Ok(rec)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&target);
                Err(e)
            }
        }
    }
}

/// Remote names must be safe paths and must not collide with our own bookkeeping files.
fn check_remote_name(path: &str) -> Result<()> {
    paths::safe_relative_path(path)?;
    if path.ends_with(".part") || path.ends_with(".part.json") {
        return Err(StoreError::unsafe_name(path, "names ending in .part/.part.json are reserved"));
    }
    Ok(())
}

/// Shard file names of a downloaded `model.safetensors.index.json`, checked.
fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index).map_err(|e| StoreError::io(index, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| StoreError::corrupt("model.safetensors.index.json", e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| StoreError::corrupt("model.safetensors.index.json", "no weight_map object"))?;
    let mut names: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_owned)).collect();
    names.sort();
    names.dedup();
    for n in &names {
        check_remote_name(n)?;
    }
    Ok(names)
}
