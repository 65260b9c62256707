//! The IPC types of the app contract (`docs/app-contract.md`, v1): serde + specta, exported to
//! `ui/src/lib/bindings.ts`. Conversions from the engine's and store's own types live here too, so
//! the command modules only move data.
//!
//! Floats carry `#[specta(type = i32)]` so that they export as TypeScript `number` (specta writes
//! `number | null` for floats because serde_json turns NaN into `null`); every float here is
//! finite by construction (times, energies, probabilities, settings that are validated).

use serde::{Deserialize, Serialize};
use specta::Type;
use unmask_engine::decode::{self as engine_decode, CacheMode, DreamAlg, Remasking};
use unmask_engine::moe::{MoePolicy, MoeSettings};
use unmask_engine::run::{BackendSpec, SettingsOverrides, DEFAULT_DEVICE};

/// Display state of one canvas position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum TokenState {
    Masked,
    Visible,
    Stable,
}

impl From<engine_decode::TokenState> for TokenState {
    fn from(s: engine_decode::TokenState) -> Self {
        match s {
            engine_decode::TokenState::Masked => TokenState::Masked,
            engine_decode::TokenState::Visible => TokenState::Visible,
            engine_decode::TokenState::Stable => TokenState::Stable,
        }
    }
}

/// One changed canvas position with its token text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    pub pos: u32,
    pub token: u32,
    pub text: String,
    pub state: TokenState,
    #[specta(type = i32)]
    pub confidence: f32,
    pub speculative: bool,
    pub revised: bool,
    /// Speculative AR decoding: the text of the draft the target refused at this position
    /// (`text` is what the target wrote instead).
    pub rejected_draft: Option<String>,
    /// The token is one of the run's stop ids (end of text, end of turn, padding): the answer
    /// ends at the first such position, and what follows it is padding, not answer.
    pub end: bool,
}

/// One denoising step: only the positions that changed (the engine's `StepFrame` with text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct FrameDelta {
    pub step: u32,
    pub block: (u32, u32),
    pub forward_tokens: u32,
    pub changes: Vec<TokenView>,
    #[specta(type = i32)]
    pub step_wall_s: f64,
    #[specta(type = Option<i32>)]
    pub simulated_s: Option<f64>,
    pub committed_total: u32,
}

/// Which backend runs a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum BackendKind {
    Cpu,
    Vnpu,
}

/// Backend plus, for the virtual NPU, the device profile name (e.g. `sm8750`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct BackendChoice {
    pub kind: BackendKind,
    pub device: Option<String>,
}

impl BackendChoice {
    /// The CPU backend.
    pub fn cpu() -> Self {
        BackendChoice { kind: BackendKind::Cpu, device: None }
    }
    /// The virtual NPU with a device profile.
    pub fn vnpu(device: &str) -> Self {
        BackendChoice { kind: BackendKind::Vnpu, device: Some(device.to_owned()) }
    }
    /// Stored form (`cpu`, `vnpu:sm8750`), used for runs and presets.
    pub fn to_spec(&self) -> BackendSpec {
        match self.kind {
            BackendKind::Cpu => BackendSpec::Cpu,
            BackendKind::Vnpu => BackendSpec::vnpu(self.device.as_deref().unwrap_or(DEFAULT_DEVICE)),
        }
    }
    /// The app's choice of a recorded backend.
    pub fn from_spec(s: &BackendSpec) -> Self {
        match s {
            BackendSpec::Vnpu { device } => BackendChoice::vnpu(device),
            // The app runs the CPU and the virtual NPU; a QNN run recorded by the CLI re-runs on the CPU.
            BackendSpec::Cpu | BackendSpec::Qnn { .. } => BackendChoice::cpu(),
        }
    }
}

