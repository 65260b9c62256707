//! Importing a local model: an HF directory or a GGUF file is validated with the engine's
//! loader, hashed, copied into `models/NAME/` (or registered in place) and recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use unmask_engine::model::gguf::{tokenizer::tokenizer_from_gguf, GgufFile};
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::TensorSource;
use unmask_engine::model::{is_gguf, load_model, ModelConfig, TextTokenizer};

use crate::error::{Result, StoreError};
use crate::hashing;
use crate::models::{ModelFile, ModelFormat, ModelRecord, NewModel};
use crate::paths::{self, MODELS_DIR};
use crate::Store;

/// How thoroughly the engine checks a model before it is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Validation {
    /// `load_model`: config, every weight tensor (shapes, dtypes, repacking) and tokenizer.
    /// Costs a full model load (time and memory of the weights).
    #[default]
    Full,
    /// Config, checkpoint headers (tensor table against the file size) and tokenizer, without
    /// loading weights: for multi-GB models on small devices.
    Metadata,
}

/// Options of [`Store::import_model_with`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportOptions {
    /// Name to register under (default: the folder or file name, sanitised).
    pub name: Option<String>,
    /// Register the files where they are instead of copying them into `models/`; the store
    /// then stores an absolute path and never deletes those files.
    pub in_place: bool,
    pub validation: Validation,
}

/// Progress of an import, for a progress bar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ImportEvent {
    /// The engine is checking the model.
    Validating,
    /// Bytes hashed (and copied unless in place) so far, over all files.
    Hashing { file: String, done: u64, total: u64 },
    /// The model is registered.
    Registered { model_id: i64 },
}

/// What the engine found in a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInspection {
    pub format: ModelFormat,
    /// GGUF architecture name (`llada`, `dream`, ...).
    pub architecture: String,
    /// Dominant storage type of the weight matrices, by bytes.
    pub quantization: String,
    pub config: ModelConfig,
    /// Files that make up the model, relative to its folder (GGUF: the file name).
    pub files: Vec<String>,
}

/// Extensions of the files copied with an HF directory (weights other than safetensors, e.g.
/// `pytorch_model.bin`, are not used by the engine and are left behind).
const HF_EXTENSIONS: &[&str] = &["json", "safetensors", "txt", "md", "model", "tiktoken", "jinja"];

