//! The store behind the CLI: which data folder, a small tokio runtime for its async API, the
//! embedded default model registered on open, and resolving `--model` against it.

use std::future::Future;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use unmask_store::{ImportOptions, ModelRecord, Store, StoreError, Validation};

use crate::model_path;

/// An open store and the runtime that drives it.
pub struct Data {
    rt: tokio::runtime::Runtime,
    store: Store,
}

/// The data folder: `--data-dir`, else `$UNMASK_DATA_DIR`, else the platform folder.
pub fn data_dir(flag: Option<&Path>) -> Result<PathBuf> {
    match flag {
        Some(d) => Ok(d.to_owned()),
        None => Ok(unmask_store::default_data_dir()?),
    }
}

/// A runtime for the store: one worker is plenty (the recorder's writer and HTTP), and it keeps
/// the decoding threads to themselves.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("unmask-store")
        .enable_all()
        .build()
        .context("starting the store runtime")
}

impl Data {
    /// Opens the store in `dir` and registers the embedded default model.
    pub fn open(dir: &Path) -> Result<Data> {
        let rt = runtime()?;
        let store = rt
            .block_on(Store::open(dir.to_owned()))
            .with_context(|| format!("opening the store in {} (use --no-record to run without it)", dir.display()))?;
        let data = Data { rt, store };
        data.block_on(ensure_default_model(&data.store))?;
        Ok(data)
    }

    /// Runs a store future to completion.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The runtime (for spawning).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }
}

/// Registers the embedded default model in place (no copy) unless a model of that name is
/// registered already; a record left behind by a checkout that moved is replaced.
async fn ensure_default_model(store: &Store) -> Result<()> {
    // An installed binary without its models folder simply has no default to register.
    let Some(path) = model_path::embedded(model_path::DEFAULT_MODEL) else { return Ok(()) };
    let path = path.canonicalize().unwrap_or(path);
    if let Some(m) = store.model_by_name(model_path::DEFAULT_MODEL).await? {
        if !m.in_place || Path::new(&m.path).exists() {
            return Ok(());
        }
        store.remove_model(m.id).await?;
    }
    let opts = ImportOptions {
        name: Some(model_path::DEFAULT_MODEL.to_owned()),
        in_place: true,
        validation: Validation::Metadata,
    };
    match store.import_model_with(&path, &opts, &mut |_| {}).await {
        // The same files already registered under another name: nothing to add.
        Ok(_) | Err(StoreError::DuplicateModel { .. }) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("registering the embedded model {}", path.display()))),
    }
}

/// The model a run uses: where its files are, and its store record if it has one.
pub struct ResolvedModel {
    pub path: PathBuf,
    pub record: Option<ModelRecord>,
    /// Name recorded with runs.
    pub name: String,
}

/// Resolves `--model`: an existing path, else a model in the store, else an embedded model
/// (`$UNMASK_MODEL` and the default included).
pub fn resolve_model(arg: Option<&str>, data: Option<&Data>) -> Result<ResolvedModel> {
    let wanted = arg.map(str::to_owned).or_else(|| std::env::var("UNMASK_MODEL").ok());
    let name_of = |p: &Path| {
        let stem = if p.is_file() { p.file_stem() } else { p.file_name() };
        stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
    };
    if let Some(w) = &wanted {
        let p = PathBuf::from(w);
        if p.exists() {
            return Ok(ResolvedModel { name: name_of(&p), path: p, record: None });
        }
    }
    if let Some(data) = data {
        let name = wanted.as_deref().unwrap_or(model_path::DEFAULT_MODEL);
        if let Some(rec) = data.block_on(data.store().model_by_name(name))? {
            let path = data.store().model_path(&rec);
            return Ok(ResolvedModel { path, name: rec.name.clone(), record: Some(rec) });
        }
    }
    let path = model_path::resolve(wanted.as_deref())?;
    Ok(ResolvedModel { name: name_of(&path), path, record: None })
}

/// [`resolve_model`] for a command that may run without its store (`--no-record`): the store in
/// `dir` is then opened only when nothing else knows the name, so an unrecorded run neither
/// creates a data folder nor misses a model that was imported into one.
pub fn resolve_model_in(name: Option<&str>, data: Option<&Data>, dir: &Path) -> Result<ResolvedModel> {
    match resolve_model(name, data) {
        Ok(r) => Ok(r),
        Err(e) if data.is_none() && name.is_some() => match Data::open(dir) {
            Ok(d) => resolve_model(name, Some(&d)).map_err(|_| e),
            Err(_) => Err(e),
        },
        Err(e) => Err(e),
    }
}
