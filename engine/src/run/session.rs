//! A session: one loaded model on one built backend, running generations through the one
//! pipeline (settings → prompt → checks → decode → answer → timeline) that every front end uses.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backend_spec::BackendSpec;
use super::chat_context::{fit_chat, FittedChat};
use super::executor::{Executor, RunTimeline};
use super::overrides::{effective_settings, SettingsOverrides};
use super::stop::stop_ids;
use crate::backend::batch::ForwardBatcher;
use crate::backend::cpu::CpuBackend;
use crate::decode::ar::{generate_ar_reusing, ArPrefixCache};
use crate::decode::spec_ar::{
    check_pair, draft_on_int8, generate_speculative, SpecArCaches, SpecArSettings, SpecArStats,
};
use crate::decode::{check_request, generate_dyn, trim_at_stop, CancelFlag, DecodeOutput, DecodeSettings, StepFrame};
use crate::error::Result;
use crate::model::{
    load_model, ChatMessage, ChatTemplate, GenerationDefaults, LoadedModel, TextTokenizer, Transformer,
};
use crate::moe::ffn::{MoeExecution, MoeStats, StaticPlan};
use crate::moe::MoePolicy;

/// A loaded model's parts that runs need, shareable between sessions (the app caches one).
#[derive(Debug)]
pub struct ModelParts {
    /// The folder or `.gguf` file it was loaded from.
    pub path: PathBuf,
    pub transformer: Arc<Transformer>,
    pub tokenizer: TextTokenizer,
    pub template: ChatTemplate,
    /// `generation_config.json` (applied under the user's overrides).
    pub generation: GenerationDefaults,
    /// Bytes of tensor data in the checkpoint files.
    pub file_bytes: u64,
}

impl ModelParts {
    /// Loads a model folder or `.gguf` file.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Self::from(load_model(path)?))
    }
}

impl From<LoadedModel> for ModelParts {
    fn from(m: LoadedModel) -> Self {
        let LoadedModel { path, transformer, tokenizer, template, generation, file_bytes } = m;
        ModelParts { path, transformer: Arc::new(transformer), tokenizer, template, generation, file_bytes }
    }
}

/// What the model reads: text as is, or a conversation rendered with its chat template.
#[derive(Debug, Clone, Copy)]
pub enum RunPrompt<'a> {
    Raw(&'a str),
    Chat(&'a [ChatMessage]),
}

/// Everything one generation produced, ready to show and to record.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The decoder's result (canvas, counts, times, stop reason).
    pub output: DecodeOutput,
    /// The answer's token ids, cut before the first stop token.
    pub answer: Vec<u32>,
    /// The answer as text (special tokens dropped).
    pub text: String,
    /// Answer tokens counted up to and including the first stop token (never the padding after
    /// it): what "tokens per forward" and "tokens per second" are made of.
    pub answer_tokens: usize,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// The run's slice of the virtual NPU timeline (simulated backends only).
    pub timeline: Option<RunTimeline>,
    /// What speculative decoding did (runs with a draft model only).
    pub speculation: Option<SpecArStats>,
    /// What the MoE layers did: launches, tokens dropped for capacity (MoE models only; counts
    /// are the model's, so runs of one model on several threads at once share them).
    pub moe: Option<MoeStats>,
}

impl RunOutcome {
    /// Answer tokens per model forward (0 without forwards).
    pub fn answer_tokens_per_forward(&self) -> f64 {
        if self.output.forwards == 0 {
            0.0
        } else {
            self.answer_tokens as f64 / self.output.forwards as f64
        }
    }
}

/// A draft model for speculative decoding of a causal target, on the CPU (next to the target's
/// backend), with its settings and the K/V both models keep between turns.
pub struct DraftModel {
    model: Arc<ModelParts>,
    backend: CpuBackend,
    pub settings: SpecArSettings,
    caches: SpecArCaches,
}