/// Checks a model with the engine and describes it. `path` is an HF directory or a `.gguf` file.
pub fn inspect_model(path: &Path, validation: Validation) -> Result<ModelInspection> {
    if !path.exists() {
        return Err(StoreError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    if path.is_file() && is_gguf(path) {
        let file = GgufFile::open(path)?;
        let config = ModelConfig::from_gguf(&file)?;
        tokenizer_from_gguf(&file)?;
        let mut bytes: HashMap<&'static str, u64> = HashMap::new();
        for t in file.tensor_infos().iter().filter(|t| t.ne.len() >= 2) {
            *bytes.entry(t.ggml_type.name).or_default() += t.n_bytes;
        }
        let quantization = dominant(bytes);
        drop(file);
        if validation == Validation::Full {
            load_model(path)?;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        return Ok(ModelInspection {
            format: ModelFormat::Gguf,
            architecture: config.arch.gguf_name().to_owned(),
            quantization,
            config,
            files: vec![name],
        });
    }
    if !path.is_dir() {
        return Err(StoreError::InvalidRequest(format!(
            "{}: expected a model directory (config.json, model.safetensors, tokenizer.json) or a .gguf file",
            path.display()
        )));
    }
    let config = ModelConfig::from_hf_file(&path.join("config.json"))?;
    let src = SafetensorsSource::open(path)?;
    let mut bytes: HashMap<&'static str, u64> = HashMap::new();
    for name in src.names() {
        let t = src.get(&name)?;
        if t.shape.len() >= 2 {
            *bytes.entry(t.dtype.name()).or_default() += t.data.len() as u64;
        }
    }
    drop(src);
    TextTokenizer::from_file(&path.join("tokenizer.json"))?;
    if validation == Validation::Full {
        load_model(path)?;
    }
    Ok(ModelInspection {
        format: ModelFormat::Hf,
        architecture: config.arch.gguf_name().to_owned(),
        quantization: dominant(bytes),
        config,
        files: hf_files(path)?,
    })
}

fn dominant(bytes: HashMap<&'static str, u64>) -> String {
    let mut v: Vec<(&str, u64)> = bytes.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.first().map(|(n, _)| (*n).to_owned()).unwrap_or_else(|| "unknown".into())
}

/// The top-level files of an HF directory that belong to the model, sorted.
fn hf_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let e = e.map_err(|e| StoreError::io(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ext = Path::new(&name).extension().and_then(|x| x.to_str()).unwrap_or("").to_ascii_lowercase();
        // Follows symlinks (HF cache snapshots link to blobs).
        let is_file = std::fs::metadata(e.path()).map(|m| m.is_file()).unwrap_or(false);
        if is_file && !name.starts_with('.') && HF_EXTENSIONS.contains(&ext.as_str()) {
            paths::safe_relative_path(&name)?;
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Runs blocking work on tokio's blocking pool while forwarding its events to `on_event`.
pub(crate) async fn blocking_with_events<T, E, F>(work: F, on_event: &mut (dyn FnMut(E) + Send)) -> Result<T>
where
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(&dyn Fn(E)) -> Result<T> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = tokio::task::spawn_blocking(move || {
        let send = move |e: E| {
            let _ = tx.send(e);
        };
        work(&send)
    });
    while let Some(ev) = rx.recv().await {
        on_event(ev);
    }
    handle.await.map_err(|e| StoreError::Internal(format!("blocking task: {e}")))?
}

impl Store {
    /// Imports a local model (HF directory or `.gguf` file) with full validation. `name`
    /// defaults to the folder or file name; `in_place` registers it without copying.
    pub async fn import_model(&self, path: &Path, name: Option<&str>, in_place: bool) -> Result<ModelRecord> {
        let opts = ImportOptions { name: name.map(str::to_owned), in_place, validation: Validation::Full };
        self.import_model_with(path, &opts, &mut |_| {}).await
    }

    /// Imports a local model, reporting progress. Refuses unreadable or invalid models (the
    /// engine's error), a name already taken, and a model whose content is already registered.
    pub async fn import_model_with(
        &self,
        path: &Path,
        opts: &ImportOptions,
        on_event: &mut (dyn FnMut(ImportEvent) + Send),
    ) -> Result<ModelRecord> {
        let src = path.canonicalize().map_err(|e| StoreError::io(path, e))?;
        let name = match &opts.name {
            Some(n) => n.clone(),
            None => {
                let raw = if src.is_file() { src.file_stem() } else { src.file_name() };
                paths::model_name_from(&raw.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default())
            }
        };
        paths::check_model_name(&name)?;
        if self.model_by_name(&name).await?.is_some() {
            return Err(StoreError::DuplicateName(name));
        }
        on_event(ImportEvent::Validating);
        let validation = opts.validation;
        let src2 = src.clone();
        let info = tokio::task::spawn_blocking(move || inspect_model(&src2, validation))
            .await
            .map_err(|e| StoreError::Internal(format!("validation task: {e}")))??;

        let base = if info.format == ModelFormat::Gguf {
            src.parent().unwrap_or(Path::new("/")).to_owned()
        } else {
            src.clone()
        };
        let target = self.models_dir().join(&name);
        if !opts.in_place && target.exists() {
            return Err(StoreError::InvalidRequest(format!(
                "{} already exists but is not a registered model; remove it or pick another name",
                target.display()
            )));
        }
        let staging = (!opts.in_place)
            .then(|| self.models_dir().join(format!(".import.{}.{}", self.session_id(), crate::now_ms())));
        let files = info.files.clone();
        let staging2 = staging.clone();
        let hashed =
            blocking_with_events(move |emit| hash_and_copy(&base, &files, staging2.as_deref(), emit), on_event).await;
        let cleanup = |s: &Option<PathBuf>| {
            if let Some(s) = s {
                let _ = std::fs::remove_dir_all(s);
            }
        };
        let hashed = match hashed {
            Ok(h) => h,
            Err(e) => {
                cleanup(&staging);
                return Err(e);
            }
        };
        let sha256 = match info.format {
            ModelFormat::Gguf => hashed[0].sha256.clone(),
            ModelFormat::Hf => hashing::manifest_hash(
                &hashed.iter().map(|f| (f.rel_path.clone(), f.sha256.clone())).collect::<Vec<_>>(),
            ),
        };
        if let Some(existing) = self.model_by_sha256(&sha256).await? {
            cleanup(&staging);
            return Err(StoreError::DuplicateModel { existing: existing.name, sha256 });
        }
        let stored_path = if opts.in_place {
            src.to_string_lossy().into_owned()
        } else {
            let rel = match info.format {
                ModelFormat::Gguf => Path::new(MODELS_DIR).join(&name).join(&info.files[0]),
                ModelFormat::Hf => Path::new(MODELS_DIR).join(&name),
            };
            paths::to_stored(&rel)
        };
        if let Some(s) = &staging {
            if let Err(e) = std::fs::rename(s, &target) {
                cleanup(&staging);
                return Err(StoreError::io(&target, e));
            }
        }
        let new = NewModel {
            name: name.clone(),
            architecture: info.architecture.clone(),
            format: info.format,
            quantization: info.quantization.clone(),
            sha256,
            source: format!("import:{}", src.display()),
            path: stored_path,
            in_place: opts.in_place,
            config: serde_json::to_value(&info.config).map_err(|e| StoreError::Internal(e.to_string()))?,
            files: hashed,
        };
        match self.insert_model(&new).await {
            Ok(rec) => {
                on_event(ImportEvent::Registered { model_id: rec.id });
                Ok(rec)
            }
            Err(e) => {
                if !opts.in_place {
                    let _ = std::fs::remove_dir_all(&target);
                }
                Err(e)
            }
        }
    }
}

/// Hashes `files` under `base`, copying them into `staging` when given.
fn hash_and_copy(
    base: &Path,
    files: &[String],
    staging: Option<&Path>,
    emit: &dyn Fn(ImportEvent),
) -> Result<Vec<ModelFile>> {
    let mut sizes = Vec::new();
    for f in files {
        let p = base.join(f);
        sizes.push(std::fs::metadata(&p).map_err(|e| StoreError::io(&p, e))?.len());
    }
    let total: u64 = sizes.iter().sum();
    if let Some(s) = staging {
        std::fs::create_dir_all(s).map_err(|e| StoreError::io(s, e))?;
    }
    let mut done = 0u64;
    let mut last_emit = 0u64;
    let mut out = Vec::new();
    for f in files {
        let src = base.join(f);
        let dst = staging.map(|s| s.join(f));
        let (size, sha256) = hashing::hash_file(&src, dst.as_deref(), |n| {
            done += n;
            if done - last_emit >= 8 << 20 {
                last_emit = done;
                emit(ImportEvent::Hashing { file: f.clone(), done, total });
            }
        })?;
        emit(ImportEvent::Hashing { file: f.clone(), done, total });
        out.push(ModelFile { rel_path: f.clone(), size_bytes: size, sha256 });
    }
    Ok(out)
}
