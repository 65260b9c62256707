//! `unmask`: the engine headless — generate, chat, models and runs in the store, traces,
//! benchmarks.
//!
//! Exit codes (see [`exit`]): 0 ok, 1 other failure, 2 bad command line, 3 model/file/backend/run
//! missing or unusable (corrupt files included), 4 request that does not fit (settings vs model or
//! prompt, name taken), 5 cancelled, 6 store or download failure.

mod args;
mod bench_cmd;
mod data;
mod exit;
mod generate;
mod live;
mod model_path;
mod models_cmd;
mod moe_cmd;
mod progress;
mod record;
mod runs_cmd;
mod serve;
mod trace_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use args::{BackendArgs, DecodeArgs, DraftArgs, ModelArg};

/// Closing text of `generate --help` and `chat --help`: settings precedence, where defaults
/// differ from upstream, exit codes.
fn generate_help() -> String {
    format!(
        "Settings: flags over the model's generation_config.json over the engine's defaults. {}\n\n{}",
        unmask_engine::run::DEFAULTS_THAT_DIFFER,
        exit::HELP
    )
}

/// Unmask: on-device inference for diffusion LLMs.
#[derive(Parser, Debug)]
#[command(name = "unmask", version, about, propagate_version = true, after_help = exit::HELP)]
struct Cli {
    /// Worker threads (default: one per core, or $UNMASK_THREADS).
    #[arg(long, global = true, default_value_t = 0)]
    threads: usize,
    /// Data folder of the store (models, runs, traces) [default: $UNMASK_DATA_DIR, else the
    /// platform folder, e.g. ~/.local/share/unmask].
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate a reply to one prompt (recorded as a run unless --no-record).
    #[command(after_help = generate_help())]
    Generate {
        /// The user message (rendered with the model's chat template unless --raw).
        #[arg(required_unless_present = "prompt_file", conflicts_with = "prompt_file")]
        prompt: Option<String>,
        /// Read the prompt from a file instead (`-` = standard input); any bytes are accepted,
        /// invalid UTF-8 is replaced by U+FFFD with a warning.
        #[arg(long, value_name = "PATH")]
        prompt_file: Option<PathBuf>,
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
        draft: DraftArgs,
        #[command(flatten)]
        output: generate::OutputArgs,
    },
    /// Interactive multi-turn chat (reads lines from standard input; /reset, /quit). Each reply
    /// is recorded as a run unless --no-record.
    #[command(after_help = generate_help())]
    Chat {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        decode: DecodeArgs,
        #[command(flatten)]
        backend: BackendArgs,
        #[command(flatten)]
        draft: DraftArgs,
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
    /// Reproduce the recorded benchmarks (docs/benchmarks.md): run harness suites (bench/results/SUITE.json).
    #[command(after_help = exit::HELP)]
    Bench(bench_cmd::BenchArgs),
    /// Manage the models in the store.
    #[command(after_help = exit::HELP)]
    Models {
        #[command(subcommand)]
        action: models_cmd::ModelsAction,
    },
    /// Inspect and compare recorded runs.
    #[command(after_help = exit::HELP)]
    Runs {
        #[command(subcommand)]
        action: runs_cmd::RunsAction,
    },
    /// Serve models over an OpenAI-compatible HTTP API (chat and text completions, streaming,
    /// per-step diffusion canvas); runs are recorded unless --no-record. See docs/serve.md.
    #[command(after_help = exit::HELP)]
    Serve(serve::ServeArgs),
    /// Mixture-of-experts models: calibrate expert capacities, show a calibration.
    #[command(after_help = exit::HELP)]
    Moe {
        #[command(subcommand)]
        action: moe_cmd::MoeAction,
    },
    /// Export a run's trace.
    #[command(after_help = exit::HELP)]
    Trace {
        #[command(subcommand)]
        action: trace_cmd::TraceAction,
    },
}

/// More worker threads than this is a typo, not a machine (and would exhaust the process).
const MAX_THREADS: usize = 1024;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.threads > MAX_THREADS {
        eprintln!("error: --threads {} is more than the {MAX_THREADS} supported (0 = one per core)", cli.threads);
        return ExitCode::from(exit::USAGE);
    }
    unmask_engine::threads::init(cli.threads);
    let dd = cli.data_dir.as_deref();
    let result = match cli.command {
        Command::Generate { prompt, prompt_file, raw, model, decode, backend, draft, output } => {
            generate::read_prompt(prompt, prompt_file.as_deref())
                .and_then(|p| generate::run_generate(&p, raw, &model, &decode, &backend, &draft, &output, dd))
        }
        Command::Chat { model, decode, backend, draft, output } => {
            generate::run_chat(&model, &decode, &backend, &draft, &output, dd)
        }
        Command::Info { model, json } => generate::run_info(&model, json, dd),
        Command::Models { action } => models_cmd::run(action, dd),
        Command::Runs { action } => runs_cmd::run(action, dd),
        Command::Trace { action } => trace_cmd::run(action, dd),
        Command::Moe { action } => moe_cmd::run(action, dd),
        Command::Bench(args) => bench_cmd::run(&args),
        Command::Serve(args) => serve::run(args, dd),
    };
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            // An empty message means the error was already shown where it happened.
            let text = exit::one_line(&e);
            if !text.is_empty() {
                eprintln!("error: {text}");
            }
            ExitCode::from(exit::code_of(&e))
        }
    }
}
