//! `unmask generate`, `unmask chat` and `unmask info`.

use std::io::{BufRead, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use unmask_engine::decode::{CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{load_model, ChatMessage, LoadedModel};
use unmask_engine::run::{ModelParts, RunOutcome, RunPrompt, Session};

use crate::args::{BackendArgs, DecodeArgs, DraftArgs, ModelArg};
use crate::data::{self, Data, ResolvedModel};
use crate::live::LiveCanvas;
use crate::model_path;
use crate::record::Recording;

/// How results are shown and kept.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Redraw the denoising canvas every step (default: on when stdout is a terminal).
    #[arg(long, conflicts_with = "no_live")]
    pub live: bool,
    /// Never draw the live canvas.
    #[arg(long)]
    pub no_live: bool,
    /// Print one JSON object per reply (text, tokens, run metrics and the run id).
    #[arg(long)]
    pub json: bool,
    /// Print run metrics (steps, forwards, tokens per forward, time) after each reply.
    #[arg(long)]
    pub stats: bool,
    /// Do not record the run (settings, output, metrics, step trace, vNPU timeline) in the store.
    #[arg(long)]
    pub no_record: bool,
}

impl OutputArgs {
    fn live_enabled(&self) -> bool {
        !self.json && !self.no_live && (self.live || std::io::stdout().is_terminal())
    }
}

/// A CLI session: the engine's run session plus where runs are recorded.
struct Cli {
    session: Session,
    model: ResolvedModel,
    data: Option<Data>,
    /// Display name of the draft model (`--draft`), recorded with each run.
    draft: Option<String>,
}

fn open(
    model: &ModelArg,
    backend: &BackendArgs,
    draft: &DraftArgs,
    out: &OutputArgs,
    data_dir: Option<&Path>,
) -> Result<Cli> {
    let spec = backend.spec()?;
    let data = if out.no_record { None } else { Some(Data::open(&data::data_dir(data_dir)?)?) };
    let resolved = resolve(model.model.as_deref(), data.as_ref(), data_dir)?;
    let parts = Arc::new(ModelParts::from(load(&resolved.path)?));
    let mut session = Session::open(parts, &spec)?;
    if let Some(plan) = crate::moe_cmd::stored_plan(&session, &resolved, data.as_ref(), data_dir)? {
        session.set_moe_plan(plan)?;
    }
    let mut draft_name = None;
    if let Some(name) = draft.draft.as_deref() {
        let draft_model = resolve(Some(name), data.as_ref(), data_dir)?;
        draft_name = Some(draft_model.name.clone());
        let draft_parts = Arc::new(ModelParts::from(load(&draft_model.path).context("loading the draft model")?));
        session
            .set_draft(draft_parts, draft.settings())
            .map_err(|e| crate::exit::fail(crate::exit::USAGE, format!("--draft {name}: {e}")))?;
    }
    Ok(Cli { session, model: resolved, data, draft: draft_name })
}

/// A model name or path as `--model` takes it.
fn resolve(name: Option<&str>, data: Option<&Data>, data_dir: Option<&Path>) -> Result<ResolvedModel> {
    data::resolve_model_in(name, data, &data::data_dir(data_dir)?)
}

/// Loads a model; the context names the path only when the error itself does not already.
fn load(path: &Path) -> Result<LoadedModel> {
    load_model(path).map_err(|e| {
        let shown = path.display().to_string();
        if e.to_string().contains(&shown) {
            anyhow::Error::new(e).context("loading model")
        } else {
            anyhow::Error::new(e).context(format!("loading model {shown}"))
        }
    })
}

/// Prompts larger than this are refused before they are read into memory.
const MAX_PROMPT_BYTES: u64 = 16 << 20;

/// The prompt of `generate`: the argument, or the bytes of `--prompt-file` (`-` = stdin).
pub fn read_prompt(arg: Option<String>, file: Option<&Path>) -> Result<String> {
    use std::io::Read;
    let Some(file) = file else {
        return arg.ok_or_else(|| crate::exit::fail(crate::exit::USAGE, "no prompt given (pass it or --prompt-file)"));
    };
    let too_big = |what: &str| {
        crate::exit::fail(
            crate::exit::INVALID,
            format!("{what} is larger than the {} MiB a prompt may have", MAX_PROMPT_BYTES >> 20),
        )
    };
    let mut bytes = Vec::new();
    if file == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(MAX_PROMPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .context("reading the prompt from standard input")?;
        if bytes.len() as u64 > MAX_PROMPT_BYTES {
            return Err(too_big("the prompt on standard input"));
        }
    } else {
        let f = std::fs::File::open(file).map_err(|e| {
            let code =
                if e.kind() == std::io::ErrorKind::NotFound { crate::exit::UNAVAILABLE } else { crate::exit::OTHER };
            crate::exit::fail(code, format!("prompt file {}: {e}", file.display()))
        })?;
        f.take(MAX_PROMPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| crate::exit::fail(crate::exit::UNAVAILABLE, format!("prompt file {}: {e}", file.display())))?;
        if bytes.len() as u64 > MAX_PROMPT_BYTES {
            return Err(too_big(&format!("prompt file {}", file.display())));
        }
    }
    match String::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => {
            eprintln!("warning: the prompt is not valid UTF-8; invalid bytes were replaced by U+FFFD");
            Ok(String::from_utf8_lossy(e.as_bytes()).into_owned())
        }
    }
}

