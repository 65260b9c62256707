//! `unmask runs list|show|compare`: the recorded runs, one or side by side.

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};
use unmask_store::{RunRecord, StoreError};

use crate::data::{self, Data};
use crate::exit::{fail, UNAVAILABLE};

/// What `unmask runs` does.
#[derive(Subcommand, Debug)]
pub enum RunsAction {
    /// Recent runs, newest first.
    List {
        /// Only runs of this model (name as recorded).
        #[arg(long)]
        model: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print JSON (an array of run records).
        #[arg(long)]
        json: bool,
    },
    /// One run: prompt, settings, output, metrics; --steps adds its step trace.
    Show {
        /// Run id (from `unmask runs list`, or `run_id` of `generate --json`).
        run: i64,
        /// Also list every recorded step (block, window, changes, committed, time).
        #[arg(long)]
        steps: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Runs side by side: outputs, steps, forwards, tokens/forward, wall, simulated time,
    /// energy, the settings that differ, and ratios against the first run.
    Compare {
        /// Two or more run ids.
        #[arg(num_args = 2.., required = true)]
        runs: Vec<i64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `runs` subcommand.
pub fn run(action: RunsAction, data_dir: Option<&Path>) -> Result<()> {
    let data = Data::open(&data::data_dir(data_dir)?)?;
    match action {
        RunsAction::List { model, limit, json } => list(&data, model.as_deref(), limit, json),
        RunsAction::Show { run, steps, json } => show(&data, run, steps, json),
        RunsAction::Compare { runs, json } => compare(&data, &runs, json),
    }
}

/// A run by id; a missing one is exit code 3.
fn detail(data: &Data, id: i64) -> Result<RunRecord> {
    match data.block_on(data.store().run_detail(id)) {
        Ok(r) => Ok(r),
        Err(StoreError::NotFound { .. }) => Err(fail(UNAVAILABLE, format!("no run {id} in the store (`unmask runs list`)"))),
        Err(e) => Err(e.into()),
    }
}

fn list(data: &Data, model: Option<&str>, limit: u32, json_out: bool) -> Result<()> {
    let store = data.store();
    let runs = match model {
        // Runs keep their model name even when the model is gone or was a bare path, so filter by name.
        Some(name) => data
            .block_on(store.recent_runs(100_000, 0))?
            .into_iter()
            .filter(|r| r.model_name == name)
            .take(limit as usize)
            .collect(),
        None => data.block_on(store.recent_runs(limit, 0))?,
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    println!(
        "{:>5}  {:<11} {:<16} {:<14} {:>5} {:>5} {:>7} {:>8} {:>9}  PROMPT",
        "RUN", "STATUS", "MODEL", "BACKEND", "STEPS", "FWDS", "TOK/FWD", "WALL", "SIM NPU"
    );
    for r in &runs {
        let m = &r.metrics;
        println!(
            "{:>5}  {:<11} {:<16} {:<14} {:>5} {:>5} {:>7} {:>8} {:>9}  {}",
            r.id,
            r.status.as_str(),
            clip(&r.model_name, 16),
            clip(&r.backend.to_string(), 14),
            opt(m.steps.map(|v| v.to_string())),
            opt(m.forwards.map(|v| v.to_string())),
            opt(m.tokens_per_forward.map(|v| format!("{v:.2}"))),
            opt(m.wall_s.map(secs)),
            opt(m.simulated_npu_s.map(secs)),
            clip(&one_line(&r.prompt), 40)
        );
    }
    Ok(())
}

fn show(data: &Data, id: i64, steps: bool, json_out: bool) -> Result<()> {
    let r = detail(data, id)?;
    let frames = if steps { Some(data.block_on(data.store().run_trace(id))?) } else { None };
    if json_out {
        let mut v = json!({ "run": r });
        if let Some(m) = data.block_on(data.store().run_moe(r.id))? {
            v["moe"] = m;
        }
        if let Some(sp) = data.block_on(data.store().run_speculation(r.id))? {
            v["speculation"] = json!({"draft_model": sp.draft_model, "stats": sp.stats});
        }
        if let Some(f) = &frames {
            v["steps"] = Value::Array(f.iter().map(step_json).collect());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let m = &r.metrics;
    println!("run        {} ({})", r.id, r.status.as_str());
    println!("model      {}", r.model_name);
    println!("backend    {}", r.backend);
    println!("prompt     {}", one_line(&r.prompt));
    println!("output     {}", r.output.as_deref().map(one_line).unwrap_or_else(|| "–".into()));
    if let Some(e) = &r.error {
        println!("error      {e}");
    }
    println!("stop       {}", r.stop_reason.as_deref().unwrap_or("–"));
    println!(
        "metrics    {} steps · {} forwards · {} tokens/forward · {} wall · {} simulated NPU · {} energy",
        opt(m.steps.map(|v| v.to_string())),
        opt(m.forwards.map(|v| v.to_string())),
        opt(m.tokens_per_forward.map(|v| format!("{v:.2}"))),
        opt(m.wall_s.map(secs)),
        opt(m.simulated_npu_s.map(secs)),
        opt(m.energy_mj.map(|e| format!("{e:.1} mJ")))
    );
    if let Some(sp) = data.block_on(data.store().run_speculation(r.id))? {
        let n = |k: &str| sp.stats[k].as_u64().unwrap_or(0);
        let rate = if n("offered") > 0 { 100.0 * n("accepted") as f64 / n("offered") as f64 } else { 0.0 };
        println!(
            "speculation draft {} · {} schedule · {} drafted · {} judged · {} accepted ({rate:.0} %) · {} discarded",
            sp.draft_model,
            sp.stats["schedule"].as_str().unwrap_or("–"),
            n("drafted"),
            n("offered"),
            n("accepted"),
            n("discarded")
        );
    }
    if let Some(m) = data.block_on(data.store().run_moe(r.id))? {
        let n = |k: &str| m[k].as_u64().unwrap_or(0);
        let rate = if n("routed") > 0 { 100.0 * n("dropped") as f64 / n("routed") as f64 } else { 0.0 };
        println!(
            "moe        {} expert launches · {} of {} routed pairs dropped ({rate:.1} %) · {} padding rows",
            n("launches"),
            n("dropped"),
            n("routed"),
            n("padded_rows")
        );
    }
    println!("trace      {} frames{}", r.trace_frames, if r.has_timeline { " · timeline stored (unmask trace export)" } else { "" });
    println!("settings   {}", serde_json::to_string(&r.settings)?);
    if let Some(frames) = frames {
        println!("\n{:>5} {:>11} {:>7} {:>8} {:>10} {:>9} {:>9}", "STEP", "BLOCK", "WINDOW", "CHANGES", "COMMITTED", "WALL", "SIM");
        for f in &frames {
            println!(
                "{:>5} {:>11} {:>7} {:>8} {:>10} {:>9} {:>9}",
                f.step,
                format!("{}–{}", f.block.0, f.block.1),
                f.forward_tokens,
                f.changes.len(),
                f.committed_total,
                secs(f.step_wall_s),
                opt(f.simulated_s.map(secs))
            );
        }
    }
    Ok(())
}

fn step_json(f: &unmask_engine::decode::StepFrame) -> Value {
    json!({
        "step": f.step, "block": [f.block.0, f.block.1], "forward_tokens": f.forward_tokens,
        "changes": f.changes.len(), "committed_total": f.committed_total,
        "step_wall_s": f.step_wall_s, "simulated_s": f.simulated_s,
    })
}

fn compare(data: &Data, ids: &[i64], json_out: bool) -> Result<()> {
    let runs: Vec<RunRecord> = ids.iter().map(|&id| detail(data, id)).collect::<Result<_>>()?;
    // Settings as flat JSON maps; a key is shown when any run differs from the others.
    let maps: Vec<serde_json::Map<String, Value>> = runs
        .iter()
        .map(|r| match serde_json::to_value(&r.settings) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        })
        .collect();
    let mut keys: Vec<&String> = maps.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<(String, Vec<Value>)> = keys
        .into_iter()
        .filter_map(|k| {
            let vals: Vec<Value> = maps.iter().map(|m| m.get(k).cloned().unwrap_or(Value::Null)).collect();
            vals.windows(2).any(|w| w[0] != w[1]).then(|| (k.clone(), vals))
        })
        .collect();
    let first = runs[0].id;
    let versus: Vec<unmask_store::RunComparison> = runs[1..]
        .iter()
        .map(|r| data.block_on(data.store().compare_runs(first, r.id)))
        .collect::<unmask_store::Result<_>>()?;
    if json_out {
        let v = json!({
            "runs": runs,
            "settings_diff": differing.iter().map(|(k, v)| (k.clone(), Value::Array(v.clone()))).collect::<serde_json::Map<_, _>>(),
            "versus_first": versus.iter().map(|c| json!({
                "run": c.b.id, "same_output": c.same_output,
                "first_token_difference": c.first_token_difference, "ratios": c.ratios,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    const W: usize = 26;
    let row = |label: &str, cells: Vec<String>| {
        let mut line = format!("{label:<18}");
        for c in cells {
            line.push_str(&format!(" {:<W$}", clip(&c, W)));
        }
        println!("{}", line.trim_end());
    };
    let per = |f: &dyn Fn(&RunRecord) -> String| runs.iter().map(f).collect::<Vec<_>>();
    row("run", per(&|r| r.id.to_string()));
    row("status", per(&|r| r.status.as_str().to_owned()));
    row("model", per(&|r| r.model_name.clone()));
    row("backend", per(&|r| r.backend.to_string()));
    row("prompt", per(&|r| one_line(&r.prompt)));
    row("output", per(&|r| r.output.as_deref().map(one_line).unwrap_or_else(|| "–".into())));
    row("steps", per(&|r| opt(r.metrics.steps.map(|v| v.to_string()))));
    row("forwards", per(&|r| opt(r.metrics.forwards.map(|v| v.to_string()))));
    row("tokens/forward", per(&|r| opt(r.metrics.tokens_per_forward.map(|v| format!("{v:.2}")))));
    row("wall", per(&|r| opt(r.metrics.wall_s.map(secs))));
    row("simulated NPU", per(&|r| opt(r.metrics.simulated_npu_s.map(secs))));
    row("energy", per(&|r| opt(r.metrics.energy_mj.map(|e| format!("{e:.1} mJ")))));
    row("trace frames", per(&|r| r.trace_frames.to_string()));
    for (k, vals) in &differing {
        row(&format!("≠ {k}"), vals.iter().map(|v| v.to_string()).collect());
    }
    let mut same = vec!["(reference)".to_owned()];
    let mut ratio_wall = vec!["1.00×".to_owned()];
    let mut ratio_fwd = vec!["1.00×".to_owned()];
    for c in &versus {
        same.push(match (c.same_output, c.first_token_difference) {
            (true, _) => "same output".into(),
            (false, Some(i)) => format!("differs from token {i}"),
            (false, None) => "differs".into(),
        });
        let ratio = |k: &str| c.ratios.get(k).map(|x| format!("{x:.2}×")).unwrap_or_else(|| "–".into());
        ratio_wall.push(ratio("wall_s"));
        ratio_fwd.push(ratio("forwards"));
    }
    row("vs first run", same);
    row("wall ÷ first", ratio_wall);
    row("forwards ÷ first", ratio_fwd);
    Ok(())
}

fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| "–".into())
}

fn one_line(s: &str) -> String {
    s.replace('\n', "↵")
}

fn clip(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}
