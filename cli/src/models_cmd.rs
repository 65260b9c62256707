//! `unmask models list|import|download|rm|export` on top of the store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;
use unmask_store::{CancellationToken, DownloadConfig, DownloadEvent, DownloadRequest, ImportEvent, ImportOptions, Validation};

use crate::args::ModelArg;
use crate::data::{self, Data};
use crate::exit::{fail, INVALID, UNAVAILABLE};
use crate::{model_path, progress};

/// What `unmask models` does.
#[derive(Subcommand, Debug)]
pub enum ModelsAction {
    /// List the models in the store (the embedded default model is registered automatically),
    /// plus embedded models not imported yet.
    List {
        /// Print JSON (an array of model objects).
        #[arg(long)]
        json: bool,
    },
    /// Import a local model (HF directory or .gguf file): validated by the engine, hashed,
    /// copied into the data folder (or registered in place) and registered.
    Import {
        /// Model directory or .gguf file.
        path: PathBuf,
        /// Name to register under (default: the folder or file name).
        #[arg(long)]
        name: Option<String>,
        /// Register the files where they are instead of copying them (they are never deleted).
        #[arg(long)]
        in_place: bool,
    },
    /// Download a model from a Hugging Face-style server ({URL}/{REPO}/resolve/{REVISION}/{FILE}),
    /// verify it and register it. An interrupted download resumes when the same command runs again.
    Download {
        /// Repository id, OWNER/NAME.
        repo: String,
        /// Server base URL [default: $UNMASK_HF_ENDPOINT, else https://huggingface.co].
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
        /// Branch, tag or commit.
        #[arg(long, default_value = "main")]
        revision: String,
        /// Download one .gguf file of the repo instead of the HF layout (config.json,
        /// tokenizer.json, model.safetensors or its shards).
        #[arg(long, value_name = "FILE.gguf")]
        file: Option<String>,
        /// Expected SHA-256 of the --file (else the server's X-Linked-Etag is used when present).
        #[arg(long, requires = "file")]
        sha256: Option<String>,
        /// Name to register under (default: the repo name or the GGUF file's stem).
        #[arg(long)]
        name: Option<String>,
        /// Delete a partial download of this repo and revision first, instead of resuming it.
        #[arg(long)]
        restart: bool,
    },
    /// Remove a model from the store (its files too, unless it was registered in place).
    Rm {
        /// Model name (as `unmask models list` shows it).
        name: String,
    },
    /// Convert an HF-format model directory to GGUF with llama.cpp's names and keys.
    Export {
        #[command(flatten)]
        model: ModelArg,
        /// Output .gguf path.
        out: PathBuf,
        /// Weight type of the matrices.
        #[arg(long, value_enum, default_value_t = ExportType::Q8_0)]
        dtype: ExportType,
    },
}

/// Weight types `models export` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub enum ExportType {
    F32,
    F16,
    // Spelled as in llama.cpp and the docs (clap would make it `q8-0`).
    #[value(name = "q8_0", alias = "q8-0")]
    Q8_0,
}