/// One model on one backend.
pub struct Session {
    model: Arc<ModelParts>,
    backend: BackendSpec,
    executor: Executor,
    /// K/V of the previous prompt (causal models: a later turn forwards only its new suffix).
    ar_cache: ArPrefixCache,
    draft: Option<DraftModel>,
    /// Capacities and groups for the static-tiers MoE policy (uniform when none was given).
    moe_plan: Option<Arc<StaticPlan>>,
}

impl Session {
    /// Builds `backend` for `model`.
    pub fn open(model: Arc<ModelParts>, backend: &BackendSpec) -> Result<Self> {
        let executor = Executor::build(backend, model.transformer.clone())?;
        Ok(Session {
            model,
            backend: backend.clone(),
            executor,
            ar_cache: ArPrefixCache::default(),
            draft: None,
            moe_plan: None,
        })
    }

    /// A session whose forwards go through `batcher`, packed with those of the other sessions
    /// sharing it (cross-request batching; the caller joins the batcher for each run, see
    /// [`ForwardBatcher::join`]). `backend` names what the batcher runs, for records.
    pub fn open_batched(model: Arc<ModelParts>, backend: &BackendSpec, batcher: &Arc<ForwardBatcher>) -> Self {
        Session {
            model,
            backend: backend.clone(),
            executor: Executor::Other(Box::new(batcher.member())),
            ar_cache: ArPrefixCache::default(),
            draft: None,
            moe_plan: None,
        }
    }

    /// Decodes with speculative decoding from now on, `draft` proposing tokens for this
    /// session's (causal) model. Refuses a diffusion target and a pair that does not share a
    /// vocabulary.
    pub fn set_draft(&mut self, draft: Arc<ModelParts>, settings: SpecArSettings) -> Result<()> {
        settings.validate()?;
        check_pair(&self.model.transformer.config, &draft.transformer.config)?;
        let backend = CpuBackend::new(Arc::new(draft_on_int8(&draft.transformer)?));
        self.draft = Some(DraftModel { model: draft, backend, settings, caches: SpecArCaches::default() });
        Ok(())
    }

    /// The static MoE plan (from a calibration) runs with the static-tiers policy use.
    pub fn set_moe_plan(&mut self, plan: Arc<StaticPlan>) -> Result<()> {
        if let Some((layers, experts)) = self.model.transformer.moe_shape() {
            plan.check(layers, experts)?;
        }
        self.moe_plan = Some(plan);
        Ok(())
    }

    /// Sets the model's MoE execution for a run's settings.
    fn apply_moe(&mut self, settings: &DecodeSettings) -> Result<()> {
        let model = &self.model.transformer;
        if model.moe_shape().is_none() {
            return Ok(());
        }
        let s = settings.moe.unwrap_or_default();
        let plan = if s.policy == MoePolicy::StaticTiers {
            Some(match &self.moe_plan {
                Some(p) => p.clone(),
                None => {
                    let p = super::moe_calibrate::static_plan(model, None)?;
                    self.moe_plan = Some(p.clone());
                    p
                }
            })
        } else {
            None
        };
        let residency = if s.policy == MoePolicy::StaticTiers && s.cpu_lane {
            self.executor.as_dyn().moe_residency()
        } else {
            None
        };
        model.set_moe_execution(MoeExecution {
            policy: s.policy,
            plan,
            renormalise_dropped: s.renormalise_dropped,
            residency,
        })
    }

    /// The draft model and its settings, when speculative decoding is on.
    pub fn draft(&self) -> Option<(&ModelParts, &SpecArSettings)> {
        self.draft.as_ref().map(|d| (d.model.as_ref(), &d.settings))
    }

    /// The model.
    pub fn model(&self) -> &ModelParts {
        &self.model
    }
    /// The model, shareable (e.g. with a live view that outlives a borrow of the session).
    pub fn model_arc(&self) -> &Arc<ModelParts> {
        &self.model
    }
    /// Forgets the K/V kept from earlier prompts (a conversation starts over).
    pub fn forget_context(&mut self) {
        self.ar_cache.clear();
        if let Some(d) = self.draft.as_mut() {
            d.caches.clear();
        }
    }
    /// The backend's spec.
    pub fn backend(&self) -> &BackendSpec {
        &self.backend
    }
    /// The built backend (for benchmarks and tests that need its internals).
    pub fn executor(&mut self) -> &mut Executor {
        &mut self.executor
    }

