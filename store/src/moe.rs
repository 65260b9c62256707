//! MoE calibrations: per-model JSON documents (expert activation statistics, placements) that
//! the MoE runtime computes once and reuses.

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::{now_ms, ModelId, Store, UnixMillis};

/// A stored calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeCalibration {
    pub id: i64,
    pub model_id: ModelId,
    /// Name within the model (e.g. `expert-frequency/sm8750`).
    pub name: String,
    pub data: serde_json::Value,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
}

struct CalibrationRow {
    id: i64,
    model_id: i64,
    name: String,
    data_json: String,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<CalibrationRow> for MoeCalibration {
    type Error = StoreError;
    fn try_from(r: CalibrationRow) -> Result<Self> {
        Ok(MoeCalibration {
            data: serde_json::from_str(&r.data_json)
                .map_err(|e| StoreError::corrupt(format!("MoE calibration {}", r.name), e.to_string()))?,
            id: r.id,
            model_id: r.model_id,
            name: r.name,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

impl Store {
    /// Stores a calibration under `(model, name)`, replacing an existing one.
    pub async fn put_moe_calibration(
        &self,
        model_id: ModelId,
        name: &str,
        data: &serde_json::Value,
    ) -> Result<MoeCalibration> {
        if name.is_empty() || name.len() > 200 {
            return Err(StoreError::InvalidRequest("a calibration name must be 1-200 characters".into()));
        }
        self.get_model(model_id).await?;
        let json = data.to_string();
        let now = now_ms();
        sqlx::query!(
            r#"INSERT INTO moe_calibrations (model_id, name, data_json, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (model_id, name) DO UPDATE SET data_json = excluded.data_json, updated_at = excluded.updated_at"#,
            model_id,
            name,
            json,
            now,
            now
        )
        .execute(&self.pool)
        .await?;
        self.get_moe_calibration(model_id, name)
            .await?
            .ok_or_else(|| StoreError::Internal("calibration vanished after insert".into()))
    }

    /// The calibration `(model, name)`, if stored.
    pub async fn get_moe_calibration(&self, model_id: ModelId, name: &str) -> Result<Option<MoeCalibration>> {
        sqlx::query_as!(
            CalibrationRow,
            r#"SELECT id AS "id!", model_id, name, data_json, created_at, updated_at
               FROM moe_calibrations WHERE model_id = ? AND name = ?"#,
            model_id,
            name
        )
        .fetch_optional(&self.pool)
        .await?
        .map(MoeCalibration::try_from)
        .transpose()
    }

    /// All calibrations of a model, by name.
    pub async fn list_moe_calibrations(&self, model_id: ModelId) -> Result<Vec<MoeCalibration>> {
        sqlx::query_as!(
            CalibrationRow,
            r#"SELECT id AS "id!", model_id, name, data_json, created_at, updated_at
               FROM moe_calibrations WHERE model_id = ? ORDER BY name"#,
            model_id
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(MoeCalibration::try_from)
        .collect()
    }

    /// Deletes a calibration; returns whether one existed.
    pub async fn delete_moe_calibration(&self, model_id: ModelId, name: &str) -> Result<bool> {
        let r = sqlx::query!("DELETE FROM moe_calibrations WHERE model_id = ? AND name = ?", model_id, name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Stores what a run's MoE layers did (the engine's `MoeStats` as JSON), replacing a
    /// previous record of that run.
    pub async fn put_run_moe(&self, run_id: i64, stats: &serde_json::Value) -> Result<()> {
        // A runtime-checked query: the table is newer than the cached query metadata.
        sqlx::query("INSERT INTO run_moe (run_id, stats_json) VALUES (?, ?) ON CONFLICT (run_id) DO UPDATE SET stats_json = excluded.stats_json")
            .bind(run_id)
            .bind(stats.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// What a run's MoE layers did, if it was a MoE run.
    pub async fn run_moe(&self, run_id: i64) -> Result<Option<serde_json::Value>> {
        let row: Option<(String,)> = sqlx::query_as("SELECT stats_json FROM run_moe WHERE run_id = ?")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|(j,)| {
            serde_json::from_str(&j)
                .map_err(|e| StoreError::corrupt(format!("MoE record of run {run_id}"), e.to_string()))
        })
        .transpose()
    }
}