fn report(o: &RunOutcome, out: &OutputArgs, backend: &str, executor: &str, run_id: Option<i64>) -> Result<()> {
    let d = &o.output;
    if out.json {
        println!(
            "{}",
            serde_json::to_string(&json!({
                "text": o.text.trim(), "tokens": d.tokens, "answer": o.answer, "answer_tokens": o.answer_tokens,
                "steps": d.steps, "forwards": d.forwards,
                "tokens_per_forward": o.answer_tokens_per_forward(),
                "canvas_tokens_per_forward": d.tokens_per_forward, "wall_s": d.wall_s,
                "simulated_s": d.simulated_s, "stop_reason": d.stop_reason, "backend": backend, "executor": executor,
                "run_id": run_id, "speculation": o.speculation, "moe": o.moe,
            }))?
        );
        return Ok(());
    }
    println!("{}", o.text.trim());
    if o.text.trim().is_empty() {
        // A blank line alone reads as a hang or a crash; say what happened.
        eprintln!("note: the answer is empty: the model ended its reply at once.");
    }
    if out.stats {
        let sim = d.simulated_s.map(|s| format!(", {:.1} ms simulated NPU time", s * 1e3)).unwrap_or_default();
        let run = run_id.map(|id| format!(" · run {id}")).unwrap_or_default();
        if let Some(sp) = &o.speculation {
            eprintln!(
                "[speculative {}] {} drafted, {} judged, {} accepted ({:.0} %), {} target + {} draft forwards",
                sp.schedule.map(|s| s.to_string()).unwrap_or_default(),
                sp.drafted,
                sp.offered,
                sp.accepted,
                100.0 * sp.acceptance_rate(),
                sp.verify_forwards,
                sp.draft_forwards
            );
        }
        if let Some(m) = o.moe.as_ref().filter(|m| m.layer_runs > 0) {
            eprintln!(
                "[moe] {} expert launches over {} layer runs, {} of {} routed pairs dropped ({:.1} %), {} padding rows, {} cpu-lane groups",
                m.launches,
                m.layer_runs,
                m.dropped,
                m.routed,
                100.0 * m.drop_rate(),
                m.padded_rows,
                m.cpu_lane_groups
            );
        }
        eprintln!(
            "[{backend}] {} answer tokens in {} steps, {} forwards, {:.2} answer tokens/forward, {:.2} s wall{sim}{run}",
            o.answer_tokens,
            d.steps,
            d.forwards,
            o.answer_tokens_per_forward(),
            d.wall_s
        );
    }
    Ok(())
}

