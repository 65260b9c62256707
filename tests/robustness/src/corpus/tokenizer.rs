//! Damaged `tokenizer.json`: missing, not JSON, a vocabulary larger or smaller than the model's,
//! merges over tokens that do not exist, an unknown model type.

use serde_json::{json, Map, Value};

use super::{files, Corpus, Expect, Result};

const CLASS: &str = "tokenizer";
const FILE: &str = "tokenizer.json";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let src = c.embedded("tiny-llada").join(FILE);
    let base = files::read_json(&src)?;

    let dir = c.model_copy("tiny-llada", &[FILE])?;
    let args = c.generate(&dir);
    c.push("tokenizer_missing", CLASS, args, Expect::bad_file(&[FILE]));
    raw(c, "tokenizer_not_json", b"<html>404 Not Found</html>", Expect::bad_file(&[FILE]))?;
    raw(c, "tokenizer_empty_file", b"", Expect::bad_file(&[FILE]))?;
    raw(c, "tokenizer_json_null", b"null", Expect::bad_file(&[FILE]))?;

    // 104 tokens more than the model's 4096 rows: ids the embedding cannot look up.
    let mut j = base.clone();
    if let Some(Value::Object(vocab)) = model_mut(&mut j).and_then(|m| m.get_mut("vocab")) {
        for i in 0..104u32 {
            vocab.insert(format!("extra_token_{i}"), json!(4096 + i));
        }
    }
    edited(c, "tokenizer_vocab_larger_than_model", &j, Expect::bad_file(&[FILE, "vocab"]))?;

    // 96 ids fewer than the model's rows: checkpoints pad their embedding beyond the tokenizer
    // (LLaDA-8B, Qwen), so this is a sound model.
    let mut j = base.clone();
    drop_top_ids(&mut j, 4000);
    edited(c, "tokenizer_vocab_smaller_than_model", &j, Expect::ok())?;

    // Merges whose parts are not in the vocabulary.
    let mut j = base.clone();
    if let Some(Value::Array(merges)) = model_mut(&mut j).and_then(|m| m.get_mut("merges")) {
        merges.insert(0, json!("zzqx_absent qqxz_absent"));
    }
    edited(c, "tokenizer_merge_of_unknown_tokens", &j, Expect::bad_file(&[FILE, "merge"]))?;

    let mut j = base.clone();
    if let Some(m) = model_mut(&mut j) {
        m.insert("merges".into(), json!(42));
    }
    edited(c, "tokenizer_merges_not_list", &j, Expect::bad_file(&[FILE, "merges"]))?;

    let mut j = base.clone();
    if let Some(m) = model_mut(&mut j) {
        m.insert("type".into(), json!("SentencePieceUnknown"));
    }
    edited(c, "tokenizer_unknown_model_type", &j, Expect::bad_file(&[FILE]))?;

    let mut j = base.clone();
    j.remove("model");
    edited(c, "tokenizer_without_model", &j, Expect::bad_file(&[FILE, "model"]))?;

    // An unknown-token that is not in the vocabulary: loads, then fails on the first character
    // the vocabulary lacks.
    let mut j = base.clone();
    if let Some(m) = model_mut(&mut j) {
        m.insert("unk_token".into(), json!("<unk_not_in_vocab>"));
    }
    edited(c, "tokenizer_unk_token_not_in_vocab", &j, Expect::bad_file(&[FILE, "unk"]))?;

    // Two tokens with the same id.
    let mut j = base.clone();
    if let Some(Value::Object(vocab)) = model_mut(&mut j).and_then(|m| m.get_mut("vocab")) {
        vocab.insert("duplicate_of_ten".into(), json!(10));
    }
    edited(c, "tokenizer_two_tokens_one_id", &j, Expect::bad_file(&[FILE]))?;

    // A token id far beyond everything (a tokenizer that would make the vocab 2^31 long).
    let mut j = base;
    if let Some(Value::Object(vocab)) = model_mut(&mut j).and_then(|m| m.get_mut("vocab")) {
        vocab.insert("far_away".into(), json!(2_147_483_000u32));
    }
    edited(c, "tokenizer_absurd_token_id", &j, Expect::bad_file(&[FILE]))?;
    Ok(())
}

fn model_mut(j: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    j.get_mut("model").and_then(|m| m.as_object_mut())
}

/// Keeps ids below `keep` and the merges that only use kept tokens.
fn drop_top_ids(j: &mut Map<String, Value>, keep: u64) {
    let Some(m) = model_mut(j) else { return };
    let mut kept = std::collections::HashSet::new();
    if let Some(Value::Object(vocab)) = m.get_mut("vocab") {
        vocab.retain(|_, id| id.as_u64().is_some_and(|i| i < keep));
        kept.extend(vocab.keys().cloned());
    }
    if let Some(Value::Array(merges)) = m.get_mut("merges") {
        merges.retain(|merge| {
            let parts: Vec<String> = match merge {
                Value::String(s) => s.split(' ').map(str::to_owned).collect(),
                Value::Array(p) => p.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect(),
                _ => return false,
            };
            parts.len() == 2 && kept.contains(&parts[0]) && kept.contains(&parts[1]) && kept.contains(&parts.concat())
        });
    }
}

fn edited(c: &mut Corpus, name: &str, j: &Map<String, Value>, expect: Expect) -> Result<()> {
    let dir = c.model_copy("tiny-llada", &[FILE])?;
    files::write_json(&dir.join(FILE), j)?;
    let args = c.generate(&dir);
    c.push(name, CLASS, args, expect);
    Ok(())
}

fn raw(c: &mut Corpus, name: &str, text: &[u8], expect: Expect) -> Result<()> {
    let dir = c.model_copy("tiny-llada", &[FILE])?;
    files::write(&dir.join(FILE), text)?;
    let args = c.generate(&dir);
    c.push(name, CLASS, args, expect);
    Ok(())
}
