//! `unmask`: the engine headless — generate, chat, inspect models, benchmarks.
//!
//! Exit codes: 0 success, 1 other failure, 2 bad command line, 3 model/file problem,
//! 4 invalid request (settings that do not fit the model or prompt), 5 cancelled.

mod args;
mod generate;
mod live;
mod model_path;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use unmask_engine::EngineError;

use args::{BackendArgs, DecodeArgs, ModelArg};

/// Unmask: on-device inference for diffusion LLMs.
#[derive(Parser, Debug)]
#[command(name = "unmask", version, about, propagate_version = true)]
struct Cli {
    /// Worker threads (default: one per core, or $UNMASK_THREADS).
    #[arg(long, global = true, default_value_t = 0)]
    threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate a reply to one prompt.
    Generate {
        /// The user message (rendered with the model's chat template unless --raw).
        prompt: String,
        /// Feed the prompt to the model as is, without the chat template.
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        decode: DecodeArgs,
        #[command(flatten)]
        backend: BackendArgs,
        #[command(flatten)]
        output: generate::OutputArgs,
    },
    /// Interactive multi-turn chat (reads lines from standard input; /reset, /quit).
    Chat {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        decode: DecodeArgs,
        #[command(flatten)]
        backend: BackendArgs,
        #[command(flatten)]
        output: generate::OutputArgs,
    },
    /// Show a model's configuration.
    Info {
        #[command(flatten)]
        model: ModelArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a benchmark suite (writes bench/results/SUITE.json; `unmask bench --list`).
    Bench {
        /// Suite names (forward, kernels, quality, decoding, ablation, npu).
        suites: Vec<String>,
        /// Short version of each suite (under 2 minutes).
        #[arg(long)]
        quick: bool,
        /// List the suites.
        #[arg(long)]
        list: bool,
        /// Print the suites' headline figures as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Manage models.
    Models {
        #[command(subcommand)]
        action: ModelsAction,
    },
}

#[derive(Subcommand, Debug)]
enum ModelsAction {
    /// List the embedded models.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert an HF-format model directory to GGUF with llama.cpp's names and keys.
    Export {
        #[command(flatten)]
        model: ModelArg,
        /// Output .gguf path.
        out: std::path::PathBuf,
        /// Weight type of the matrices.
        #[arg(long, value_enum, default_value_t = ExportType::Q8_0)]
        dtype: ExportType,
    },
}

/// Weight types `models export` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
enum ExportType {
    F32,
    F16,
    Q8_0,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    unmask_engine::threads::init(cli.threads);
    let result = match cli.command {
        Command::Generate { prompt, raw, model, decode, backend, output } => {
            generate::run_generate(&prompt, raw, &model, &decode, &backend, &output)
        }
        Command::Chat { model, decode, backend, output } => generate::run_chat(&model, &decode, &backend, &output),
        Command::Info { model, json } => generate::run_info(&model, json),
        Command::Models { action: ModelsAction::List { json } } => list_models(json),
        Command::Models { action: ModelsAction::Export { model, out, dtype } } => export_model(&model, &out, dtype),
        Command::Bench { suites, quick, list, json } => run_bench(&suites, quick, list, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<EngineError>() {
        Some(EngineError::InvalidRequest(_) | EngineError::ContextOverflow { .. }) => 4,
        Some(EngineError::Cancelled) => 5,
        Some(_) => 3,
        None if e.to_string().contains("not found") || e.to_string().contains("does not exist") => 3,
        None => 1,
    }
}

fn list_models(json: bool) -> anyhow::Result<()> {
    let models = model_path::list_embedded();
    if json {
        let v: Vec<_> = models
            .iter()
            .map(|(n, p)| serde_json::json!({"name": n, "path": p, "default": n == model_path::DEFAULT_MODEL}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (n, p) in &models {
            let mark = if n == model_path::DEFAULT_MODEL { " (default)" } else { "" };
            println!("{n}{mark}\t{}", p.display());
        }
    }
    Ok(())
}

/// Runs the benchmark harness binary (`unmask-bench`, built next to `unmask`).
fn run_bench(suites: &[String], quick: bool, list: bool, json: bool) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let harness = exe.with_file_name(format!("unmask-bench{}", std::env::consts::EXE_SUFFIX));
    if !harness.exists() {
        anyhow::bail!(
            "benchmark harness not found at {} (build it with `cargo build --release -p unmask-bench`, or run `bench/run SUITE`)",
            harness.display()
        );
    }
    let mut cmd = std::process::Command::new(&harness);
    cmd.args(suites);
    if quick {
        cmd.arg("--quick");
    }
    if list || suites.is_empty() {
        cmd.arg("--list");
    }
    if !json {
        cmd.stdout(std::process::Stdio::null());
    }
    let status = cmd.status()?;
    if !status.success() {
        anyhow::bail!("benchmark harness exited with {status}");
    }
    Ok(())
}

fn export_model(model: &ModelArg, out: &std::path::Path, dtype: ExportType) -> anyhow::Result<()> {
    use unmask_engine::model::tensor::DType;
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
