-- What a run's mixture-of-experts layers did (launches, routed and dropped token-expert pairs,
-- padding rows), as JSON of the engine's MoeStats; only runs of MoE models have a row.
CREATE TABLE run_moe (
    run_id      INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    stats_json  TEXT    NOT NULL
);
