//! What the UI's end-to-end mock serves instead of hand-written copies: the real settings schema,
//! the embedded model's entry and the virtual NPU devices, written next to the recorded runs
//! (`ui/tests/fixtures/app-data.json`) by the `record_fixtures` test and checked for drift by
//! `tests/fixtures_fresh.rs`.

use serde_json::{json, Value};

use crate::dto::ModelEntry;
use crate::schema::settings_schema;

/// File name of the app data, in the fixtures folder.
pub const APP_DATA_FILE: &str = "app-data.json";

/// Fields of a model entry that depend on this machine or this data folder (id, location and the
/// import source naming it, times, run counts, the memory verdict); the mock fills them itself.
const MACHINE_FIELDS: [&str; 7] = ["id", "path", "source", "addedMs", "usedMs", "runCount", "fitsMemory"];

/// The embedded model's entry without its machine-dependent fields.
pub fn portable_model(entry: &ModelEntry) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(entry)?;
    if let Some(obj) = v.as_object_mut() {
        for f in MACHINE_FIELDS {
            obj.remove(f);
        }
    }
    Ok(v)
}

/// The document the e2e mock reads: `{ schema, models: [embedded], devices }`.
pub fn app_data(embedded: &ModelEntry, devices: &[String]) -> serde_json::Result<Value> {
    Ok(json!({
        "schema": serde_json::to_value(settings_schema())?,
        "models": [portable_model(embedded)?],
        "devices": devices,
    }))
}
