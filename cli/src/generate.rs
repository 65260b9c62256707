//! `unmask generate`, `unmask chat` and `unmask info`.

use std::io::{BufRead, IsTerminal, Write};
use std::ops::ControlFlow;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, trim_at_stop, CancelFlag, ChatSession, DecodeOutput, DecodeSettings, StepFrame};
use unmask_engine::model::{load_model, ChatMessage, LoadedModel, TextTokenizer, Transformer};

use crate::args::{BackendArgs, BackendKind, DecodeArgs, ModelArg};
use crate::live::LiveCanvas;
use crate::model_path;

/// How results are shown.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Redraw the denoising canvas every step (default: on when stdout is a terminal).
    #[arg(long, conflicts_with = "no_live")]
    pub live: bool,
    /// Never draw the live canvas.
    #[arg(long)]
    pub no_live: bool,
    /// Print one JSON object per reply (text, tokens and run metrics).
    #[arg(long)]
    pub json: bool,
    /// Print run metrics (steps, forwards, tokens per forward, time) after each reply.
    #[arg(long)]
    pub stats: bool,
}

impl OutputArgs {
    fn live_enabled(&self) -> bool {
        !self.json && !self.no_live && (self.live || std::io::stdout().is_terminal())
    }
}

fn load(model: &ModelArg) -> Result<LoadedModel> {
    let path = model_path::resolve(model.model.as_deref())?;
    let m = load_model(&path).with_context(|| format!("loading model {}", path.display()))?;
    Ok(m)
}

fn make_backend(kind: &BackendArgs, t: Arc<Transformer>) -> Result<Box<dyn Backend>> {
    match kind.backend {
        BackendKind::Cpu => Ok(Box::new(CpuBackend::new(t))),
        BackendKind::Vnpu => crate::generate::vnpu_backend(t, &kind.device),
        BackendKind::Qnn => {
            use unmask_engine::backend::qnn::{QnnBackend, QnnOptions};
            let opts = QnnOptions {
                library: kind.qnn_lib.clone(),
                cache_dir: kind.qnn_cache.clone(),
                ..QnnOptions::default()
            };
            Ok(Box::new(QnnBackend::new(t, opts)?))
        }
    }
}

/// The virtual NPU backend for a device profile (real math on the CPU, simulated NPU time).
pub fn vnpu_backend(t: Arc<Transformer>, device: &str) -> Result<Box<dyn Backend>> {
    use unmask_engine::backend::vnpu::{profile::DeviceProfile, VirtualNpu, VnpuConfig};
    let profile = DeviceProfile::builtin(&device.to_lowercase()).with_context(|| {
        format!("unknown device `{device}` (built-in profiles: {})", DeviceProfile::list_builtin().join(", "))
    })?;
    Ok(Box::new(VirtualNpu::new(t, profile, VnpuConfig::default())?))
}

struct Session {
    backend: Box<dyn Backend>,
    tokenizer: TextTokenizer,
    model: LoadedModelInfo,
}

struct LoadedModelInfo {
    template: unmask_engine::model::ChatTemplate,
    generation: unmask_engine::model::GenerationDefaults,
}

fn open(model: &ModelArg, backend: &BackendArgs) -> Result<Session> {
    let m = load(model)?;
    let LoadedModel { transformer, tokenizer, template, generation, .. } = m;
    let backend = make_backend(backend, Arc::new(transformer))?;
    Ok(Session { backend, tokenizer, model: LoadedModelInfo { template, generation } })
}

fn special_ids(s: &Session) -> Vec<u32> {
    let c = s.backend.config();
    let mut v: Vec<u32> = [c.eos_token_id, c.eot_token_id, c.pad_token_id, c.bos_token_id].into_iter().flatten().collect();
    v.extend(s.model.template.stop_strings().iter().filter_map(|t| s.tokenizer.token_id(t)));
    v
}

/// Runs one decode with optional live drawing; returns the output.
fn decode_live(
    backend: &mut dyn Backend,
    tokenizer: &TextTokenizer,
    special: Vec<u32>,
    prompt_len: usize,
    settings: &DecodeSettings,
    out: &OutputArgs,
    run: impl FnOnce(&mut dyn Backend, &mut dyn FnMut(&StepFrame) -> ControlFlow<()>) -> Result<DecodeOutput>,
) -> Result<DecodeOutput> {
    let live = out.live_enabled();
    let mask = backend.config().mask_token_id.unwrap_or(0);
    let mut canvas = LiveCanvas::new(tokenizer, prompt_len, settings.gen_length, mask, special);
    let mut stdout = std::io::stdout();
    let mut on_frame = |f: &StepFrame| {
        if live {
            canvas.apply(f);
            let _ = canvas.draw(&mut stdout, f);
        }
        ControlFlow::Continue(())
    };
    let result = run(backend, &mut on_frame);
    if live {
        let _ = canvas.clear(&mut std::io::stdout());
    }
    result
}

