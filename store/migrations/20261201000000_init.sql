-- Unmask store, schema v1. Times are Unix milliseconds; sizes are bytes.

-- Models the user has. `path` is relative to the data folder for managed models (under
-- `models/`), absolute for models registered in place (`in_place = 1`, files not owned by us).
CREATE TABLE models (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    architecture  TEXT    NOT NULL,
    format        TEXT    NOT NULL CHECK (format IN ('hf', 'gguf')),
    quantization  TEXT    NOT NULL,
    size_bytes    INTEGER NOT NULL,
    sha256        TEXT    NOT NULL UNIQUE,
    source        TEXT    NOT NULL,
    path          TEXT    NOT NULL,
    in_place      INTEGER NOT NULL DEFAULT 0 CHECK (in_place IN (0, 1)),
    config_json   TEXT    NOT NULL,
    added_at      INTEGER NOT NULL,
    last_used_at  INTEGER
);

-- The files of a model, relative to the model's path (a GGUF model has one file whose
-- `rel_path` is its file name).
CREATE TABLE model_files (
    id          INTEGER PRIMARY KEY,
    model_id    INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    rel_path    TEXT    NOT NULL,
    size_bytes  INTEGER NOT NULL,
    sha256      TEXT    NOT NULL,
    UNIQUE (model_id, rel_path)
);

-- Every decoding run. `model_name` survives deleting the model (model_id becomes NULL).
-- `owner` names the store session writing a `running` run; recovery on open marks runs of
-- dead sessions `interrupted`.
CREATE TABLE runs (
    id                  INTEGER PRIMARY KEY,
    model_id            INTEGER REFERENCES models (id) ON DELETE SET NULL,
    model_name          TEXT    NOT NULL,
    backend             TEXT    NOT NULL,
    prompt              TEXT    NOT NULL,
    settings_json       TEXT    NOT NULL,
    status              TEXT    NOT NULL
        CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
    output              TEXT,
    output_tokens_json  TEXT,
    error               TEXT,
    stop_reason         TEXT,
    started_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    wall_s              REAL,
    steps               INTEGER,
    forwards            INTEGER,
    tokens_per_forward  REAL,
    simulated_npu_s     REAL,
    energy_mj           REAL,
    trace_frames        INTEGER NOT NULL DEFAULT 0,
    owner               TEXT
);
CREATE INDEX runs_by_start ON runs (started_at DESC, id DESC);
CREATE INDEX runs_by_model ON runs (model_id, started_at DESC);
CREATE INDEX runs_running ON runs (status) WHERE status = 'running';

-- Step trace of a run in chunks of consecutive frames (`first_frame` counts the run's frames
-- from 0): the frames' deltas in a compact binary encoding, deflate-compressed (`encoding`
-- names the format so it can evolve).
CREATE TABLE trace_chunks (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_frame  INTEGER NOT NULL,
    n_frames     INTEGER NOT NULL,
    encoding     TEXT    NOT NULL,
    data         BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_frame)
) WITHOUT ROWID;

-- The virtual NPU timeline of a run (JSON, deflate-compressed), for a later Perfetto export.
CREATE TABLE run_timelines (
    run_id    INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    encoding  TEXT NOT NULL,
    data      BLOB NOT NULL
);

-- Named decoding settings.
CREATE TABLE presets (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL UNIQUE,
    description    TEXT    NOT NULL DEFAULT '',
    settings_json  TEXT    NOT NULL,
    system_prompt  TEXT,
    backend        TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- MoE calibrations (expert statistics and placements) per model, JSON documents by name.
CREATE TABLE moe_calibrations (
    id          INTEGER PRIMARY KEY,
    model_id    INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    data_json   TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (model_id, name)
);

-- Chat history.
CREATE TABLE conversations (
    id             INTEGER PRIMARY KEY,
    title          TEXT    NOT NULL,
    model_id       INTEGER REFERENCES models (id) ON DELETE SET NULL,
    preset_id      INTEGER REFERENCES presets (id) ON DELETE SET NULL,
    system_prompt  TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX conversations_by_update ON conversations (updated_at DESC, id DESC);

CREATE TABLE messages (
    id               INTEGER PRIMARY KEY,
    conversation_id  INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    role             TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content          TEXT    NOT NULL,
    run_id           INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    created_at       INTEGER NOT NULL
);
CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
CREATE INDEX messages_by_run ON messages (run_id) WHERE run_id IS NOT NULL;
