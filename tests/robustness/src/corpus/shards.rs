//! Sharded checkpoints (`model.safetensors.index.json` + shard files) whose index lies: missing
//! shards, tensors the named shard does not hold, paths that leave the model folder.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::files::{self, Safetensors};
use super::{Corpus, Expect, Result};

const CLASS: &str = "shards";
const INDEX: &str = "model.safetensors.index.json";
const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
/// A tensor of the first shard.
const Q: &str = "model.transformer.blocks.0.q_proj.weight";

/// The tiny model split in two shards.
struct Split {
    first: Safetensors,
    second: Safetensors,
    /// The honest weight map.
    map: Map<String, Value>,
}

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let src_path = c.embedded("tiny-llada").join("model.safetensors");
    let base = Safetensors::read(&src_path)?;
    let names = base.names();
    if !names.iter().take(names.len() / 2).any(|n| n == Q) {
        return Err(files::source_err(&src_path, format!("{Q} is not in the first half of the data")));
    }
    let (a, b) = names.split_at(names.len() / 2);
    let mut map = Map::new();
    for n in a {
        map.insert(n.clone(), json!(SHARD1));
    }
    for n in b {
        map.insert(n.clone(), json!(SHARD2));
    }
    let split = Split { first: base.subset(a), second: base.subset(b), map };
    let to_second: Vec<String> = b.to_vec();

    write_case(c, &split, "shards_sound", split.map.clone(), None, Expect::ok())?;

    // The map sends the second half to a shard file that does not exist.
    let mut m = split.map.clone();
    for n in &to_second {
        m.insert(n.clone(), json!("model-00003-of-00003.safetensors"));
    }
    write_case(
        c,
        &split,
        "shards_missing_shard_file",
        m,
        None,
        Expect::bad_file(&["model-00003-of-00003.safetensors"]),
    )?;

    // The map says q_proj lives in the second shard; only the first holds it.
    let mut m = split.map.clone();
    m.insert(Q.into(), json!(SHARD2));
    write_case(c, &split, "shards_tensor_not_in_named_shard", m, None, Expect::bad_file(&[INDEX, "q_proj"]))?;

    // The map lists a tensor no shard holds.
    let mut m = split.map.clone();
    m.insert("model.transformer.blocks.0.extra_proj.weight".into(), json!(SHARD1));
    write_case(c, &split, "shards_mapped_tensor_in_no_shard", m, None, Expect::bad_file(&[INDEX, "extra_proj"]))?;

    // Both shards hold q_proj.
    let mut with_q = to_second.clone();
    with_q.push(Q.to_owned());
    let second_with_q = base.subset(&with_q);
    write_case(
        c,
        &split,
        "shards_tensor_in_two_shards",
        split.map.clone(),
        Some(&second_with_q),
        Expect::bad_file(&["q_proj"]),
    )?;

    // Shard names that leave the model folder; the file they name exists (and is a sound
    // shard), so only the name check stands between the index and a file elsewhere.
    let outside = c.path("models").join("evil.safetensors");
    files::create_dir(c.path("models").as_path())?;
    files::write(&outside, &split.second.to_bytes())?;
    let traversal = |target: &str| {
        let mut m = split.map.clone();
        for n in &to_second {
            m.insert(n.clone(), json!(target));
        }
        m
    };
    write_case(
        c,
        &split,
        "shards_path_traversal",
        traversal("../evil.safetensors"),
        None,
        Expect::bad_file(&[INDEX, "evil.safetensors"]),
    )?;
    write_case(
        c,
        &split,
        "shards_path_traversal_nested",
        traversal("sub/../../evil.safetensors"),
        None,
        Expect::bad_file(&[INDEX, "evil.safetensors"]),
    )?;
    let abs = outside.display().to_string();
    write_case(
        c,
        &split,
        "shards_absolute_path",
        traversal(&abs),
        None,
        Expect::bad_file(&[INDEX, "evil.safetensors"]),
    )?;

    // A shard name that is not a string, an empty map, no map, not JSON.
    let mut m = split.map.clone();
    m.insert(Q.into(), json!(1));
    write_case(c, &split, "shards_weight_map_value_not_string", m, None, Expect::bad_file(&[INDEX, "q_proj"]))?;
    write_case(c, &split, "shards_weight_map_empty", Map::new(), None, Expect::bad_file(&[INDEX]))?;
    raw_index_case(
        c,
        &split,
        "shards_index_without_weight_map",
        br#"{"metadata": {"total_size": 1}}"#,
        Expect::bad_file(&[INDEX, "weight_map"]),
    )?;
    raw_index_case(
        c,
        &split,
        "shards_weight_map_not_object",
        br#"{"weight_map": ["a", "b"]}"#,
        Expect::bad_file(&[INDEX, "weight_map"]),
    )?;
    raw_index_case(c, &split, "shards_index_not_json", b"{\"weight_map\": {\"a\": ", Expect::bad_file(&[INDEX]))?;
    Ok(())
}

/// A model folder with both shards (the second replaced by `second` when given), the index
/// holding `map`, and its generate case.
fn write_case(
    c: &mut Corpus,
    s: &Split,
    name: &str,
    map: Map<String, Value>,
    second: Option<&Safetensors>,
    expect: Expect,
) -> Result<()> {
    let dir = shard_dir(c, s, second)?;
    let mut index = Map::new();
    index.insert("metadata".into(), json!({"total_size": s.first.data.len() + s.second.data.len()}));
    index.insert("weight_map".into(), Value::Object(map));
    files::write_json(&dir.join(INDEX), &index)?;
    let args = c.generate(&dir);
    c.push(name, CLASS, args, expect);
    Ok(())
}

fn raw_index_case(c: &mut Corpus, s: &Split, name: &str, index: &[u8], expect: Expect) -> Result<()> {
    let dir = shard_dir(c, s, None)?;
    files::write(&dir.join(INDEX), index)?;
    let args = c.generate(&dir);
    c.push(name, CLASS, args, expect);
    Ok(())
}

fn shard_dir(c: &mut Corpus, s: &Split, second: Option<&Safetensors>) -> Result<PathBuf> {
    let dir = c.model_copy("tiny-llada", &["model.safetensors"])?;
    write_shard(&dir, SHARD1, &s.first)?;
    write_shard(&dir, SHARD2, second.unwrap_or(&s.second))?;
    Ok(dir)
}

fn write_shard(dir: &Path, name: &str, s: &Safetensors) -> Result<()> {
    files::write(&dir.join(name), &s.to_bytes())
}