/// The decoding knobs the UI edits (a subset of the engine's settings; see `settings_schema`).
/// The choices are the engine's own enums, spelled as everywhere else (kebab-case, e.g.
/// `low-confidence`); the engine also reads the camelCase spellings older app builds sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct DecodeSettings {
    pub gen_length: u32,
    pub block_length: u32,
    pub steps: u32,
    #[specta(type = i32)]
    pub temperature: f64,
    pub remasking: Remasking,
    pub cache: CacheMode,
    #[specta(type = Option<i32>)]
    pub threshold: Option<f64>,
    /// Dream position selection; null = the engine's default (`origin`).
    pub algorithm: Option<DreamAlg>,
    pub speculative: bool,
    pub revision: bool,
    #[specta(type = i32)]
    pub cfg_scale: f64,
    pub seed: u32,
    /// MoE execution policy; missing in settings saved before it existed.
    #[serde(default)]
    pub moe: MoePolicy,
}

/// One knob of [`DecodeSettings`], by its field name: which ones a user chose explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum SettingKey {
    GenLength,
    BlockLength,
    Steps,
    Temperature,
    Remasking,
    Cache,
    Threshold,
    Algorithm,
    Speculative,
    Revision,
    CfgScale,
    Seed,
    Moe,
}

impl SettingKey {
    /// Every knob, in the order of [`DecodeSettings`]'s fields.
    pub const ALL: [SettingKey; 13] = [
        SettingKey::GenLength,
        SettingKey::BlockLength,
        SettingKey::Steps,
        SettingKey::Temperature,
        SettingKey::Remasking,
        SettingKey::Cache,
        SettingKey::Threshold,
        SettingKey::Algorithm,
        SettingKey::Speculative,
        SettingKey::Revision,
        SettingKey::CfgScale,
        SettingKey::Seed,
        SettingKey::Moe,
    ];
}

impl Default for DecodeSettings {
    fn default() -> Self {
        DecodeSettings::from_engine(&engine_decode::DecodeSettings::default())
    }
}

impl DecodeSettings {
    /// Engine settings for these knobs; everything the contract does not name keeps the engine
    /// default.
    pub fn to_engine(&self) -> engine_decode::DecodeSettings {
        let o = self.to_overrides();
        engine_decode::DecodeSettings {
            gen_length: self.gen_length as usize,
            block_length: self.block_length as usize,
            steps: self.steps as usize,
            temperature: self.temperature,
            remasking: self.remasking,
            cfg_scale: self.cfg_scale,
            threshold: self.threshold,
            cache: self.cache,
            seed: u64::from(self.seed),
            alg: self.algorithm.unwrap_or(DreamAlg::Origin),
            speculative: o.speculative,
            revision: o.revision,
            moe: o.moe,
            ..engine_decode::DecodeSettings::default()
        }
    }

    /// Every knob as the user's choice (a preset, a re-run): the model's defaults fill only what
    /// these settings do not name.
    pub fn to_overrides(&self) -> SettingsOverrides {
        self.overrides_of(&SettingKey::ALL)
    }

    /// The knobs in `chosen` as the user's choices; every other one takes the model's default
    /// (then the engine's), as [`unmask_engine::run::effective_settings`] decides.
    pub fn overrides_of(&self, chosen: &[SettingKey]) -> SettingsOverrides {
        let on = |k: SettingKey| chosen.contains(&k);
        SettingsOverrides {
            gen_length: on(SettingKey::GenLength).then_some(self.gen_length as usize),
            block_length: on(SettingKey::BlockLength).then_some(self.block_length as usize),
            steps: on(SettingKey::Steps).then_some(self.steps as usize),
            temperature: on(SettingKey::Temperature).then_some(self.temperature),
            remasking: on(SettingKey::Remasking).then_some(self.remasking),
            cfg_scale: on(SettingKey::CfgScale).then_some(self.cfg_scale),
            threshold: self.threshold.filter(|_| on(SettingKey::Threshold)),
            cache: on(SettingKey::Cache).then_some(self.cache),
            seed: on(SettingKey::Seed).then_some(u64::from(self.seed)),
            alg: on(SettingKey::Algorithm).then_some(self.algorithm.unwrap_or(DreamAlg::Origin)),
            speculative: (self.speculative && on(SettingKey::Speculative)).then(Default::default),
            revision: (self.revision && on(SettingKey::Revision)).then(Default::default),
            // The CPU policy is the engine's default: no MoE settings recorded for it.
            moe: match self.moe {
                MoePolicy::Cpu => None,
                _ if !on(SettingKey::Moe) => None,
                policy => Some(MoeSettings { policy, ..Default::default() }),
            },
            ..SettingsOverrides::default()
        }
    }

