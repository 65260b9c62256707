//! Named decoding presets.

use serde::{Deserialize, Serialize};
use unmask_engine::decode::DecodeSettings;
use unmask_engine::run::BackendSpec;

use crate::error::{Result, StoreError};
use crate::{now_ms, PresetId, Store, UnixMillis};

/// A stored preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preset {
    pub id: PresetId,
    /// Unique name.
    pub name: String,
    pub description: String,
    pub settings: DecodeSettings,
    /// System prompt for chats that use the preset.
    pub system_prompt: Option<String>,
    /// Backend and device (`cpu`, `vnpu:sm8750`), if the preset fixes one.
    pub backend: Option<BackendSpec>,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

/// Fields of a preset to create or replace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewPreset {
    pub name: String,
    pub description: String,
    pub settings: DecodeSettings,
    pub system_prompt: Option<String>,
    pub backend: Option<BackendSpec>,
}

struct PresetRow {
    id: i64,
    name: String,
    description: String,
    settings_json: String,
    system_prompt: Option<String>,
    backend: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<PresetRow> for Preset {
    type Error = StoreError;
    fn try_from(r: PresetRow) -> Result<Self> {
        Ok(Preset {
            settings: serde_json::from_str(&r.settings_json)
                .map_err(|e| StoreError::corrupt(format!("settings of preset {}", r.name), e.to_string()))?,
            id: r.id,
            name: r.name,
            description: r.description,
            system_prompt: r.system_prompt,
            backend: r.backend.as_deref().map(BackendSpec::from_recorded),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > 200 {
        return Err(StoreError::InvalidRequest("a preset name must be 1-200 characters".into()));
    }
    Ok(())
}

impl Store {
    /// Creates a preset; the name must be unused.
    pub async fn create_preset(&self, p: &NewPreset) -> Result<Preset> {
        check_name(&p.name)?;
        if self.preset_by_name(&p.name).await?.is_some() {
            return Err(StoreError::InvalidRequest(format!("a preset named `{}` already exists", p.name)));
        }
        let settings = serde_json::to_string(&p.settings).map_err(|e| StoreError::Internal(e.to_string()))?;
        let backend = p.backend.as_ref().map(|b| b.to_string());
        let now = now_ms();
        let id = sqlx::query_scalar!(
            r#"INSERT INTO presets (name, description, settings_json, system_prompt, backend, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id AS "id!""#,
            p.name,
            p.description,
            settings,
            p.system_prompt,
            backend,
            now,
            now
        )
        .fetch_one(&self.pool)
        .await?;
        self.get_preset(id).await
    }

    /// Replaces every field of a preset.
    pub async fn update_preset(&self, id: PresetId, p: &NewPreset) -> Result<Preset> {
        check_name(&p.name)?;
        if let Some(other) = self.preset_by_name(&p.name).await? {
            if other.id != id {
                return Err(StoreError::InvalidRequest(format!("a preset named `{}` already exists", p.name)));
            }
        }
        let settings = serde_json::to_string(&p.settings).map_err(|e| StoreError::Internal(e.to_string()))?;
        let backend = p.backend.as_ref().map(|b| b.to_string());
        let now = now_ms();
        let r = sqlx::query!(
            r#"UPDATE presets SET name = ?, description = ?, settings_json = ?, system_prompt = ?, backend = ?,
                                  updated_at = ?
               WHERE id = ?"#,
            p.name,
            p.description,
            settings,
            p.system_prompt,
            backend,
            now,
            id
        )
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("preset", id));
        }
        self.get_preset(id).await
    }

    /// One preset.
    pub async fn get_preset(&self, id: PresetId) -> Result<Preset> {
        sqlx::query_as!(
            PresetRow,
            r#"SELECT id AS "id!", name, description, settings_json, system_prompt, backend, created_at, updated_at
               FROM presets WHERE id = ?"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found("preset", id))?
        .try_into()
    }

    /// The preset called `name`, if any.
    pub async fn preset_by_name(&self, name: &str) -> Result<Option<Preset>> {
        sqlx::query_as!(
            PresetRow,
            r#"SELECT id AS "id!", name, description, settings_json, system_prompt, backend, created_at, updated_at
               FROM presets WHERE name = ?"#,
            name
        )
        .fetch_optional(&self.pool)
        .await?
        .map(Preset::try_from)
        .transpose()
    }

    /// All presets, by name.
    pub async fn list_presets(&self) -> Result<Vec<Preset>> {
        sqlx::query_as!(
            PresetRow,
            r#"SELECT id AS "id!", name, description, settings_json, system_prompt, backend, created_at, updated_at
               FROM presets ORDER BY name"#
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(Preset::try_from)
        .collect()
    }

    /// Deletes a preset (conversations that used it keep their messages).
    pub async fn delete_preset(&self, id: PresetId) -> Result<()> {
        let r = sqlx::query!("DELETE FROM presets WHERE id = ?", id).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("preset", id));
        }
        Ok(())
    }
}
