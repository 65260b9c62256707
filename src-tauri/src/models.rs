//! Model manager, conversations and app info: list with "fits this device's memory", import from
//! disk, delete, a model's runs.

use std::collections::HashMap;
use std::path::Path;

use unmask_engine::decode::WorkingSetRates;
use unmask_engine::model::{GenerationDefaults, ModelConfig};
use unmask_engine::run::{effective_settings, SettingsOverrides};
use unmask_store::{ModelFile, ModelId, ModelRecord};

use crate::dto::{AppInfo, Conversation, ConversationDetail, Message, ModelEntry, Role, RunSummary};
use crate::error::{AppError, AppErrorKind, AppResult};
use crate::runs::MAX_LIST;
use crate::state::AppState;

/// Allowance for the app itself (runtime, UI, tokenizer), beyond weights and the run's working set.
pub const MEMORY_OVERHEAD: u64 = 256 << 20;
/// Prompt tokens (conversation so far) the default memory estimate reserves room for; the UI
/// uses the same budget with the current answer length.
pub const PROMPT_BUDGET_TOKENS: u64 = 1024;

/// Memory a model needs to decode an answer of `answer_tokens` after `prompt_tokens`: weights, the
/// engine's working set (K/V, activations, logits rows) and the app's allowance.
pub fn memory_needed(weights_bytes: u64, rates: &WorkingSetRates, prompt_tokens: u64, answer_tokens: u64) -> u64 {
    let working = u64::try_from(rates.bytes(prompt_tokens, answer_tokens)).unwrap_or(u64::MAX);
    weights_bytes.saturating_add(working).saturating_add(MEMORY_OVERHEAD)
}

/// What a run of a model uses when the user chooses no setting: its `generation_config.json`
/// (beside the weights) over the engine's defaults. `None` when that file cannot be read.
pub fn model_default_settings(cfg: &ModelConfig, model_path: &Path) -> Option<crate::dto::DecodeSettings> {
    let dir = if model_path.is_dir() { model_path } else { model_path.parent()? };
    let defaults = match GenerationDefaults::read_from_dir(dir) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("{e}");
            return None;
        }
    };
    let s = effective_settings(cfg, &defaults, &SettingsOverrides::default());
    Some(crate::dto::DecodeSettings::from_engine(&s))
}

/// Whether that need fits `available` bytes; unknown memory (0) never claims a fit.
pub fn fits_memory(needed: u64, available: u64) -> bool {
    available > 0 && needed <= available
}

/// Weight files of a model: `.safetensors` / `.gguf` (tokenizer and config files are small and
/// not kept in decoding memory); all files when none match.
pub fn weights_bytes(files: &[ModelFile], size_bytes: u64) -> u64 {
    let is_weights = |f: &&ModelFile| {
        let p = f.rel_path.to_ascii_lowercase();
        p.ends_with(".safetensors") || p.ends_with(".gguf")
    };
    let sum: u64 = files.iter().filter(is_weights).map(|f| f.size_bytes).sum();
    if sum > 0 {
        sum
    } else {
        size_bytes
    }
}

/// A `/proc/meminfo` field in bytes (Linux/Android; elsewhere unknown = 0).
fn meminfo_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| meminfo_field(&s, field)).unwrap_or(0)
}

/// `field` (e.g. `MemAvailable`) of a `/proc/meminfo` text, in bytes.
fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Total physical memory.
pub fn total_memory_bytes() -> u64 {
    meminfo_bytes("MemTotal")
}

/// Memory available to new allocations without swapping (the kernel's `MemAvailable`).
pub fn available_memory_bytes() -> u64 {
    meminfo_bytes("MemAvailable")
}

/// The CPU's model name (Linux `/proc/cpuinfo`), else the architecture.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

