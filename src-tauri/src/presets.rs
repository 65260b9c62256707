//! Presets: the built-in ones (reference, fast parallel threshold, speculative + revision on the
//! virtual SM8750) and user presets, stored in the store's `presets` table.

use unmask_engine::decode::{self as engine_decode, CacheMode};
use unmask_store::{NewPreset, Store};

use crate::dto::{BackendChoice, DecodeSettings, Preset};
use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// Name of the reference preset.
pub const REFERENCE: &str = "Reference (LLaDA schedule, CPU)";
/// Name of the threshold preset.
pub const FAST_PARALLEL: &str = "Fast parallel (threshold 0.9, prefix cache, CPU)";
/// Name of the NPU-aware preset.
pub const SPEC_REVISION: &str = "Speculative + revision (vNPU SM8750)";

/// The built-in presets: (name, description, settings, backend).
pub fn builtin() -> Vec<(&'static str, &'static str, engine_decode::DecodeSettings, BackendChoice)> {
    let base = engine_decode::DecodeSettings { gen_length: 32, block_length: 16, steps: 32, ..Default::default() };
    vec![
        (
            REFERENCE,
            "LLaDA's reference decoding: fixed schedule, one step per committed token, no cache.",
            base.clone(),
            BackendChoice::cpu(),
        ),
        (
            FAST_PARALLEL,
            "Fast-dLLM style: commit every position above 90% confidence per step, prefix KV cache.",
            engine_decode::DecodeSettings { threshold: Some(0.9), cache: CacheMode::Prefix, ..base.clone() },
            BackendChoice::cpu(),
        ),
        (
            SPEC_REVISION,
            "NPU-aware: speculative drafts for later blocks and progressive revision on the CPU path, simulated on a Snapdragon 8 Elite.",
            engine_decode::DecodeSettings {
                speculative: Some(Default::default()),
                revision: Some(Default::default()),
                ..base
            },
            BackendChoice::vnpu("sm8750"),
        ),
    ]
}

fn is_builtin(name: &str) -> bool {
    builtin().iter().any(|(n, ..)| *n == name)
}

/// Place of a built-in preset in [`builtin`] (the reference decoder first, since the UI starts
/// with the first preset); user presets come after all of them.
fn builtin_rank(name: &str) -> usize {
    builtin().iter().position(|(n, ..)| *n == name).unwrap_or(usize::MAX)
}

/// Adds any missing built-in preset (idempotent; run at startup).
pub async fn ensure_builtin(store: &Store) -> AppResult<()> {
    for (name, description, settings, backend) in builtin() {
        if store.preset_by_name(name).await?.is_none() {
            store
                .create_preset(&NewPreset {
                    name: name.into(),
                    description: description.into(),
                    settings,
                    system_prompt: None,
                    backend: Some(backend.to_spec()),
                })
                .await?;
        }
    }
    Ok(())
}

fn view(p: &unmask_store::Preset) -> Preset {
    Preset {
        id: p.id,
        name: p.name.clone(),
        settings: DecodeSettings::from_engine(&p.settings),
        backend: BackendChoice::from_spec(p.backend.as_ref().unwrap_or(&unmask_engine::run::BackendSpec::Cpu)),
        builtin: is_builtin(&p.name),
    }
}

impl AppState {
    /// Every preset: the built-in ones first in their declared order, then the user's by name.
    pub async fn list_presets(&self) -> AppResult<Vec<Preset>> {
        let mut v: Vec<Preset> = self.store.list_presets().await?.iter().map(view).collect();
        v.sort_by_key(|p| (builtin_rank(&p.name), p.name.to_lowercase()));
        Ok(v)
    }

    /// Saves a user preset (replacing one of the same name); built-in names are refused.
    pub async fn save_preset(&self, name: &str, settings: &DecodeSettings, backend: &BackendChoice) -> AppResult<Preset> {
        let name = name.trim();
        if name.is_empty() {
            return Err(AppError::invalid("a preset needs a name"));
        }
        if is_builtin(name) {
            return Err(AppError::invalid(format!("`{name}` is a built-in preset; save under another name")));
        }
        let engine = settings.to_engine();
        engine.validate()?;
        if backend.kind == crate::dto::BackendKind::Vnpu {
            crate::backends::device_profile(backend.device.as_deref().unwrap_or(unmask_engine::run::DEFAULT_DEVICE))?;
        }
        let new = NewPreset {
            name: name.into(),
            description: String::new(),
            settings: engine,
            system_prompt: None,
            backend: Some(backend.to_spec()),
        };
        let p = match self.store.preset_by_name(name).await? {
            Some(old) => self.store.update_preset(old.id, &new).await?,
            None => self.store.create_preset(&new).await?,
        };
        Ok(view(&p))
    }

    /// Deletes a user preset (built-in ones stay).
    pub async fn delete_preset(&self, id: i64) -> AppResult<()> {
        let p = self.store.get_preset(id).await?;
        if is_builtin(&p.name) {
            return Err(AppError::invalid(format!("`{}` is built in and cannot be deleted", p.name)));
        }
        Ok(self.store.delete_preset(id).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_presets_are_valid_settings() {
        for (name, _, s, _) in builtin() {
            s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
