//! The models table: records, files, disk usage and safe removal.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use unmask_engine::model::ModelConfig;

use crate::error::{Result, StoreError};
use crate::paths::{self, MODELS_DIR};
use crate::{now_ms, ModelId, Store, UnixMillis};

/// On-disk format of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// A Hugging Face directory (config.json, safetensors, tokenizer.json).
    Hf,
    /// A single GGUF file.
    Gguf,
}

impl ModelFormat {
    /// The stored name (`hf`, `gguf`).
    pub fn as_str(self) -> &'static str {
        match self {
            ModelFormat::Hf => "hf",
            ModelFormat::Gguf => "gguf",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        match s {
            "hf" => Ok(ModelFormat::Hf),
            "gguf" => Ok(ModelFormat::Gguf),
            other => Err(StoreError::corrupt("models.format", format!("unknown format `{other}`"))),
        }
    }
}

/// A registered model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub id: ModelId,
    /// Unique name; also the folder name under `models/` for managed models.
    pub name: String,
    /// Architecture (`llada`, `dream`, `llada-moe`, `llama`, `qwen2`, `qwen3`, `qwen3moe`).
    pub architecture: String,
    pub format: ModelFormat,
    /// Dominant weight type of the matrices (`F32`, `BF16`, `Q8_0`, ...).
    pub quantization: String,
    /// Bytes of all the model's files.
    pub size_bytes: u64,
    /// SHA-256 of the GGUF file, or of the file manifest for a directory (see `import`).
    pub sha256: String,
    /// Where it came from: `import:/abs/path`, or `hf:ENDPOINT/REPO@REVISION`.
    pub source: String,
    /// Stored path: relative to the data folder (`models/NAME` or `models/NAME/FILE.gguf`), or
    /// absolute for in-place models. [`Store::model_path`] resolves it.
    pub path: String,
    /// Registered in place: the files stay where they were and are never deleted by the store.
    pub in_place: bool,
    /// The engine's parsed config at import time (JSON of `ModelConfig`).
    pub config: serde_json::Value,
    pub added_at: UnixMillis,
    pub last_used_at: Option<UnixMillis>,
}

impl ModelRecord {
    /// The engine config, parsed from the stored JSON.
    pub fn engine_config(&self) -> Result<ModelConfig> {
        serde_json::from_value(self.config.clone())
            .map_err(|e| StoreError::corrupt(format!("config of model {}", self.name), e.to_string()))
    }
}

/// One file of a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFile {
    /// Path relative to the model's folder (the file name for a GGUF model).
    pub rel_path: String,
    pub size_bytes: u64,
    pub sha256: String,
}

/// Disk use of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelDiskUsage {
    pub id: ModelId,
    pub name: String,
    /// Bytes of the model's files present on disk now.
    pub bytes: u64,
    /// In-place models' bytes are the user's files, not the store's.
    pub in_place: bool,
    /// Registered files that are missing on disk.
    pub missing_files: u32,
}

/// Disk use of the data folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskUsage {
    pub models: Vec<ModelDiskUsage>,
    /// Sum over managed (not in-place) models.
    pub managed_model_bytes: u64,
    /// Sum over in-place models (files outside the data folder's control).
    pub in_place_model_bytes: u64,
    /// `.part` files and finished files of downloads that have not completed.
    pub partial_download_bytes: u64,
    /// `unmask.db` plus its WAL and shared-memory files.
    pub database_bytes: u64,
    /// Compressed step-trace bytes inside the database.
    pub trace_bytes: u64,
}

/// What [`Store::remove_model`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemovedModel {
    pub id: ModelId,
    pub name: String,
    /// Whether the model's folder was deleted (false for in-place models).
    pub files_deleted: bool,
    /// Bytes freed on disk.
    pub freed_bytes: u64,
}

