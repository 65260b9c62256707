-- What speculative decoding did in a run of an autoregressive model with a draft model: the
-- draft's display name and the engine's SpecArStats as JSON (drafted, judged, accepted, discarded,
-- schedule, queue depths). Only runs with a draft model have a row.
CREATE TABLE run_speculation (
    run_id      INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    draft_model TEXT    NOT NULL,
    stats_json  TEXT    NOT NULL
);