impl AppState {
    /// Version, data folder, hardware, the default model and the vNPU device profiles.
    pub async fn app_info(&self) -> AppResult<AppInfo> {
        Ok(AppInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            data_dir: self.store.data_dir().display().to_string(),
            cpu: cpu_name(),
            threads: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1),
            memory_bytes: total_memory_bytes(),
            available_memory_bytes: available_memory_bytes(),
            default_model_id: self.embedded_model_id,
            devices: crate::backends::device_names(),
        })
    }

    async fn run_counts(&self) -> AppResult<HashMap<ModelId, u32>> {
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT model_id, COUNT(*) FROM runs WHERE model_id IS NOT NULL GROUP BY model_id")
                .fetch_all(self.store.pool())
                .await
                .map_err(|e| AppError::new(AppErrorKind::Store, format!("counting runs: {e}")))?;
        Ok(rows.into_iter().map(|(m, n)| (m, u32::try_from(n).unwrap_or(u32::MAX))).collect())
    }

    /// The one-line summary of a model's stored MoE calibration, if it has one.
    async fn calibration_summary(&self, id: ModelId) -> AppResult<Option<String>> {
        let Some(c) = self.store.get_moe_calibration(id, crate::generate::MOE_CALIBRATION).await? else {
            return Ok(None);
        };
        Ok(Some(match serde_json::from_value::<unmask_engine::moe::MoeCalibration>(c.data) {
            Ok(cal) => cal.summary(),
            Err(e) => format!("damaged calibration: {e}"),
        }))
    }

    async fn entry(&self, m: &ModelRecord, counts: &HashMap<ModelId, u32>, available: u64) -> AppResult<ModelEntry> {
        let weights = weights_bytes(&self.store.model_files(m.id).await?, m.size_bytes);
        // A config stored by an older version may not parse; the entry still lists the model.
        let cfg = m.engine_config().ok();
        let rates = cfg.as_ref().map(WorkingSetRates::of);
        let context = cfg.as_ref().map_or(0, |c| u32::try_from(c.max_seq).unwrap_or(u32::MAX));
        let path = self.store.model_path(m);
        let default_settings = cfg.as_ref().and_then(|c| model_default_settings(c, &path));
        let answer = u64::from(
            default_settings.as_ref().map_or(crate::dto::DecodeSettings::default().gen_length, |s| s.gen_length),
        );
        // The UI's rule (ui/src/lib/memory.ts): the prompt budget shrinks to what the context leaves.
        let prompt = PROMPT_BUDGET_TOKENS.min(u64::from(context).saturating_sub(answer));
        let needed = rates.as_ref().map(|r| memory_needed(weights, r, prompt, answer));
        Ok(ModelEntry {
            id: m.id,
            name: m.name.clone(),
            architecture: m.architecture.clone(),
            format: m.format.as_str().into(),
            quantisation: m.quantization.clone(),
            size_bytes: m.size_bytes,
            sha256: m.sha256.clone(),
            source: m.source.clone(),
            path: path.display().to_string(),
            added_ms: m.added_at,
            used_ms: m.last_used_at,
            embedded: self.is_embedded(m),
            fits_memory: needed.is_some_and(|n| fits_memory(n, available)),
            kinds: cfg.as_ref().map(crate::schema::model_kinds).unwrap_or_default(),
            weights_bytes: weights,
            kv_bytes_per_token: rates.map_or(0, |r| r.kv_per_token),
            activation_bytes_per_token: rates.map_or(0, |r| r.activations_per_token),
            logits_bytes_per_row: rates.map_or(0, |r| r.logits_per_row),
            context_tokens: context,
            run_count: counts.get(&m.id).copied().unwrap_or(0),
            default_settings,
            moe_calibration: self.calibration_summary(m.id).await?,
        })
    }

    /// One model's manager entry.
    pub async fn model_entry(&self, m: &ModelRecord) -> AppResult<ModelEntry> {
        self.entry(m, &self.run_counts().await?, available_memory_bytes()).await
    }

    /// Every registered model.
    pub async fn list_models(&self) -> AppResult<Vec<ModelEntry>> {
        let counts = self.run_counts().await?;
        let available = available_memory_bytes();
        let mut out = Vec::new();
        for m in self.store.list_models().await? {
            out.push(self.entry(&m, &counts, available).await?);
        }
        Ok(out)
    }

    /// Registers a model folder or `.gguf` file from disk, in place (no multi-GB copy); the
    /// engine checks it fully first.
    pub async fn import_model(&self, path: &str, name: Option<&str>) -> AppResult<ModelEntry> {
        let p = Path::new(path.trim());
        if path.trim().is_empty() {
            return Err(AppError::invalid("no path given"));
        }
        if !p.exists() {
            return Err(AppError::not_found(format!("{}: no such file or folder", p.display())));
        }
        let m = self.store.import_model(p, name.filter(|n| !n.trim().is_empty()), true).await?;
        self.model_entry(&m).await
    }

    /// Removes a model (its runs keep their history). The embedded default stays.
    pub async fn delete_model(&self, id: ModelId) -> AppResult<()> {
        let m = self.store.get_model(id).await?;
        if self.is_embedded(&m) {
            return Err(AppError::invalid("the embedded default model cannot be deleted"));
        }
        self.models.evict(&self.store.model_path(&m));
        self.store.remove_model(id).await?;
        Ok(())
    }

    /// The runs of one model, newest first.
    pub async fn model_runs(&self, id: ModelId) -> AppResult<Vec<RunSummary>> {
        self.store.get_model(id).await?;
        self.list_runs(Some(id), MAX_LIST).await
    }

    /// Conversations, most recently updated first.
    pub async fn list_conversations(&self) -> AppResult<Vec<Conversation>> {
        Ok(self.store.list_conversations(MAX_LIST, 0).await?.iter().map(conversation_view).collect())
    }

    /// A conversation with its messages (system messages are not shown).
    pub async fn get_conversation(&self, id: i64) -> AppResult<ConversationDetail> {
        let c = self.store.get_conversation(id).await?;
        let messages = self
            .store
            .messages(id)
            .await?
            .into_iter()
            .filter_map(|m| {
                let role = match m.role {
                    unmask_store::MessageRole::User => Role::User,
                    unmask_store::MessageRole::Assistant => Role::Assistant,
                    unmask_store::MessageRole::System => return None,
                };
                Some(Message { id: m.id, role, content: m.content, run_id: m.run_id, created_ms: m.created_at })
            })
            .collect();
        Ok(ConversationDetail { conversation: conversation_view(&c), messages })
    }

    /// Deletes a conversation and its messages (runs stay).
    pub async fn delete_conversation(&self, id: i64) -> AppResult<()> {
        if self.store.delete_conversations(&[id]).await? == 0 {
            return Err(AppError::not_found(format!("conversation {id} not found")));
        }
        Ok(())
    }
}

