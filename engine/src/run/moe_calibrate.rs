//! Offline MoE calibration: runs a calibration set through the model and counts, per layer and
//! expert, the tokens routed there, by prompt-length bucket ([`MoeCalibration`]).

use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvMode, Transformer};
use crate::moe::calibration::DEFAULT_BUCKETS;
use crate::moe::ffn::{MoeExecution, StaticPlan, DEFAULT_GROUP_SIZE};
use crate::moe::{CapacityTiers, MoeCalibration};

/// What one calibration forward looks like.
#[derive(Debug, Clone)]
pub struct CalibrationShape {
    /// Masked rows appended after each prompt: a diffusion model's forwards always carry the
    /// answer canvas with the prompt, so its routing is calibrated on that shape (0 for AR models).
    pub canvas_rows: usize,
    /// Prompt-length buckets.
    pub buckets: Vec<usize>,
}

impl CalibrationShape {
    /// The shape the model's own runs have: its default answer length as masks for a diffusion
    /// model, the prompt alone for an autoregressive one.
    pub fn for_model(model: &Transformer, gen_length: usize) -> Self {
        let canvas_rows = if model.config.arch.is_diffusion() { gen_length } else { 0 };
        CalibrationShape { canvas_rows, buckets: DEFAULT_BUCKETS.to_vec() }
    }
}

/// Runs every prompt once (exact routing, nothing dropped) and returns the counts. `progress` is
/// called after each prompt with (done, total).
pub fn calibrate_moe(
    model: &Transformer,
    prompts: &[Vec<u32>],
    shape: &CalibrationShape,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<MoeCalibration> {
    let (layers, experts) = model
        .moe_shape()
        .ok_or_else(|| EngineError::InvalidRequest("calibration needs a mixture-of-experts model".into()))?;
    let top_k = model.config.moe.as_ref().map_or(0, |m| m.top_k);
    let mut cal = MoeCalibration::new(layers, experts, top_k, &shape.buckets)?;
    let mask = model.config.mask_token_id;
    if shape.canvas_rows > 0 && mask.is_none() {
        return Err(EngineError::InvalidRequest("a diffusion model without a mask token cannot be calibrated".into()));
    }
    let before = model.moe_execution();
    model.set_moe_execution(MoeExecution::default())?;
    model.take_moe_stats();
    let result = (|| {
        for (i, p) in prompts.iter().enumerate() {
            let mut tokens = p.clone();
            tokens.extend(std::iter::repeat_n(mask.unwrap_or(0), shape.canvas_rows));
            let n = tokens.len().min(model.config.max_seq);
            if n == 0 {
                continue;
            }
            let positions: Vec<usize> = (0..n).collect();
            // Every row through every layer (a plain forward runs the last layer only for rows
            // whose logits are asked for), without computing any logits.
            let req = ForwardRequest { tokens: &tokens[..n], positions: &positions, logits_rows: &[], kv: KvMode::Ignore };
            model.forward_every_row(&req, None)?;
            let stats = model.take_moe_stats();
            cal.record(n, &stats.expert_tokens)?;
            progress(i + 1, prompts.len());
        }
        Ok(cal)
    })();
    model.set_moe_execution(before)?;
    result
}

/// The static plan for `model`: from its calibration when there is one that fits, else uniform.
pub fn static_plan(model: &Transformer, calibration: Option<&MoeCalibration>) -> Result<Arc<StaticPlan>> {
    let (layers, experts) = model
        .moe_shape()
        .ok_or_else(|| EngineError::InvalidRequest("static MoE tiers asked for a model without MoE layers".into()))?;
    let top_k = model.config.moe.as_ref().map_or(0, |m| m.top_k);
    let plan = match calibration {
        Some(c) => {
            c.check_shape(layers, experts, top_k)?;
            StaticPlan::from_calibration(c, &CapacityTiers::default(), DEFAULT_GROUP_SIZE)
        }
        None => StaticPlan::uniform(layers, experts, top_k, DEFAULT_BUCKETS, DEFAULT_GROUP_SIZE),
    };
    Ok(Arc::new(plan))
}