/// Runs a `models` subcommand.
pub fn run(action: ModelsAction, data_dir: Option<&Path>) -> Result<()> {
    if let ModelsAction::Export { model, out, dtype } = &action {
        return export_model(model, out, *dtype);
    }
    let data = Data::open(&data::data_dir(data_dir)?)?;
    match action {
        ModelsAction::List { json } => list(&data, json),
        ModelsAction::Import { path, name, in_place } => import(&data, &path, name, in_place),
        ModelsAction::Download { repo, base_url, revision, file, sha256, name, restart } => {
            let mut req = match &file {
                Some(f) => DownloadRequest::gguf(&repo, &revision, f),
                None => DownloadRequest::hf(&repo, &revision),
            };
            if let (Some(files), Some(sha)) = (req.files.as_mut(), sha256) {
                files[0].sha256 = Some(sha);
            }
            req.name = name;
            let mut cfg = DownloadConfig::default();
            if let Some(u) = base_url {
                cfg.endpoint = u;
            }
            download(&data, &req, &cfg, restart)
        }
        ModelsAction::Rm { name } => remove(&data, &name),
        ModelsAction::Export { .. } => unreachable!("handled above"),
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2} GB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn list(data: &Data, json_out: bool) -> Result<()> {
    let store = data.store();
    let models = data.block_on(store.list_models())?;
    let embedded = model_path::list_embedded();
    let unregistered: Vec<&(String, PathBuf)> =
        embedded.iter().filter(|(n, _)| !models.iter().any(|m| &m.name == n)).collect();
    if json_out {
        let mut v: Vec<serde_json::Value> = models
            .iter()
            .map(|m| {
                json!({
                    "name": m.name, "architecture": m.architecture, "format": m.format,
                    "quantization": m.quantization, "size_bytes": m.size_bytes, "sha256": m.sha256,
                    "source": m.source, "path": store.model_path(m), "in_place": m.in_place,
                    "added_at": m.added_at, "last_used_at": m.last_used_at,
                    "default": m.name == model_path::DEFAULT_MODEL, "registered": true,
                })
            })
            .collect();
        v.extend(unregistered.iter().map(|(n, p)| json!({"name": n, "path": p, "registered": false, "default": false})));
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{:<24} {:<10} {:<5} {:<6} {:>10}  {:<8} PATH", "NAME", "ARCH", "FMT", "QUANT", "SIZE", "STORED");
    for m in &models {
        let name = if m.name == model_path::DEFAULT_MODEL { format!("{} (default)", m.name) } else { m.name.clone() };
        println!(
            "{:<24} {:<10} {:<5} {:<6} {:>10}  {:<8} {}",
            name,
            m.architecture,
            m.format.as_str(),
            m.quantization,
            human_bytes(m.size_bytes),
            if m.in_place { "in place" } else { "copied" },
            store.model_path(m).display()
        );
    }
    if !unregistered.is_empty() {
        println!("\nembedded, not imported (`unmask models import PATH`):");
        for (n, p) in unregistered {
            println!("  {n:<22} {}", p.display());
        }
    }
    Ok(())
}

fn import(data: &Data, path: &Path, name: Option<String>, in_place: bool) -> Result<()> {
    if !path.exists() {
        return Err(fail(UNAVAILABLE, format!("{} does not exist", path.display())));
    }
    let m = progress::multi();
    let bar = progress::bytes(&m, None, "import");
    bar.set_message("validating");
    let opts = ImportOptions { name, in_place, validation: Validation::Full };
    let b2 = bar.clone();
    let mut on_event = move |ev: ImportEvent| match ev {
        ImportEvent::Validating => b2.set_message("validating"),
        ImportEvent::Hashing { file, done, total } => {
            b2.set_length(total);
            b2.set_position(done);
            b2.set_message(file);
        }
        ImportEvent::Registered { .. } => b2.set_message("registered"),
    };
    let result = data.block_on(data.store().import_model_with(path, &opts, &mut on_event));
    bar.finish_and_clear();
    let rec = result.with_context(|| format!("importing {}", path.display()))?;
    println!(
        "imported {} ({} {} {}, {}) → {}",
        rec.name,
        rec.architecture,
        rec.format.as_str(),
        rec.quantization,
        human_bytes(rec.size_bytes),
        data.store().model_path(&rec).display()
    );
    Ok(())
}

/// Per-file bars of a download, keyed by remote file name.
#[derive(Default)]
struct DownloadBars {
    bars: HashMap<String, indicatif::ProgressBar>,
}

fn download(data: &Data, req: &DownloadRequest, cfg: &DownloadConfig, restart: bool) -> Result<()> {
    let store = data.store();
    if restart && data.block_on(store.discard_partial_download(&req.repo, &req.revision))? {
        eprintln!("discarded the partial download of {}@{}", req.repo, req.revision);
    }
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    data.runtime().spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            c2.cancel();
        }
    });
    let m = progress::multi();
    let bars = Arc::new(Mutex::new(DownloadBars::default()));
    let draw = progress::enabled();
    let (m2, bars2) = (m.clone(), Arc::clone(&bars));
    let mut on_event = move |ev: DownloadEvent| {
        let Ok(mut b) = bars2.lock() else { return };
        match ev {
            DownloadEvent::FileStarted { file, total, resumed_from } => {
                if resumed_from > 0 {
                    // Said plainly (not only on the bar) so logs show that a resume happened.
                    let _ = m2.println(format!("resuming {file} from byte {resumed_from}"));
                    if !draw {
                        eprintln!("resuming {file} from byte {resumed_from}");
                    }
                }
                let bar = progress::bytes(&m2, total, &file);
                bar.set_position(resumed_from);
                b.bars.insert(file, bar);
            }
            DownloadEvent::Progress { file, file_done, file_total, .. } => {
                if let Some(bar) = b.bars.get(&file) {
                    if let Some(t) = file_total {
                        bar.set_length(t);
                    }
                    bar.set_position(file_done);
                }
            }
            DownloadEvent::Retrying { file, attempt, delay_ms, reason } => {
                let msg = format!("retry {attempt} in {:.0} s: {reason}", delay_ms as f64 / 1e3);
                match b.bars.get(&file) {
                    Some(bar) => bar.set_message(msg),
                    None => eprintln!("{file}: {msg}"),
                }
            }
            DownloadEvent::FileDone { file, bytes, .. } => {
                if let Some(bar) = b.bars.remove(&file) {
                    bar.finish_and_clear();
                }
                if !draw {
                    eprintln!("{file}: {bytes} bytes, verified");
                }
            }
            DownloadEvent::FileSkipped { .. } => {}
            DownloadEvent::Validating => {
                if !draw {
                    eprintln!("validating the model");
                }
            }
            DownloadEvent::Registered { .. } => {}
        }
    };
    let result = data.block_on(store.download_model(req, cfg, &cancel, &mut on_event));
    if let Ok(b) = bars.lock() {
        for bar in b.bars.values() {
            bar.finish_and_clear();
        }
    }
    let rec = match result {
        Ok(r) => r,
        Err(unmask_store::StoreError::Cancelled) => {
            return Err(anyhow::Error::new(unmask_store::StoreError::Cancelled).context(format!(
                "download of {} interrupted; the partial files are kept, run the same command again to resume",
                req.repo
            )))
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("downloading {} from {}", req.repo, cfg.endpoint))),
    };
    println!(
        "downloaded {} ({} {} {}, {}) → {}",
        rec.name,
        rec.architecture,
        rec.format.as_str(),
        rec.quantization,
        human_bytes(rec.size_bytes),
        store.model_path(&rec).display()
    );
    Ok(())
}