/// One generation through the session: recorded (unless --no-record), drawn live (when asked),
/// its outcome and timeline stored.
fn recorded_run(
    c: &mut Cli,
    user_text: &str,
    ids: &[u32],
    settings: &DecodeSettings,
    out: &OutputArgs,
) -> Result<(RunOutcome, Option<i64>)> {
    // Before the live canvas or the recording is sized by the request.
    c.session.check(ids, settings)?;
    let mut recording = match &c.data {
        Some(d) => Some(Recording::start(d, &c.model, c.session.backend(), user_text, settings)?.with_draft(c.draft.clone())),
        None => None,
    };
    let live = out.live_enabled();
    let cfg = c.session.model().transformer.config.clone();
    let stop = c.session.stop_ids(settings);
    let parts = Arc::clone(&c.session.model_arc());
    let mut canvas = live.then(|| {
        LiveCanvas::new(&parts.tokenizer, ids.len(), settings.gen_length, cfg.mask_token_id.unwrap_or(0), stop)
    });
    let mut stdout = std::io::stdout();
    let mut on_frame = |f: &StepFrame| {
        if let Some(r) = recording.as_mut() {
            r.record(f);
        }
        if let Some(cv) = canvas.as_mut() {
            cv.apply(f);
            let _ = cv.draw(&mut stdout, f);
        }
        ControlFlow::Continue(())
    };
    let cancel = CancelFlag::new();
    let result = c.session.run(ids, settings, &cancel, &mut on_frame);
    if let Some(cv) = canvas.as_mut() {
        let _ = cv.clear(&mut std::io::stdout());
    }
    match (result, recording) {
        (Ok(o), Some(r)) => {
            let id = r.finish(&o)?;
            Ok((o, Some(id)))
        }
        (Ok(o), None) => Ok((o, None)),
        (Err(e), Some(r)) => {
            // Keep the failed run (and its partial trace) for `runs show`, then report the error.
            let e = anyhow::Error::new(e);
            let _ = r.fail(&e);
            Err(e)
        }
        (Err(e), None) => Err(e.into()),
    }
}

/// `unmask generate PROMPT`.
#[allow(clippy::too_many_arguments)]
pub fn run_generate(
    prompt: &str,
    raw: bool,
    model: &ModelArg,
    decode: &DecodeArgs,
    backend: &BackendArgs,
    draft: &DraftArgs,
    out: &OutputArgs,
    data_dir: Option<&Path>,
) -> Result<()> {
    let mut c = open(model, backend, draft, out, data_dir)?;
    let settings = c.session.settings(&decode.overrides())?;
    let messages = [ChatMessage::user(prompt)];
    let ids = c.session.prompt_ids(if raw { RunPrompt::Raw(prompt) } else { RunPrompt::Chat(&messages) })?;
    let (o, run_id) = recorded_run(&mut c, prompt, &ids, &settings, out)?;
    let executor = c.session.executor().name();
    report(&o, out, &c.session.backend().to_string(), &executor, run_id)?;
    if raw && !out.json && o.text.trim().is_empty() {
        eprintln!(
            "note: --raw sends no chat template; a chat model given a question that way often ends \
             at once. --raw suits text to continue."
        );
    }
    Ok(())
}

