//! What speculative decoding did in a run: the draft model and its counters, kept beside the run
//! so `runs show` and comparisons can say which draft produced an acceptance rate.

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::Store;

/// The speculative-decoding record of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpeculation {
    /// Display name of the draft model (kept when that model is deleted).
    pub draft_model: String,
    /// The engine's `SpecArStats` as JSON.
    pub stats: serde_json::Value,
}

impl Store {
    /// Stores a run's speculative-decoding record, replacing a previous one of that run.
    pub async fn put_run_speculation(&self, run_id: i64, spec: &RunSpeculation) -> Result<()> {
        // A runtime-checked query: the table is newer than the cached query metadata.
        sqlx::query(
            "INSERT INTO run_speculation (run_id, draft_model, stats_json) VALUES (?, ?, ?) \
             ON CONFLICT (run_id) DO UPDATE SET draft_model = excluded.draft_model, stats_json = excluded.stats_json",
        )
        .bind(run_id)
        .bind(&spec.draft_model)
        .bind(spec.stats.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A run's speculative-decoding record, if it ran with a draft model.
    pub async fn run_speculation(&self, run_id: i64) -> Result<Option<RunSpeculation>> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT draft_model, stats_json FROM run_speculation WHERE run_id = ?")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|(draft_model, j)| {
            let stats = serde_json::from_str(&j)
                .map_err(|e| StoreError::corrupt(format!("speculation record of run {run_id}"), e.to_string()))?;
            Ok(RunSpeculation { draft_model, stats })
        })
        .transpose()
    }
}