fn remove(data: &Data, name: &str) -> Result<()> {
    let store = data.store();
    let Some(rec) = data.block_on(store.model_by_name(name))? else {
        return Err(fail(UNAVAILABLE, format!("no model named `{name}` in the store (`unmask models list`)")));
    };
    let embedded = model_path::embedded(model_path::DEFAULT_MODEL).and_then(|p| p.canonicalize().ok());
    if rec.in_place && embedded.is_some_and(|e| Path::new(&rec.path) == e) {
        return Err(fail(INVALID, format!("`{name}` is the embedded default model; it cannot be removed")));
    }
    let removed = data.block_on(store.remove_model(rec.id))?;
    if removed.files_deleted {
        println!("removed {} ({} freed)", removed.name, human_bytes(removed.freed_bytes));
    } else {
        println!("removed {} (registered in place: its files were left where they are)", removed.name);
    }
    Ok(())
}

fn export_model(model: &ModelArg, out: &Path, dtype: ExportType) -> Result<()> {
    use unmask_engine::tensor::DType;
    let dir = model_path::resolve(model.model.as_deref())?;
    let dt = match dtype {
        ExportType::F32 => DType::F32,
        ExportType::F16 => DType::F16,
        ExportType::Q8_0 => DType::Q8_0,
    };
    unmask_engine::model::gguf::export_gguf(&dir, out, dt)?;
    let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    eprintln!("wrote {} ({:.1} MB)", out.display(), size as f64 / 1e6);
    Ok(())
}