/// `unmask chat`: one reply per input line until EOF or /quit; each reply is a recorded run.
pub fn run_chat(
    model: &ModelArg,
    decode: &DecodeArgs,
    backend: &BackendArgs,
    draft: &DraftArgs,
    out: &OutputArgs,
    data_dir: Option<&Path>,
) -> Result<()> {
    let mut c = open(model, backend, draft, out, data_dir)?;
    let settings = c.session.settings(&decode.overrides())?;
    let mut history: Vec<ChatMessage> = Vec::new();
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "unmask chat · {} ({}) · {} (type /reset to start over, /quit or Ctrl-D to leave)",
            c.model.name,
            c.session.model().transformer.config.arch.gguf_name(),
            c.session.backend()
        );
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut raw_line = Vec::new();
    let mut failed: Option<anyhow::Error> = None;
    let mut left_out = 0;
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush().ok();
        }
        raw_line.clear();
        if input.read_until(b'\n', &mut raw_line).context("reading standard input")? == 0 {
            break;
        }
        let line = match std::str::from_utf8(&raw_line) {
            Ok(l) => l.to_owned(),
            Err(_) => {
                eprintln!("warning: this line is not valid UTF-8; invalid bytes were replaced by U+FFFD");
                String::from_utf8_lossy(&raw_line).into_owned()
            }
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                history.clear();
                left_out = 0;
                c.session.forget_context();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::user(line));
        // A long chat keeps going: the oldest exchanges that no longer fit the context are left
        // out of the prompt (the history keeps them; /reset clears it).
        let fitted = c.session.chat_prompt_ids(&history, &settings)?;
        if fitted.left_out > left_out {
            eprintln!(
                "note: the {} oldest messages no longer fit the model's context of {} tokens and are left out",
                fitted.left_out,
                c.session.model().transformer.config.max_seq
            );
        }
        left_out = fitted.left_out;
        let ids = fitted.ids;
        match recorded_run(&mut c, line, &ids, &settings, out) {
            Ok((o, run_id)) => {
                history.push(ChatMessage::assistant(o.text.clone()));
                let executor = c.session.executor().name();
                report(&o, out, &c.session.backend().to_string(), &executor, run_id)?;
            }
            // A turn that does not fit is reported and the conversation goes on without it.
            Err(e) if crate::exit::code_of(&e) == crate::exit::INVALID => {
                history.pop();
                eprintln!("error: {} (this turn was not run; /reset starts over)", crate::exit::one_line(&e));
                failed = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    // The exit status still tells a script that some turn was refused (its error was shown).
    match failed {
        Some(e) => Err(crate::exit::fail(crate::exit::code_of(&e), "")),
        None => Ok(()),
    }
}

/// `unmask info`.
pub fn run_info(model: &ModelArg, json_out: bool, data_dir: Option<&Path>) -> Result<()> {
    // The store is only consulted for names the embedded models and paths do not cover.
    let path = match model_path::resolve(model.model.as_deref()) {
        Ok(p) => p,
        Err(e) => match Data::open(&data::data_dir(data_dir)?) {
            Ok(d) => data::resolve_model(model.model.as_deref(), Some(&d)).map_err(|_| e)?.path,
            Err(_) => return Err(e),
        },
    };
    let m = load(&path)?;
    let c = m.config();
    let params: usize = m.transformer.weights.matrix_bytes();
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "path": m.path, "config": c, "weight_bytes": params, "file_bytes": m.file_bytes,
                "tokenizer_vocab": m.tokenizer.vocab_size(), "generation": m.generation, "template": m.template,
            }))?
        );
    } else {
        let id = |v: Option<u32>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        println!("model      {}", m.path.display());
        println!(
            "arch       {} ({})",
            c.arch.gguf_name(),
            if c.arch.is_diffusion() { "diffusion" } else { "autoregressive" }
        );
        println!(
            "shape      hidden {} · {} layers · {} heads ({} kv) · head_dim {} · ffn {}",
            c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn
        );
        if let Some(moe) = &c.moe {
            println!("moe        {} experts, top-{}, expert ffn {}", moe.n_experts, moe.top_k, moe.expert_ffn);
        }
        println!("vocab      {} (tokenizer {})", c.vocab, m.tokenizer.vocab_size());
        println!("context    {}", c.max_seq);
        println!(
            "special    mask {} · bos {} · eos {} · eot {} · pad {}",
            id(c.mask_token_id),
            id(c.bos_token_id),
            id(c.eos_token_id),
            id(c.eot_token_id),
            id(c.pad_token_id)
        );
        println!("weights    {:.1} MB in memory, {:.1} MB on disk", params as f64 / 1e6, m.file_bytes as f64 / 1e6);
        let g = &m.generation;
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!(
            "defaults   gen_length {} · block_length {} · steps {} · temperature {} · remasking {}",
            opt(g.gen_length.map(|v| v.to_string())),
            opt(g.block_length.map(|v| v.to_string())),
            opt(g.steps.map(|v| v.to_string())),
            opt(g.temperature.map(|v| v.to_string())),
            opt(g.remasking.map(|r| r.to_string()))
        );
    }
    Ok(())
}