    /// The contract's view of engine settings (stored runs and presets).
    pub fn from_engine(s: &engine_decode::DecodeSettings) -> Self {
        let sat = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        DecodeSettings {
            gen_length: sat(s.gen_length),
            block_length: sat(s.block_length),
            steps: sat(s.steps),
            temperature: s.temperature,
            remasking: s.remasking,
            cache: s.cache,
            threshold: s.threshold,
            algorithm: Some(s.alg),
            speculative: s.speculative.is_some(),
            revision: s.revision.is_some(),
            cfg_scale: s.cfg_scale,
            seed: u32::try_from(s.seed).unwrap_or(u32::MAX),
            moe: s.moe.map(|m| m.policy).unwrap_or_default(),
        }
    }
}

/// Kind of a setting's editor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum SettingKind {
    Int,
    Float,
    Bool,
    Choice,
}

/// A setting's default value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(untagged)]
pub enum SettingValue {
    Number(#[specta(type = i32)] f64),
    Bool(bool),
    Text(String),
}

/// One decoding parameter with its explanation, for the settings editor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct SettingInfo {
    pub key: String,
    pub label: String,
    pub explanation: String,
    pub kind: SettingKind,
    #[specta(type = Option<i32>)]
    pub min: Option<f64>,
    #[specta(type = Option<i32>)]
    pub max: Option<f64>,
    pub options: Option<Vec<String>>,
    /// The value when the setting is on; for an optional setting the value it starts at when
    /// the user turns it on.
    pub default: Option<SettingValue>,
    /// Model kinds it applies to (any of [`ModelEntry::kinds`]); null = every model.
    pub applies_to: Option<Vec<String>>,
    /// Optional settings (null = off / the model's default): the label of the switch that
    /// turns it on; null for settings that always have a value.
    pub toggle_label: Option<String>,
}

/// A model in the manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct ModelEntry {
    pub id: i64,
    pub name: String,
    pub architecture: String,
    pub format: String,
    pub quantisation: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub source: String,
    pub path: String,
    pub added_ms: i64,
    pub used_ms: Option<i64>,
    pub embedded: bool,
    /// Whether weights + working memory (K/V, activations, logits) at the default settings fit
    /// the available memory (the UI recomputes it for the current settings from the fields below,
    /// which are the engine's `WorkingSetRates`).
    pub fits_memory: bool,
    /// What the model is, for the settings that apply to it: `diffusion` or `autoregressive`,
    /// `llada` (LLaDA-style scoring, CFG) or `dream`, and `moe` for mixture-of-experts models.
    pub kinds: Vec<String>,
    /// Bytes of the weight files (what decoding keeps in memory).
    pub weights_bytes: u64,
    /// K/V cache bytes per context token (layers x 2 x kv heads x head dim x bytes per element
    /// as the engine stores K/V); 0 when the config could not be read.
    pub kv_bytes_per_token: u64,
    /// One forward's activations per forwarded token (every step may forward the whole canvas).
    pub activation_bytes_per_token: u64,
    /// One logits row (vocabulary x (f32 + two f64 copies)); a diffusion run holds one per answer
    /// token, an autoregressive run one.
    pub logits_bytes_per_row: u64,
    /// The model's context length in tokens (prompt + answer).
    pub context_tokens: u32,
    pub run_count: u32,
    /// The settings a run of this model uses when the user chooses none: its
    /// `generation_config.json` over the engine's defaults (what the settings form starts from).
    /// Null when the model's files or config could not be read.
    pub default_settings: Option<DecodeSettings>,
    /// The stored MoE calibration in one line (`unmask moe calibrate`); null when there is none.
    pub moe_calibration: Option<String>,
}

