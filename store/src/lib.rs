//! Unmask's memory, in one SQLite database (via `sqlx`) plus a models folder: which models the
//! user has, every run with its settings, output and metrics, step traces for replay and
//! comparison, vNPU timelines, presets, MoE calibrations and chat history.
//!
//! ```no_run
//! # async fn demo() -> unmask_store::Result<()> {
//! use unmask_store::{Store, NewRun};
//! let store = Store::open(unmask_store::default_data_dir()?).await?;
//! let model = store.import_model("models/tiny-llada".as_ref(), None, true).await?;
//! let backend = unmask_engine::run::BackendSpec::Cpu;
//! let mut rec = store.start_run(NewRun::new(&model, &backend, "What is 2+2?", Default::default())).await?;
//! // ... pass `|f| { rec.record(f); ControlFlow::Continue(()) }` to `Session::run`, then
//! // `rec.finish(unmask_store::recorded_outcome(&outcome).0)` ...
//! # Ok(()) }
//! ```
//!
//! Layout of a data folder ([`default_data_dir`]): `unmask.db` (+ `-wal`, `-shm`), `models/NAME/`
//! for managed models, `models/.downloads/` for partial downloads, `sessions/` for the locks
//! that tell live writers from dead ones.

pub mod chat;
pub mod download;
mod error;
mod hashing;
pub mod import;
pub mod models;
pub mod moe;
mod paths;
pub mod presets;
pub mod recorder;
pub mod runs;
mod session;
pub mod speculation;
pub mod trace_codec;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

pub use chat::{Conversation, Message, MessageRole, NewConversation};
pub use download::{DownloadConfig, DownloadEvent, DownloadRequest, RemoteFile};
pub use error::{Result, StoreError};
pub use import::{ImportEvent, ImportOptions, Validation};
pub use models::{DiskUsage, ModelDiskUsage, ModelFile, ModelFormat, ModelRecord, RemovedModel};
pub use moe::MoeCalibration;
pub use paths::{default_data_dir, safe_relative_path, DATABASE_FILE, DATA_DIR_ENV, MODELS_DIR};
pub use presets::{NewPreset, Preset};
pub use recorder::{RunRecorder, TraceBatching};
pub use speculation::RunSpeculation;
pub use runs::{recorded_outcome, NewRun, RunComparison, RunMetrics, RunOutcome, RunRecord, RunStatus, SettingDiff, StoredTimeline};
pub use tokio_util::sync::CancellationToken;

/// Row id of a model.
pub type ModelId = i64;
/// Row id of a run.
pub type RunId = i64;
/// Row id of a preset.
pub type PresetId = i64;
/// Row id of a conversation.
pub type ConversationId = i64;
/// Row id of a message.
pub type MessageId = i64;
/// Milliseconds since the Unix epoch (UTC).
pub type UnixMillis = i64;

/// How long a connection waits for another writer's lock before failing with "database is locked".
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// An open store: a connection pool to `unmask.db` and the data folder around it. Cheap to clone
/// (share one per process; the Tauri app can `manage` it).
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    data_dir: PathBuf,
    session: Arc<session::Session>,
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir`: creates the folders, connects with WAL,
    /// foreign keys and a busy timeout, applies the embedded migrations, and recovers runs left
    /// `running` by a process that died (they become `interrupted`).
    pub async fn open(data_dir: impl Into<PathBuf>) -> Result<Store> {
        let data_dir: PathBuf = data_dir.into();
        for d in [data_dir.clone(), data_dir.join(MODELS_DIR)] {
            std::fs::create_dir_all(&d).map_err(|e| StoreError::io(&d, e))?;
        }
        let db_path = data_dir.join(DATABASE_FILE);
        let options = SqliteConnectOptions::new()
            .filename(&db_path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL: a process crash never loses a committed transaction; only a power
            // loss can drop the last few, and the database stays consistent either way.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let session = Arc::new(session::Session::create(&data_dir.join(paths::SESSIONS_DIR))?);
        let store = Store { pool, data_dir, session };
        store.recover_interrupted_runs().await?;
        session::sweep_dead(&store.data_dir.join(paths::SESSIONS_DIR), &store.session.id);
        models::sweep_leftovers(&store.models_dir(), &store.data_dir.join(paths::SESSIONS_DIR));
        Ok(store)
    }

    /// Opens the store in [`default_data_dir`] (`$UNMASK_DATA_DIR` or the platform folder).
    pub async fn open_default() -> Result<Store> {
        Store::open(default_data_dir()?).await
    }

    /// The data folder.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Folder of managed models (`DATA/models`).
    pub fn models_dir(&self) -> PathBuf {
        self.data_dir.join(MODELS_DIR)
    }

    /// Path of the database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join(DATABASE_FILE)
    }

    /// The connection pool, for queries this crate does not offer.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Marks runs left `running` by dead store sessions as `interrupted`; returns how many.
    /// [`Store::open`] calls this; runs of live sessions (another open store) are left alone.
    pub async fn recover_interrupted_runs(&self) -> Result<u64> {
        let owners = sqlx::query_scalar!(r#"SELECT DISTINCT owner FROM runs WHERE status = 'running'"#)
            .fetch_all(&self.pool)
            .await?;
        let dir = self.data_dir.join(paths::SESSIONS_DIR);
        let now = now_ms();
        let mut n = 0;
        for owner in owners {
            let dead = match &owner {
                Some(o) if *o == self.session.id => false,
                Some(o) => !session::is_alive(&dir, o),
                None => true,
            };
            if !dead {
                continue;
            }
            let r = sqlx::query!(
                r#"UPDATE runs SET status = 'interrupted', finished_at = ?1, owner = NULL,
                       error = coalesce(error, 'the process writing this run ended before it finished')
                   WHERE status = 'running' AND owner IS ?2"#,
                now,
                owner
            )
            .execute(&self.pool)
            .await?;
            n += r.rows_affected();
        }
        if n > 0 {
            tracing::info!(runs = n, "marked runs of dead processes as interrupted");
        }
        Ok(n)
    }

    /// Runs SQLite's `PRAGMA integrity_check`; `Ok(())` when it reports `ok`.
    pub async fn integrity_check(&self) -> Result<()> {
        let rows: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check").fetch_all(&self.pool).await?;
        if rows.len() == 1 && rows[0] == "ok" {
            Ok(())
        } else {
            Err(StoreError::corrupt("database", rows.join("; ")))
        }
    }

    /// Closes the pool (waits for connections to finish). Dropping the store also works.
    pub async fn close(self) {
        self.pool.close().await;
    }

    /// A write transaction that takes the write lock up front (`BEGIN IMMEDIATE`), so it waits
    /// for other writers via the busy timeout instead of failing when a read lock cannot be
    /// upgraded.
    pub(crate) async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    pub(crate) fn session_id(&self) -> &str {
        &self.session.id
    }
}

/// Current time in Unix milliseconds.
pub fn now_ms() -> UnixMillis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
