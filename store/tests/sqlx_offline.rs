//! The committed `.sqlx/` query metadata must match the migrations and the source: every cached
//! query still describes the same way against a freshly migrated database, and every cached
//! query still appears in the source (no stale files). A query added or edited without
//! regenerating fails the offline build itself. Regenerate with `store/scripts/sqlx-prepare.sh`.

use std::path::Path;

use sqlx::{Column, Either, Executor, TypeInfo};
use unmask_store::Store;

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn source_text(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            source_text(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
}

/// sqlx's offline files store SQLite type infos by their `DataType` variant name.
fn offline_type_name(t: &str) -> &str {
    match t {
        "Null" => "NULL",
        "Int4" | "Int64" | "Integer" => "INTEGER",
        "Float" => "REAL",
        "Text" => "TEXT",
        "Blob" => "BLOB",
        "Numeric" => "NUMERIC",
        "Bool" => "BOOLEAN",
        "Date" => "DATE",
        "Time" => "TIME",
        "Datetime" => "DATETIME",
        other => other,
    }
}

#[tokio::test]
async fn offline_query_cache_matches_schema_and_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut src = String::new();
    source_text(&root.join("src"), &mut src);
    let src = squash(&src);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(root.join(".sqlx")).expect("store/.sqlx is committed") {
        let path = e.unwrap().path();
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let query = json["query"].as_str().unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(src.contains(&squash(query)), "{name}: stale, its query is not in src/ any more:\n{query}");
        let d = store.pool().describe(query).await.unwrap_or_else(|e| panic!("{name}: {e}\n{query}"));
        let cached = &json["describe"];
        let cols = cached["columns"].as_array().unwrap();
        assert_eq!(cols.len(), d.columns().len(), "{name}: column count");
        for (c, live) in cols.iter().zip(d.columns()) {
            assert_eq!(c["name"].as_str().unwrap(), live.name(), "{name}: column name");
            let t = c["type_info"].as_str().unwrap_or("Null");
            assert_eq!(offline_type_name(t), live.type_info().name(), "{name}: type of {}", live.name());
        }
        let nullable: Vec<Option<bool>> = cached["nullable"].as_array().unwrap().iter().map(|v| v.as_bool()).collect();
        let live_nullable: Vec<Option<bool>> = (0..d.columns().len()).map(|i| d.nullable(i)).collect();
        assert_eq!(nullable, live_nullable, "{name}: nullability");
        let params = cached["parameters"]["Right"].as_u64().map(|p| p as usize);
        let live_params = match d.parameters() {
            Some(Either::Right(n)) => Some(n),
            Some(Either::Left(v)) => Some(v.len()),
            None => None,
        };
        assert_eq!(params, live_params, "{name}: parameter count");
        n += 1;
    }
    assert!(n >= 30, "only {n} cached queries");
}