/// A named set of decoding settings plus backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct Preset {
    pub id: i64,
    pub name: String,
    pub settings: DecodeSettings,
    pub backend: BackendChoice,
    pub builtin: bool,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    User,
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: i64,
    pub role: Role,
    pub content: String,
    pub run_id: Option<i64>,
    pub created_ms: i64,
}

/// A conversation in the sidebar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    pub id: i64,
    pub title: String,
    pub model_id: Option<i64>,
    pub updated_ms: i64,
    /// Sent to the model as the chat template's system turn; `None` when the conversation has none.
    pub system_prompt: Option<String>,
}

/// A conversation with its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct ConversationDetail {
    pub conversation: Conversation,
    pub messages: Vec<Message>,
}

/// How a run ended (or that it still runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    Running,
    Completed,
    Cancelled,
    Failed,
    Interrupted,
}

/// A run in lists and comparisons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub id: i64,
    pub model_name: String,
    pub backend: String,
    pub prompt: String,
    pub output: String,
    pub status: RunStatus,
    pub settings: DecodeSettings,
    pub started_ms: i64,
    #[specta(type = Option<i32>)]
    pub wall_s: Option<f64>,
    pub forwards: Option<u64>,
    #[specta(type = Option<i32>)]
    pub tokens_per_forward: Option<f64>,
    #[specta(type = Option<i32>)]
    pub simulated_s: Option<f64>,
    #[specta(type = Option<i32>)]
    pub energy_j: Option<f64>,
    pub steps: u64,
    /// Answer tokens up to and including the first stop token (the padding after it is not
    /// counted): what tokens per second are made of. Null for runs recorded before it was kept.
    pub answer_tokens: Option<u32>,
    /// What speculative decoding did, for runs with a draft model.
    #[serde(default)]
    pub speculation: Option<SpeculationSummary>,
}

/// A speculative run's draft model and how its drafts fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationSummary {
    pub draft_model: String,
    /// `sync`, `adaptive` or `async`.
    pub schedule: Option<String>,
    /// Tokens the draft model proposed.
    pub drafted: u64,
    /// Drafted tokens the target judged.
    pub judged: u64,
    /// Judged tokens the target kept.
    pub accepted: u64,
    /// Judged tokens the target replaced with its own.
    pub rejected: u64,
    pub verify_forwards: u64,
    pub draft_forwards: u64,
}

/// Kind of a timeline lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum LaneKind {
    Npu,
    Cpu,
    Dma,
}

/// One lane of the profiler timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct LaneView {
    pub id: String,
    pub label: String,
    pub kind: LaneKind,
}

/// One slice on a lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub lane: String,
    pub name: String,
    #[specta(type = i32)]
    pub start_s: f64,
    #[specta(type = i32)]
    pub dur_s: f64,
    /// True for simulated device time, false for time measured on this machine.
    pub simulated: bool,
}

/// A counter track: `[t_s, value]` points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct CounterView {
    pub name: String,
    pub unit: String,
    #[specta(type = Vec<(i32, i32)>)]
    pub points: Vec<(f64, f64)>,
}

/// The profiler view of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct TimelineView {
    pub lanes: Vec<LaneView>,
    pub events: Vec<EventView>,
    pub counters: Vec<CounterView>,
    #[specta(type = Option<i32>)]
    pub energy_j: Option<f64>,
    pub peak_resident_bytes: Option<u64>,
    pub simulated: bool,
}