/// A model ready to be inserted (after validation and hashing).
#[derive(Debug, Clone)]
pub(crate) struct NewModel {
    pub name: String,
    pub architecture: String,
    pub format: ModelFormat,
    pub quantization: String,
    pub sha256: String,
    pub source: String,
    pub path: String,
    pub in_place: bool,
    pub config: serde_json::Value,
    pub files: Vec<ModelFile>,
}

struct ModelRow {
    id: i64,
    name: String,
    architecture: String,
    format: String,
    quantization: String,
    size_bytes: i64,
    sha256: String,
    source: String,
    path: String,
    in_place: bool,
    config_json: String,
    added_at: i64,
    last_used_at: Option<i64>,
}

impl TryFrom<ModelRow> for ModelRecord {
    type Error = StoreError;
    fn try_from(r: ModelRow) -> Result<Self> {
        Ok(ModelRecord {
            format: ModelFormat::parse(&r.format)?,
            config: serde_json::from_str(&r.config_json)
                .map_err(|e| StoreError::corrupt(format!("config of model {}", r.name), e.to_string()))?,
            id: r.id,
            name: r.name,
            architecture: r.architecture,
            quantization: r.quantization,
            size_bytes: r.size_bytes.max(0) as u64,
            sha256: r.sha256,
            source: r.source,
            path: r.path,
            in_place: r.in_place,
            added_at: r.added_at,
            last_used_at: r.last_used_at,
        })
    }
}

/// Prefix of folders holding a model being deleted (swept at the next open if deletion stopped).
const TRASH_PREFIX: &str = ".trash-";

impl Store {
    /// All models, by name.
    pub async fn list_models(&self) -> Result<Vec<ModelRecord>> {
        let rows = sqlx::query_as!(
            ModelRow,
            r#"SELECT id AS "id!", name, architecture, format, quantization, size_bytes, sha256, source, path,
                      in_place AS "in_place: bool", config_json, added_at, last_used_at
               FROM models ORDER BY name"#
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ModelRecord::try_from).collect()
    }

    /// The model with `id`.
    pub async fn get_model(&self, id: ModelId) -> Result<ModelRecord> {
        let row = sqlx::query_as!(
            ModelRow,
            r#"SELECT id AS "id!", name, architecture, format, quantization, size_bytes, sha256, source, path,
                      in_place AS "in_place: bool", config_json, added_at, last_used_at
               FROM models WHERE id = ?"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found("model", id))?;
        row.try_into()
    }

    /// The model called `name`, if any.
    pub async fn model_by_name(&self, name: &str) -> Result<Option<ModelRecord>> {
        let row = sqlx::query_as!(
            ModelRow,
            r#"SELECT id AS "id!", name, architecture, format, quantization, size_bytes, sha256, source, path,
                      in_place AS "in_place: bool", config_json, added_at, last_used_at
               FROM models WHERE name = ?"#,
            name
        )
        .fetch_optional(&self.pool)
        .await?;
        row.map(ModelRecord::try_from).transpose()
    }

    /// The model whose content hash is `sha256`, if any.
    pub async fn model_by_sha256(&self, sha256: &str) -> Result<Option<ModelRecord>> {
        let row = sqlx::query_as!(
            ModelRow,
            r#"SELECT id AS "id!", name, architecture, format, quantization, size_bytes, sha256, source, path,
                      in_place AS "in_place: bool", config_json, added_at, last_used_at
               FROM models WHERE sha256 = ?"#,
            sha256
        )
        .fetch_optional(&self.pool)
        .await?;
        row.map(ModelRecord::try_from).transpose()
    }

    /// The files of a model.
    pub async fn model_files(&self, id: ModelId) -> Result<Vec<ModelFile>> {
        let rows = sqlx::query!(
            r#"SELECT rel_path, size_bytes, sha256 FROM model_files WHERE model_id = ? ORDER BY rel_path"#,
            id
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| ModelFile { rel_path: r.rel_path, size_bytes: r.size_bytes.max(0) as u64, sha256: r.sha256 })
            .collect())
    }