pub(crate) fn conversation_view(c: &unmask_store::Conversation) -> Conversation {
    Conversation {
        id: c.id,
        title: c.title.clone(),
        model_id: c.model_id,
        updated_ms: c.updated_at,
        system_prompt: c.system_prompt.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unmask_engine::model::config::ModelConfig;

    #[test]
    fn memory_need_is_weights_plus_kv_activations_and_logits() {
        let gib = 1u64 << 30;
        let rates = WorkingSetRates {
            kv_per_token: 1 << 20,
            activations_per_token: 1 << 10,
            logits_per_row: 1 << 20,
            logits_row_per_answer_token: true,
        };
        let need = memory_needed(4 * gib, &rates, 1792, 256);
        assert_eq!(need, 4 * gib + 2 * gib + 2048 * 1024 + 256 * (1 << 20) + MEMORY_OVERHEAD);
        assert!(fits_memory(need, 7 * gib));
        assert!(!fits_memory(need, 6 * gib), "the K/V cache counts");
        assert!(!fits_memory(1, 0), "unknown memory never claims a fit");
    }

    #[test]
    fn llada_8b_holds_1_mib_of_kv_and_2_4_mib_of_logits_per_token() {
        let dir = crate::backends::embedded_model_dir().expect("embedded model");
        let cfg = ModelConfig::from_hf_file(&dir.join("config.json")).expect("config");
        let rates = WorkingSetRates::of(&cfg);
        assert_eq!(rates.kv_per_token, cfg.n_layers as u64 * 2 * (cfg.n_kv_heads * cfg.head_dim) as u64 * 4);
        // LLaDA-8B: 32 layers x 32 kv heads x 128 = 1 MiB of f32 K/V per token; its 126464-token
        // vocabulary makes every answer position's logits row 2.4 MiB, more than its K/V.
        let big = ModelConfig { n_layers: 32, n_kv_heads: 32, head_dim: 128, vocab: 126_464, ..cfg };
        let rates = WorkingSetRates::of(&big);
        assert_eq!(rates.kv_per_token, 1 << 20);
        assert_eq!(rates.logits_per_row, 126_464 * 20);
        assert!(rates.logits_row_per_answer_token);
    }

    #[test]
    fn weights_are_the_weight_files() {
        let f = |p: &str, n: u64| ModelFile { rel_path: p.into(), size_bytes: n, sha256: String::new() };
        let files = [
            f("config.json", 1),
            f("model-00001.safetensors", 10),
            f("model-00002.safetensors", 20),
            f("tokenizer.json", 5),
        ];
        assert_eq!(weights_bytes(&files, 36), 30);
        assert_eq!(weights_bytes(&[f("m.Q4_K.gguf", 7)], 7), 7);
        assert_eq!(weights_bytes(&[], 99), 99, "no file list: the model's size");
    }

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       16318480 kB\nMemFree:         1000000 kB\nMemAvailable:    8159240 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable"), Some(8_159_240 * 1024));
        assert_eq!(meminfo_field(text, "MemTotal"), Some(16_318_480 * 1024));
        assert_eq!(meminfo_field(text, "Mem"), None);
    }
}