/// Everything about one run: summary, step frames for replay, timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct RunDetail {
    pub summary: RunSummary,
    pub prompt_tokens: u32,
    pub canvas_length: u32,
    pub frames: Vec<FrameDelta>,
    pub timeline: Option<TimelineView>,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct GenerateRequest {
    pub conversation_id: Option<i64>,
    pub model_id: Option<i64>,
    pub prompt: String,
    pub settings: DecodeSettings,
    /// The knobs of `settings` the user chose; the others take the model's defaults
    /// (`generation_config.json`, then the engine's). Null: every knob of `settings` is a choice
    /// (a preset applied as it is).
    #[serde(default)]
    pub overridden: Option<Vec<SettingKey>>,
    pub backend: BackendChoice,
    /// Regenerate/edit: this message and every later one are replaced.
    pub replace_from_message_id: Option<i64>,
    /// Saved as the conversation's system prompt before this turn (blank clears it); `None`
    /// keeps the stored one. A new conversation is created with it.
    pub system_prompt: Option<String>,
    /// A draft model for speculative decoding of an autoregressive model (same vocabulary): it
    /// proposes tokens that the chosen model verifies; the answer is the chosen model's own.
    #[serde(default)]
    pub draft_model_id: Option<i64>,
}

/// Streamed while a generation runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum GenerateEvent {
    Started {
        run_id: i64,
        conversation_id: i64,
        prompt_tokens: u32,
        canvas_length: u32,
    },
    /// Batched to ~60 Hz; the last frame is always delivered.
    Frames {
        frames: Vec<FrameDelta>,
    },
    Finished {
        summary: RunSummary,
    },
    Failed {
        message: String,
    },
}

/// Streamed while a download runs. Progress carries the bytes of the whole download (its total
/// is unknown for an HF-layout model, whose file list is discovered on the way) and of the
/// current file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum DownloadEvent {
    Progress {
        download_id: u32,
        file: String,
        bytes: u64,
        total_bytes: Option<u64>,
        file_bytes: u64,
        file_total_bytes: Option<u64>,
    },
    Paused {
        download_id: u32,
    },
    Resumed {
        download_id: u32,
    },
    Finished {
        download_id: u32,
        model: ModelEntry,
    },
    Failed {
        download_id: u32,
        message: String,
    },
    Cancelled {
        download_id: u32,
    },
}