fn report(text: &str, o: &DecodeOutput, out: &OutputArgs, backend: &str) -> Result<()> {
    if out.json {
        println!(
            "{}",
            serde_json::to_string(&json!({
                "text": text, "tokens": o.tokens, "steps": o.steps, "forwards": o.forwards,
                "tokens_per_forward": o.tokens_per_forward, "wall_s": o.wall_s,
                "simulated_s": o.simulated_s, "stop_reason": o.stop_reason, "backend": backend,
            }))?
        );
        return Ok(());
    }
    println!("{text}");
    if out.stats {
        let sim = o.simulated_s.map(|s| format!(", {:.1} ms simulated NPU time", s * 1e3)).unwrap_or_default();
        eprintln!(
            "[{backend}] {} steps, {} forwards, {:.2} tokens/forward, {:.2} s wall{sim}",
            o.steps, o.forwards, o.tokens_per_forward, o.wall_s
        );
    }
    Ok(())
}

/// `unmask generate PROMPT`.
pub fn run_generate(prompt: &str, raw: bool, model: &ModelArg, decode: &DecodeArgs, backend: &BackendArgs, out: &OutputArgs) -> Result<()> {
    let mut s = open(model, backend)?;
    let settings = decode.settings(&s.model.generation);
    let text = if raw { prompt.to_owned() } else { s.model.template.render(&[ChatMessage::user(prompt)], true) };
    let ids = s.tokenizer.encode(&text)?;
    let cancel = CancelFlag::new();
    let stop = special_ids(&s);
    let o = decode_live(s.backend.as_mut(), &s.tokenizer, stop.clone(), ids.len(), &settings, out, |b, f| {
        Ok(generate(b, &ids, &settings, &cancel, f)?)
    })?;
    let answer = s.tokenizer.decode(trim_at_stop(&o.tokens, &stop), true);
    report(answer.trim(), &o, out, &s.backend.name())
}

/// `unmask chat`: one reply per input line until EOF or /quit.
pub fn run_chat(model: &ModelArg, decode: &DecodeArgs, backend: &BackendArgs, out: &OutputArgs) -> Result<()> {
    let mut s = open(model, backend)?;
    let settings = decode.settings(&s.model.generation);
    let mut chat = ChatSession::new(s.model.template.clone(), settings.clone());
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "unmask chat · {} · {} (type /reset to start over, /quit or Ctrl-D to leave)",
            s.backend.config().arch.gguf_name(),
            s.backend.name()
        );
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush().ok();
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading standard input")?;
        let line = line.trim();
        match line {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                chat.messages.clear();
                chat.ar_cache.clear();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        let cancel = CancelFlag::new();
        let prompt_len = {
            let mut msgs = chat.messages.clone();
            msgs.push(ChatMessage::user(line));
            s.tokenizer.encode(&chat.template.render(&msgs, true))?.len()
        };
        let special = special_ids(&s);
        let mut reply_text = String::new();
        let tokenizer = &s.tokenizer;
        let o = decode_live(s.backend.as_mut(), tokenizer, special, prompt_len, &settings, out, |b, f| {
            let r = chat.reply(b, tokenizer, line, &cancel, f)?;
            reply_text = r.text.clone();
            Ok(r.output)
        })?;
        report(reply_text.trim(), &o, out, &s.backend.name())?;
    }
    Ok(())
}

/// `unmask info`.
pub fn run_info(model: &ModelArg, json_out: bool) -> Result<()> {
    let path = model_path::resolve(model.model.as_deref())?;
    let m = load_model(&path).with_context(|| format!("loading model {}", path.display()))?;
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
        println!("model      {}", m.path.display());
        println!("arch       {:?} ({})", c.arch, if c.arch.is_diffusion() { "diffusion" } else { "autoregressive" });
        println!("shape      hidden {} · {} layers · {} heads ({} kv) · head_dim {} · ffn {}", c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn);
        if let Some(moe) = &c.moe {
            println!("moe        {} experts, top-{}, expert ffn {}", moe.n_experts, moe.top_k, moe.expert_ffn);
        }
        println!("vocab      {} (tokenizer {})", c.vocab, m.tokenizer.vocab_size());
        println!("context    {}", c.max_seq);
        println!("mask id    {:?}", c.mask_token_id);
        println!("weights    {:.1} MB in memory, {:.1} MB on disk", params as f64 / 1e6, m.file_bytes as f64 / 1e6);
        println!("defaults   {:?}", m.generation);
    }
    Ok(())
}