    /// The settings of a run with `user` overrides (model defaults applied), validated.
    pub fn settings(&self, user: &SettingsOverrides) -> Result<DecodeSettings> {
        let s = effective_settings(&self.model.transformer.config, &self.model.generation, user);
        s.validate()?;
        Ok(s)
    }

    /// Token ids of a prompt.
    pub fn prompt_ids(&self, prompt: RunPrompt<'_>) -> Result<Vec<u32>> {
        match prompt {
            RunPrompt::Raw(text) => self.model.tokenizer.encode(text),
            RunPrompt::Chat(messages) => self.model.tokenizer.encode(&self.model.template.render(messages, true)),
        }
    }

    /// Token ids of a conversation fitted into the model's context with room for the answer
    /// `settings` generates (the oldest exchanges left out where needed, see [`fit_chat`]).
    pub fn chat_prompt_ids(&self, messages: &[ChatMessage], settings: &DecodeSettings) -> Result<FittedChat> {
        let context = self.model.transformer.config.max_seq;
        fit_chat(&self.model.template, &self.model.tokenizer, messages, context, settings.gen_length)
    }

    /// Checks a request before anything is sized by it (callers with buffers of their own,
    /// such as a live canvas, call this first).
    pub fn check(&self, prompt_ids: &[u32], settings: &DecodeSettings) -> Result<()> {
        check_request(&self.model.transformer.config, prompt_ids, settings)
    }

    /// Ids that end an answer under `settings`.
    pub fn stop_ids(&self, settings: &DecodeSettings) -> Vec<u32> {
        stop_ids(&self.model.transformer.config, settings, &self.model.tokenizer, &self.model.template)
    }

    /// Runs one generation, streaming each step's frame to `on_frame` (`Break` stops it early).
    pub fn run(
        &mut self,
        prompt_ids: &[u32],
        settings: &DecodeSettings,
        cancel: &CancelFlag,
        on_frame: &mut dyn FnMut(&StepFrame) -> ControlFlow<()>,
    ) -> Result<RunOutcome> {
        self.check(prompt_ids, settings)?;
        self.apply_moe(settings)?;
        let is_moe = self.model.transformer.moe_shape().is_some();
        self.model.transformer.take_moe_stats();
        self.executor.as_dyn().take_moe_stats();
        // Each run's trace starts afresh: a session's timeline would otherwise grow without bound.
        self.executor.as_dyn().discard_timeline();
        let mark = self.executor.timeline_mark();
        let diffusion = self.model.transformer.config.arch.is_diffusion();
        let backend = self.executor.as_dyn();
        let mut speculation = None;
        let output = if diffusion {
            generate_dyn(backend, prompt_ids, settings, cancel, on_frame)?
        } else if let Some(d) = self.draft.as_mut() {
            let (out, stats) = generate_speculative(
                backend,
                &mut d.backend,
                prompt_ids,
                settings,
                &d.settings,
                cancel,
                on_frame,
                &mut d.caches,
            )?;
            speculation = Some(stats);
            out
        } else {
            generate_ar_reusing(backend, prompt_ids, settings, cancel, on_frame, &mut self.ar_cache)?
        };
        let stop = self.stop_ids(settings);
        let answer = trim_at_stop(&output.tokens, &stop).to_vec();
        let answer_tokens = (answer.len() + 1).min(output.tokens.len());
        let text = self.model.tokenizer.decode(&answer, true);
        let timeline = self.executor.timeline_since(mark);
        let moe = is_moe.then(|| {
            let mut stats = self.model.transformer.take_moe_stats();
            if let Some(own) = self.executor.as_dyn().take_moe_stats() {
                stats.merge(&own);
            }
            stats
        });
        Ok(RunOutcome {
            output,
            answer,
            text,
            answer_tokens,
            prompt_tokens: prompt_ids.len(),
            timeline,
            speculation,
            moe,
        })
    }
}
