//! Damaged `model.safetensors` headers and data of the tiny LLaDA model: length prefix, JSON,
//! dtypes, shapes, offsets, overlaps, duplicates, truncation.

use serde_json::{json, Value};

use super::files::{self, Safetensors};
use super::{Corpus, Expect, Result};

const CLASS: &str = "safetensors";
const FILE: &str = "model.safetensors";
/// The tensors the damage goes into (BF16 [192, 192] and its neighbour in the data section).
const Q: &str = "model.transformer.blocks.0.q_proj.weight";
const K: &str = "model.transformer.blocks.0.k_proj.weight";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let src_path = c.embedded("tiny-llada").join(FILE);
    let base = Safetensors::read(&src_path)?;
    let q = base.entry(Q).ok_or_else(|| files::source_err(&src_path, format!("no tensor {Q}")))?;
    let k = base.entry(K).ok_or_else(|| files::source_err(&src_path, format!("no tensor {K}")))?;
    let bytes = base.to_bytes();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());

    // Length prefix larger than the file, and absurdly large.
    let mut b = bytes.clone();
    b[..8].copy_from_slice(&(bytes.len() as u64 + 1000).to_le_bytes());
    case(c, "safetensors_header_length_past_end", &b, Expect::bad_file(&[FILE, "header"]))?;
    let mut b = bytes.clone();
    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    case(c, "safetensors_header_length_u64_max", &b, Expect::bad_file(&[FILE, "header"]))?;

    // A header that is not JSON, or JSON but not an object.
    let mut b = bytes.clone();
    let end = 8 + header_len as usize;
    for (i, x) in b[8..end].iter_mut().enumerate() {
        *x = b"#not json!"[i % 10];
    }
    case(c, "safetensors_header_not_json", &b, Expect::bad_file(&[FILE, "json"]))?;
    let b = Safetensors::to_bytes_with_header(b"[1, 2, 3]", &base.data);
    case(c, "safetensors_header_json_array", &b, Expect::bad_file(&[FILE, "header"]))?;
    // A header holding a NUL byte and invalid UTF-8 inside a tensor name.
    let text = serde_json::to_vec(&Value::Object(base.header.clone())).unwrap_or_default();
    let mut evil = text.clone();
    if let Some(pos) = find(&evil, Q.as_bytes()) {
        evil[pos + 6] = 0xff;
    }
    case(
        c,
        "safetensors_header_invalid_utf8",
        &Safetensors::to_bytes_with_header(&evil, &base.data),
        Expect::bad_file(&[FILE]),
    )?;

    // Entry damage, one field at a time.
    let with = |f: &dyn Fn(&mut Safetensors)| {
        let mut s = Safetensors { header: base.header.clone(), data: base.data.clone() };
        f(&mut s);
        s.to_bytes()
    };
    let b = with(&|s| s.set_field(Q, "dtype", json!("F8_E9M9")));
    case(c, "safetensors_unknown_dtype", &b, Expect::bad_file(&[FILE, "q_proj", "F8_E9M9"]))?;
    let b = with(&|s| s.set_field(Q, "dtype", json!(7)));
    case(c, "safetensors_dtype_not_string", &b, Expect::bad_file(&[FILE, "q_proj", "dtype"]))?;
    let b = with(&|s| {
        if let Some(Value::Object(e)) = s.header.get_mut(Q) {
            e.remove("dtype");
        }
    });
    case(c, "safetensors_dtype_missing", &b, Expect::bad_file(&[FILE, "q_proj", "dtype"]))?;
    let b = with(&|s| s.set_field(Q, "shape", json!([192, 193])));
    case(c, "safetensors_shape_bytes_mismatch", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "shape", json!([1u64 << 40, 1u64 << 40])));
    case(c, "safetensors_shape_overflows", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "shape", json!([-192, 192])));
    case(c, "safetensors_shape_negative", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "shape", json!("192x192")));
    case(c, "safetensors_shape_not_array", &b, Expect::bad_file(&[FILE, "q_proj", "shape"]))?;
    // Same byte count, shape the config does not allow.
    let b = with(&|s| s.set_field(Q, "shape", json!([96, 384])));
    case(c, "safetensors_shape_wrong_for_config", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let data_len = base.data.len();
    let b = with(&|s| s.set_field(Q, "data_offsets", json!([data_len - 10, data_len + q.end - q.begin - 10])));
    case(c, "safetensors_offsets_past_end", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "data_offsets", json!([q.end, q.begin])));
    case(c, "safetensors_offsets_reversed", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "data_offsets", json!([u64::MAX - 8, u64::MAX])));
    case(c, "safetensors_offsets_u64_max", &b, Expect::bad_file(&[FILE, "q_proj"]))?;
    let b = with(&|s| s.set_field(Q, "data_offsets", json!([q.begin])));
    case(c, "safetensors_offsets_one_number", &b, Expect::bad_file(&[FILE, "q_proj", "data_offsets"]))?;
    // Two tensors reading the same bytes: k_proj points at q_proj's data.
    let b = with(&|s| s.set_field(K, "data_offsets", json!([q.begin, q.end])));
    case(c, "safetensors_overlapping_tensors", &b, Expect::bad_file(&[FILE, "overlap"]))?;
    // Partial overlap: k_proj starts half-way into q_proj.
    let half = (q.end - q.begin) / 2;
    let b = with(&|s| s.set_field(K, "data_offsets", json!([q.begin + half, q.begin + half + (k.end - k.begin)])));
    case(c, "safetensors_partially_overlapping_tensors", &b, Expect::bad_file(&[FILE, "overlap"]))?;

    // A tensor named twice (serde_json keeps the last of duplicate keys, so write the text).
    let dup_entry = format!(r#""{Q}":{{"dtype":"BF16","shape":[192,192],"data_offsets":[{},{}]}},"#, k.begin, k.end);
    let mut dup = b"{".to_vec();
    dup.extend_from_slice(dup_entry.as_bytes());
    dup.extend_from_slice(&text[1..]);
    case(
        c,
        "safetensors_duplicate_tensor_name",
        &Safetensors::to_bytes_with_header(&dup, &base.data),
        Expect::bad_file(&[FILE, "q_proj"]),
    )?;

    // Required tensor absent.
    let b = with(&|s| {
        s.header.remove("model.transformer.blocks.3.v_proj.weight");
    });
    case(c, "safetensors_missing_tensor", &b, Expect::bad_file(&[FILE, "blocks.3.v_proj.weight"]))?;

    // Truncated data, truncated header, empty file.
    case(c, "safetensors_truncated_data", &bytes[..bytes.len() / 2], Expect::bad_file(&[FILE, "truncated"]))?;
    case(c, "safetensors_truncated_header", &bytes[..8 + header_len as usize / 2], Expect::bad_file(&[FILE]))?;
    case(c, "safetensors_empty_file", b"", Expect::bad_file(&[FILE]))?;
    case(c, "safetensors_four_bytes", b"\x10\0\0\0", Expect::bad_file(&[FILE]))?;
    Ok(())
}

/// Writes a tiny-llada copy whose weights file is `bytes` and adds its generate case.
fn case(c: &mut Corpus, name: &str, bytes: &[u8], expect: Expect) -> Result<()> {
    let dir = c.model_copy("tiny-llada", &[FILE])?;
    files::write(&dir.join(FILE), bytes)?;
    let args = c.generate(&dir);
    c.push(name, CLASS, args, expect);
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