/// About this installation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub struct AppInfo {
    pub version: String,
    pub data_dir: String,
    pub cpu: String,
    pub threads: u32,
    pub memory_bytes: u64,
    /// Memory available to new allocations now (Linux `MemAvailable`); 0 when unknown.
    pub available_memory_bytes: u64,
    pub default_model_id: Option<i64>,
    /// Virtual NPU device profile names.
    pub devices: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_engine() {
        let s = DecodeSettings {
            gen_length: 48,
            block_length: 16,
            steps: 24,
            temperature: 0.5,
            remasking: Remasking::Random,
            cache: CacheMode::Dual,
            threshold: Some(0.9),
            algorithm: Some(DreamAlg::Entropy),
            speculative: true,
            revision: true,
            cfg_scale: 1.5,
            seed: 7,
            moe: MoePolicy::StaticTiers,
        };
        let e = s.to_engine();
        assert_eq!(e.gen_length, 48);
        assert_eq!(e.moe.map(|m| m.policy), Some(MoePolicy::StaticTiers));
        assert_eq!(e.alg, DreamAlg::Entropy);
        assert!(e.speculative.is_some() && e.revision.is_some());
        assert_eq!(DecodeSettings::from_engine(&e), s);
    }

    #[test]
    fn settings_use_the_engine_spelling_and_read_the_old_app_one() {
        let s = DecodeSettings {
            algorithm: Some(DreamAlg::TopkMargin),
            moe: MoePolicy::StaticTiers,
            ..DecodeSettings::default()
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(
            (&v["remasking"], &v["cache"], &v["algorithm"], &v["moe"]),
            (&"low-confidence".into(), &"none".into(), &"topk-margin".into(), &"static-tiers".into())
        );
        // Settings as an older app build sent and showed them (camelCase choices, its own
        // algorithm names, no `moe` yet).
        let old = serde_json::json!({
            "genLength": 32, "blockLength": 16, "steps": 32, "temperature": 0.0,
            "remasking": "lowConfidence", "cache": "prefix", "threshold": 0.9, "algorithm": "margin",
            "speculative": false, "revision": false, "cfgScale": 0.0, "seed": 0
        });
        let read: DecodeSettings = serde_json::from_value(old).expect("old settings");
        assert_eq!(read.remasking, Remasking::LowConfidence);
        assert_eq!(read.cache, CacheMode::Prefix);
        assert_eq!(read.algorithm, Some(DreamAlg::TopkMargin));
        assert_eq!(read.moe, MoePolicy::Cpu);
        let mut old = serde_json::to_value(DecodeSettings::default()).expect("json");
        old["algorithm"] = "maskgitPlus".into();
        old["moe"] = "staticTiers".into();
        let read: DecodeSettings = serde_json::from_value(old).expect("old choices");
        assert_eq!((read.algorithm, read.moe), (Some(DreamAlg::MaskgitPlus), MoePolicy::StaticTiers));
    }

    #[test]
    fn only_the_chosen_settings_are_overrides() {
        let s = DecodeSettings {
            gen_length: 64,
            seed: 9,
            speculative: true,
            moe: MoePolicy::StaticTiers,
            ..DecodeSettings::default()
        };
        assert_eq!(s.overrides_of(&[]), SettingsOverrides::default());
        let o = s.overrides_of(&[SettingKey::Seed, SettingKey::Speculative]);
        assert_eq!(
            o,
            SettingsOverrides { seed: Some(9), speculative: Some(Default::default()), ..SettingsOverrides::default() }
        );
        let all = s.to_overrides();
        assert_eq!(
            (all.gen_length, all.seed, all.moe.map(|m| m.policy)),
            (Some(64), Some(9), Some(MoePolicy::StaticTiers))
        );
        // The keys travel as the DTO's field names.
        assert_eq!(serde_json::to_value(SettingKey::CfgScale).expect("json"), serde_json::json!("cfgScale"));
        let fields = serde_json::to_value(&s).expect("json");
        for k in SettingKey::ALL {
            let name = serde_json::to_value(k).expect("json");
            assert!(fields.get(name.as_str().expect("str")).is_some(), "{name} is not a field of DecodeSettings");
        }
    }

    #[test]
    fn unknown_algorithm_is_refused() {
        let mut full = serde_json::to_value(DecodeSettings::default()).expect("json");
        full["algorithm"] = "greedy".into();
        let err = serde_json::from_value::<DecodeSettings>(full).expect_err("unknown algorithm");
        assert!(err.to_string().contains("greedy"), "{err}");
    }

    #[test]
    fn events_serialise_with_kind_tag_and_camel_case_fields() {
        let ev = GenerateEvent::Started { run_id: 3, conversation_id: 4, prompt_tokens: 5, canvas_length: 6 };
        let v = serde_json::to_value(&ev).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"kind": "started", "runId": 3, "conversationId": 4, "promptTokens": 5, "canvasLength": 6})
        );
        let d = DownloadEvent::Progress {
            download_id: 1,
            file: "a".into(),
            bytes: 2,
            total_bytes: None,
            file_bytes: 1,
            file_total_bytes: Some(3),
        };
        let v = serde_json::to_value(&d).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"kind": "progress", "downloadId": 1, "file": "a", "bytes": 2, "totalBytes": null,
                "fileBytes": 1, "fileTotalBytes": 3})
        );
    }

    #[test]
    fn backend_stored_form_round_trips() {
        assert_eq!(BackendChoice::from_spec(&BackendChoice::vnpu("sm8650").to_spec()), BackendChoice::vnpu("sm8650"));
        assert_eq!(BackendChoice::from_spec(&"cpu".parse().unwrap()), BackendChoice::cpu());
    }
}
