//! `unmask moe`: calibrate a mixture-of-experts model's expert capacities (stored with the model)
//! and show a calibration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;
use unmask_engine::model::ChatMessage;
use unmask_engine::moe::ffn::StaticPlan;
use unmask_engine::moe::MoeCalibration;
use unmask_engine::run::{calibrate_moe, static_plan, CalibrationShape, ModelParts, RunPrompt, Session};
use unmask_store::ModelRecord;

use crate::args::ModelArg;
use crate::data::{self, Data, ResolvedModel};
use crate::exit::{fail, INVALID, UNAVAILABLE, USAGE};

/// The calibration a run uses (one per model).
pub const CALIBRATION_NAME: &str = "default";

/// The default calibration set: the embedded models' validation prompts (the test split, which
/// accuracy is judged on, is never used to calibrate).
const DEFAULT_PROMPTS: &str = include_str!("../../models/data/val.jsonl");

/// Calibration files larger than this are refused before they are read.
const MAX_PROMPTS_BYTES: u64 = 64 << 20;

#[derive(Subcommand, Debug)]
pub enum MoeAction {
    /// Run a calibration set through a MoE model and store per-layer, per-expert token counts by
    /// prompt length; `generate --moe static-tiers` derives its capacity tiers and expert groups
    /// from them. An embedded or path-only model is registered in place first.
    Calibrate {
        #[command(flatten)]
        model: ModelArg,
        /// Prompts, one per line (plain text, or JSON objects with a `message` or `prompt` field);
        /// each is rendered with the model's chat template [default: the embedded validation set].
        #[arg(long, value_name = "PATH")]
        prompts: Option<PathBuf>,
        /// Use at most this many prompts.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Print the calibration as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a model's stored calibration: per layer, how unevenly its experts are used, and the
    /// capacity tiers it gives.
    Show {
        #[command(flatten)]
        model: ModelArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(action: MoeAction, data_dir: Option<&Path>) -> Result<()> {
    let data = Data::open(&data::data_dir(data_dir)?)?;
    match action {
        MoeAction::Calibrate { model, prompts, limit, json } => calibrate(&data, &model, prompts.as_deref(), limit, json),
        MoeAction::Show { model, json } => show(&data, &model, json),
    }
}

fn calibrate(data: &Data, model: &ModelArg, prompts: Option<&Path>, limit: Option<usize>, json: bool) -> Result<()> {
    let resolved = data::resolve_model(model.model.as_deref(), Some(data))?;
    let parts = Arc::new(ModelParts::load(&resolved.path).with_context(|| format!("loading {}", resolved.path.display()))?);
    if parts.transformer.moe_shape().is_none() {
        return Err(fail(INVALID, format!("{} is not a mixture-of-experts model: nothing to calibrate", resolved.name)));
    }
    let messages = read_prompts(prompts)?;
    let messages: Vec<String> = messages.into_iter().take(limit.unwrap_or(usize::MAX)).collect();
    if messages.is_empty() {
        return Err(fail(USAGE, "the calibration set is empty"));
    }
    let record = registered(data, &resolved)?;
    let session = Session::open(parts.clone(), &unmask_engine::run::BackendSpec::Cpu)?;
    let mut ids = Vec::with_capacity(messages.len());
    for m in &messages {
        ids.push(session.prompt_ids(RunPrompt::Chat(&[ChatMessage::user(m.clone())]))?);
    }
    let gen_length = parts.generation.gen_length.unwrap_or(unmask_engine::decode::DecodeSettings::default().gen_length);
    let shape = CalibrationShape::for_model(&parts.transformer, gen_length);
    let bar = crate::progress::count(&crate::progress::multi(), ids.len() as u64, "calibrating");
    let cal = calibrate_moe(&parts.transformer, &ids, &shape, &mut |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let value = serde_json::to_value(&cal)?;
    data.block_on(data.store().put_moe_calibration(record.id, CALIBRATION_NAME, &value))
        .context("storing the calibration")?;
    if json {
        println!("{}", serde_json::to_string(&value)?);
    } else {
        println!(
            "calibrated {} on {} prompts ({}; each forward = prompt + {} answer-canvas rows); stored with the model",
            record.name,
            cal.total_prompts(),
            shape_summary(&cal),
            shape.canvas_rows
        );
        print_summary(&cal, &parts.transformer)?;
    }
    Ok(())
}

fn show(data: &Data, model: &ModelArg, json: bool) -> Result<()> {
    let resolved = data::resolve_model(model.model.as_deref(), Some(data))?;
    let Some(record) = resolved.record.as_ref() else {
        return Err(fail(UNAVAILABLE, format!("{} has no calibration (run `unmask moe calibrate -m {}`)", resolved.name, resolved.name)));
    };
    let Some(cal) = load(data, record)? else {
        return Err(fail(UNAVAILABLE, format!("{} has no calibration (run `unmask moe calibrate -m {}`)", record.name, record.name)));
    };
    if json {
        println!("{}", serde_json::to_string(&cal)?);
        return Ok(());
    }
    let parts = ModelParts::load(&resolved.path)?;
    println!("{}: calibrated on {} prompts ({})", record.name, cal.total_prompts(), shape_summary(&cal));
    print_summary(&cal, &parts.transformer)
}

/// The static plan from the model's stored calibration, when it is a MoE model that has one.
pub fn stored_plan(
    session: &Session,
    resolved: &ResolvedModel,
    data: Option<&Data>,
    data_dir: Option<&Path>,
) -> Result<Option<Arc<StaticPlan>>> {
    let model = &session.model().transformer;
    if model.moe_shape().is_none() {
        return Ok(None);
    }
    let opened;
    let data = match data {
        Some(d) => d,
        None => match Data::open(&data::data_dir(data_dir)?) {
            Ok(d) => {
                opened = d;
                &opened
            }
            Err(_) => return Ok(None),
        },
    };
    let record = match &resolved.record {
        Some(r) => Some(r.clone()),
        None => registered_copy(data, &resolved.path)?,
    };
    let Some(record) = record else { return Ok(None) };
    let Some(cal) = load(data, &record)? else { return Ok(None) };
    match static_plan(model, Some(&cal)) {
        Ok(plan) => Ok(Some(plan)),
        Err(e) => {
            tracing::warn!("ignoring the stored MoE calibration of {}: {e}", record.name);
            Ok(None)
        }
    }
}

fn load(data: &Data, record: &ModelRecord) -> Result<Option<MoeCalibration>> {
    let Some(stored) = data.block_on(data.store().get_moe_calibration(record.id, CALIBRATION_NAME))? else {
        return Ok(None);
    };
    let cal: MoeCalibration = serde_json::from_value(stored.data)
        .map_err(|e| fail(INVALID, format!("the stored calibration of {} is damaged: {e}", record.name)))?;
    Ok(Some(cal))
}

/// The store record of the model at `path`, if it is registered (by path or content).
fn registered_copy(data: &Data, path: &Path) -> Result<Option<ModelRecord>> {
    let canonical = path.canonicalize().ok();
    let models = data.block_on(data.store().list_models())?;
    Ok(models.into_iter().find(|m| canonical.as_deref().is_some_and(|c| data.store().model_path(m) == c)))
}

/// The model's store record, registering it in place (files left where they are) when it has none.
fn registered(data: &Data, resolved: &ResolvedModel) -> Result<ModelRecord> {
    if let Some(r) = &resolved.record {
        return Ok(r.clone());
    }
    if let Some(r) = registered_copy(data, &resolved.path)? {
        return Ok(r);
    }
    match data.block_on(data.store().import_model(&resolved.path, None, true)) {
        Ok(r) => {
            eprintln!("registered {} in place (its files stay where they are) to keep its calibration", r.name);
            Ok(r)
        }
        Err(unmask_store::StoreError::DuplicateModel { existing, .. }) => data
            .block_on(data.store().model_by_name(&existing))?
            .ok_or_else(|| fail(UNAVAILABLE, format!("model `{existing}` vanished from the store"))),
        Err(e) => Err(anyhow::Error::new(e).context(format!("registering {}", resolved.path.display()))),
    }
}

/// The calibration set: the file's lines, or the embedded validation prompts.
fn read_prompts(path: Option<&Path>) -> Result<Vec<String>> {
    let text = match path {
        None => DEFAULT_PROMPTS.to_owned(),
        Some(p) => {
            let meta = std::fs::metadata(p).map_err(|e| fail(UNAVAILABLE, format!("prompts file {}: {e}", p.display())))?;
            if !meta.is_file() {
                return Err(fail(INVALID, format!("prompts file {} is not a regular file", p.display())));
            }
            if meta.len() > MAX_PROMPTS_BYTES {
                return Err(fail(INVALID, format!("prompts file {} is larger than {} MiB", p.display(), MAX_PROMPTS_BYTES >> 20)));
            }
            let bytes = std::fs::read(p).map_err(|e| fail(UNAVAILABLE, format!("prompts file {}: {e}", p.display())))?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(serde_json::Value::Object(o)) => o
                .get("message")
                .or_else(|| o.get("prompt"))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| l.to_owned()),
            _ => l.to_owned(),
        })
        .collect())
}

fn shape_summary(cal: &MoeCalibration) -> String {
    let used: Vec<String> = cal
        .buckets
        .iter()
        .zip(&cal.prompts)
        .filter(|(_, &p)| p > 0)
        .map(|(b, p)| format!("{p} of <= {b} tokens"))
        .collect();
    used.join(", ")
}

/// Per layer: the busiest and idlest expert's share, and the capacities the plan derives.
fn print_summary(cal: &MoeCalibration, model: &unmask_engine::model::Transformer) -> Result<()> {
    let plan = static_plan(model, Some(cal))?;
    let Some(b) = cal.prompts.iter().position(|&p| p > 0) else { return Ok(()) };
    let bucket = cal.buckets[b];
    let uniform = 1.0 / cal.n_experts as f64;
    println!("layer  busiest expert  idlest expert  capacities at {bucket} tokens (rows per expert)");
    for li in 0..cal.n_layers {
        let pop = cal.popularity(b, li);
        let (hot, cold) = pop.iter().enumerate().fold((0, 0), |(h, c), (i, &p)| {
            (if p > pop[h] { i } else { h }, if p < pop[c] { i } else { c })
        });
        let caps = plan.capacities.capacities(bucket, li)?;
        println!(
            "{li:>5}  #{hot:<3} {:>5.1}% ({:.1}x)  #{cold:<3} {:>5.1}%   {caps:?}",
            100.0 * pop[hot],
            pop[hot] / uniform,
            100.0 * pop[cold]
        );
    }
    Ok(())
}