    /// Absolute path of a model (directory for HF models, file for GGUF), as the engine's
    /// `load_model` takes it.
    pub fn model_path(&self, model: &ModelRecord) -> PathBuf {
        paths::resolve_stored(&self.data_dir, &model.path)
    }

    /// Records that the model was used now (the runs API does this for you).
    pub async fn touch_model(&self, id: ModelId) -> Result<()> {
        let now = now_ms();
        let r = sqlx::query!("UPDATE models SET last_used_at = ? WHERE id = ?", now, id).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("model", id));
        }
        Ok(())
    }

    /// Renames a model in the database. Its folder keeps the old name (paths are stored), so this
    /// is cheap and cannot fail half-way.
    pub async fn rename_model(&self, id: ModelId, new_name: &str) -> Result<()> {
        paths::check_model_name(new_name)?;
        if self.model_by_name(new_name).await?.is_some() {
            return Err(StoreError::DuplicateName(new_name.to_owned()));
        }
        let r = sqlx::query!("UPDATE models SET name = ? WHERE id = ?", new_name, id).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("model", id));
        }
        Ok(())
    }

    /// Inserts a model and its files in one transaction.
    pub(crate) async fn insert_model(&self, m: &NewModel) -> Result<ModelRecord> {
        let size: i64 = m.files.iter().map(|f| f.size_bytes as i64).sum();
        let config = m.config.to_string();
        let now = now_ms();
        let format = m.format.as_str();
        let mut tx = self.write_tx().await?;
        if let Some(existing) =
            sqlx::query_scalar!("SELECT name FROM models WHERE sha256 = ?", m.sha256).fetch_optional(&mut *tx).await?
        {
            return Err(StoreError::DuplicateModel { existing, sha256: m.sha256.clone() });
        }
        if sqlx::query_scalar!("SELECT id FROM models WHERE name = ?", m.name).fetch_optional(&mut *tx).await?.is_some()
        {
            return Err(StoreError::DuplicateName(m.name.clone()));
        }
        let id = sqlx::query_scalar!(
            r#"INSERT INTO models (name, architecture, format, quantization, size_bytes, sha256, source, path,
                                   in_place, config_json, added_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id AS "id!""#,
            m.name,
            m.architecture,
            format,
            m.quantization,
            size,
            m.sha256,
            m.source,
            m.path,
            m.in_place,
            config,
            now
        )
        .fetch_one(&mut *tx)
        .await?;
        for f in &m.files {
            let sz = f.size_bytes as i64;
            sqlx::query!(
                "INSERT INTO model_files (model_id, rel_path, size_bytes, sha256) VALUES (?, ?, ?, ?)",
                id,
                f.rel_path,
                sz,
                f.sha256
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.get_model(id).await
    }

    /// Deletes a model: its record, files list and calibrations; runs and conversations keep
    /// their history (their model link becomes empty, runs keep the name). A managed model's
    /// folder is first moved aside atomically, then deleted; an in-place model's files are
    /// never touched. Refuses stored paths that do not resolve to a folder directly inside
    /// `models/`.
    pub async fn remove_model(&self, id: ModelId) -> Result<RemovedModel> {
        let model = self.get_model(id).await?;
        let mut trash: Option<(PathBuf, PathBuf)> = None;
        let mut freed = 0u64;
        if !model.in_place {
            let folder = self.owned_folder(&model)?;
            if folder.exists() {
                freed = dir_size(&folder);
                let aside = self.models_dir().join(format!("{TRASH_PREFIX}{id}-{}", now_ms()));
                std::fs::rename(&folder, &aside).map_err(|e| StoreError::io(&folder, e))?;
                trash = Some((folder, aside));
            }
        }
        let deleted = sqlx::query!("DELETE FROM models WHERE id = ?", id).execute(&self.pool).await;
        if let Err(e) = deleted {
            if let Some((folder, aside)) = &trash {
                // Put the files back so the record still points at them.
                let _ = std::fs::rename(aside, folder);
            }
            return Err(e.into());
        }
        if let Some((_, aside)) = &trash {
            if let Err(e) = std::fs::remove_dir_all(aside) {
                tracing::warn!(path = %aside.display(), error = %e, "could not delete a removed model's files yet; retried at next open");
            }
        }
        Ok(RemovedModel { id, name: model.name, files_deleted: trash.is_some(), freed_bytes: freed })
    }

    /// The folder a managed model owns: `DATA/models/NAME`, checked to lie directly inside
    /// `models/` (a tampered path cannot make `remove_model` delete anything else).
    fn owned_folder(&self, model: &ModelRecord) -> Result<PathBuf> {
        let parts: Vec<&str> = model.path.split('/').collect();
        let bad = || StoreError::unsafe_name(&model.path, "stored path of a managed model is not under models/");
        if parts.len() < 2 || parts[0] != MODELS_DIR {
            return Err(bad());
        }
        paths::check_model_name(parts[1]).map_err(|_| bad())?;
        let folder = self.models_dir().join(parts[1]);
        if folder.exists() {
            let models = self.models_dir().canonicalize().map_err(|e| StoreError::io(self.models_dir(), e))?;
            let real = folder.canonicalize().map_err(|e| StoreError::io(&folder, e))?;
            if real.parent() != Some(models.as_path()) {
                return Err(bad());
            }
            // A symlink named like the model must not make us delete its target.
            if std::fs::symlink_metadata(&folder).map(|m| m.file_type().is_symlink()).unwrap_or(true) {
                return Err(bad());
            }
        }
        Ok(folder)
    }

    /// Bytes used per model, by partial downloads, the database and traces.
    pub async fn disk_usage(&self) -> Result<DiskUsage> {
        let mut models = Vec::new();
        let (mut managed, mut in_place) = (0u64, 0u64);
        for m in self.list_models().await? {
            let root = self.model_path(&m);
            let files = self.model_files(m.id).await?;
            let (mut bytes, mut missing) = (0u64, 0u32);
            for f in &files {
                let p = match m.format {
                    ModelFormat::Gguf => root.clone(),
                    ModelFormat::Hf => paths::resolve_stored(&root, &f.rel_path),
                };
                match std::fs::metadata(&p) {
                    Ok(md) => bytes += md.len(),
                    Err(_) => missing += 1,
                }
            }
            if m.in_place {
                in_place += bytes;
            } else {
                managed += bytes;
            }
            models.push(ModelDiskUsage { id: m.id, name: m.name, bytes, in_place: m.in_place, missing_files: missing });
        }
        let db = self.database_path();
        let database_bytes = ["", "-wal", "-shm"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
            .map(|m| m.len())
            .sum();
        let trace_bytes =
            sqlx::query_scalar!(r#"SELECT coalesce(sum(length(data)), 0) AS "n!: i64" FROM trace_chunks"#)
                .fetch_one(&self.pool)
                .await?;
        Ok(DiskUsage {
            models,
            managed_model_bytes: managed,
            in_place_model_bytes: in_place,
            partial_download_bytes: dir_size(&self.models_dir().join(paths::DOWNLOADS_DIR)),
            database_bytes,
            trace_bytes: trace_bytes.max(0) as u64,
        })
    }
}

/// Total bytes of regular files under `dir` (symlinks are not followed).
pub(crate) fn dir_size(dir: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(dir) else { return 0 };
    if md.is_file() {
        return md.len();
    }
    if !md.is_dir() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().map(|e| dir_size(&e.path())).sum()
}

/// Deletes folders left by a removal that stopped half-way, and staging folders of imports
/// whose process died (`.import.SESSION.N`).
pub(crate) fn sweep_leftovers(models_dir: &Path, sessions_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(models_dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dead_import = name
            .strip_prefix(".import.")
            .and_then(|rest| rest.split('.').next())
            .is_some_and(|session| !crate::session::is_alive(sessions_dir, session));
        if name.starts_with(TRASH_PREFIX) || dead_import {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
