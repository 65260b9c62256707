//! Model manager, conversations and app info: list with "fits this device's memory", import from
//! disk, delete, a model's runs.

use std::collections::HashMap;
use std::path::Path;

use unmask_store::{ModelId, ModelRecord};

use crate::dto::{AppInfo, Conversation, ConversationDetail, Message, ModelEntry, Role, RunSummary};
use crate::error::{AppError, AppResult};
use crate::runs::MAX_LIST;
use crate::state::AppState;

/// Memory a model needs beyond its weights (activations, KV cache, the app itself), as a factor
/// of its size, plus a fixed allowance.
const MEMORY_FACTOR: f64 = 1.3;
const MEMORY_OVERHEAD: u64 = 256 << 20;

/// Whether a model of `size_bytes` fits `total_memory` with room for decoding.
pub fn fits_memory(size_bytes: u64, total_memory: u64) -> bool {
    (size_bytes as f64 * MEMORY_FACTOR) as u64 + MEMORY_OVERHEAD <= total_memory
}

/// Total physical memory (Linux/Android `/proc/meminfo`; elsewhere unknown = 0).
pub fn total_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?.to_owned();
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
}

/// The CPU's model name (Linux `/proc/cpuinfo`), else the architecture.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_owned()))
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
            default_model_id: self.embedded_model_id,
            devices: crate::backends::device_names(),
        })
    }

    async fn run_counts(&self) -> AppResult<HashMap<ModelId, u32>> {
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT model_id, COUNT(*) FROM runs WHERE model_id IS NOT NULL GROUP BY model_id")
                .fetch_all(self.store.pool())
                .await
                .map_err(|e| AppError::new("store", format!("counting runs: {e}")))?;
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

    fn entry(&self, m: &ModelRecord, counts: &HashMap<ModelId, u32>, memory: u64) -> ModelEntry {
        ModelEntry {
            id: m.id,
            name: m.name.clone(),
            architecture: m.architecture.clone(),
            format: m.format.as_str().into(),
            quantisation: m.quantization.clone(),
            size_bytes: m.size_bytes,
            sha256: m.sha256.clone(),
            source: m.source.clone(),
            path: self.store.model_path(m).display().to_string(),
            added_ms: m.added_at,
            used_ms: m.last_used_at,
            embedded: self.is_embedded(m),
            fits_memory: fits_memory(m.size_bytes, memory),
            run_count: counts.get(&m.id).copied().unwrap_or(0),
            moe_calibration: None,
        }
    }

    /// One model's manager entry.
    pub async fn model_entry(&self, m: &ModelRecord) -> AppResult<ModelEntry> {
        let mut e = self.entry(m, &self.run_counts().await?, total_memory_bytes());
        e.moe_calibration = self.calibration_summary(m.id).await?;
        Ok(e)
    }

    /// Every registered model.
    pub async fn list_models(&self) -> AppResult<Vec<ModelEntry>> {
        let counts = self.run_counts().await?;
        let memory = total_memory_bytes();
        let mut out = Vec::new();
        for m in self.store.list_models().await? {
            let mut e = self.entry(&m, &counts, memory);
            e.moe_calibration = self.calibration_summary(m.id).await?;
            out.push(e);
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
            return Err(AppError::new("notFound", format!("{}: no such file or folder", p.display())));
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

    #[test]
    fn memory_fit_leaves_room_for_decoding() {
        let gib = 1u64 << 30;
        assert!(fits_memory(gib, 8 * gib));
        assert!(!fits_memory(7 * gib, 8 * gib));
        assert!(!fits_memory(1, 0), "unknown memory never claims a fit");
    }
}
