//! Damaged GGUF files made from the tiny LLaDA model exported with the engine's own writer:
//! header fields (magic, version, counts), metadata (absurd sizes, wrong types, missing mask id,
//! alignment, a tokenizer that does not match the vocab) and the tensor table (data outside the
//! file, unknown types, absurd dimensions), plus non-finite weights.

use std::path::{Path, PathBuf};

use unmask_engine::model::gguf::{self as g, GgufFile, GgufValue, GgufWriter, ValueType};
use unmask_engine::tensor::DType;
use unmask_engine::tensor::TensorSource;

use super::files;
use super::{Corpus, Expect, Result};

const CLASS: &str = "gguf";
const ARCH: &str = "llada";
const NORM: &str = "blk.0.attn_norm.weight";

/// A GGUF file taken apart: metadata in file order and every tensor's encoded bytes.
#[derive(Clone)]
struct Parts {
    kvs: Vec<(String, GgufValue)>,
    tensors: Vec<(String, DType, Vec<usize>, Vec<u8>)>,
}

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let root = c.path("gguf");
    files::create_dir(&root)?;
    let base_path = root.join("base.gguf");
    g::export_gguf(&c.embedded("tiny-llada"), &base_path, DType::Q8_0)?;
    let base = files::read(&base_path)?;
    let parts = take_apart(&base_path)?;
    let layout = Layout::of(&base).ok_or_else(|| files::source_err(&base_path, "exported GGUF does not parse"))?;

    // Controls: the export itself, and the same file rebuilt from its parts.
    let args = c.generate(&base_path);
    c.push("gguf_sound_export", CLASS, args, Expect::ok());
    rebuilt(c, "gguf_sound_rebuilt", &parts, |_| {}, Expect::ok())?;

    // Fixed header fields: magic (0), version (4), tensor count (8), metadata count (16).
    let patch = |at: usize, v: &[u8]| {
        let mut b = base.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    bytes_case(
        c,
        "gguf_bad_magic",
        "bad-magic.gguf",
        &patch(0, b"GGUX"),
        Expect::bad_file(&["bad-magic.gguf", "magic"]),
    )?;
    bytes_case(
        c,
        "gguf_version_1",
        "v1.gguf",
        &patch(4, &1u32.to_le_bytes()),
        Expect::bad_file(&["v1.gguf", "version"]),
    )?;
    bytes_case(
        c,
        "gguf_version_4",
        "v4.gguf",
        &patch(4, &4u32.to_le_bytes()),
        Expect::bad_file(&["v4.gguf", "version"]),
    )?;
    bytes_case(
        c,
        "gguf_absurd_tensor_count",
        "tcount.gguf",
        &patch(8, &(1u64 << 40).to_le_bytes()),
        Expect::bad_file(&["tcount.gguf", "tensor count"]),
    )?;
    bytes_case(
        c,
        "gguf_tensor_count_u64_max",
        "tcount-max.gguf",
        &patch(8, &u64::MAX.to_le_bytes()),
        Expect::bad_file(&["tcount-max.gguf", "tensor count"]),
    )?;
    bytes_case(
        c,
        "gguf_absurd_metadata_count",
        "kvcount.gguf",
        &patch(16, &(1u64 << 40).to_le_bytes()),
        Expect::bad_file(&["kvcount.gguf", "metadata count"]),
    )?;
    bytes_case(c, "gguf_header_only", "header-only.gguf", &base[..24], Expect::bad_file(&["header-only.gguf"]))?;
    bytes_case(
        c,
        "gguf_truncated_metadata",
        "cut-meta.gguf",
        &base[..layout.kvs[layout.kvs.len() / 2].value_at + 3],
        Expect::bad_file(&["cut-meta.gguf"]),
    )?;
    bytes_case(
        c,
        "gguf_truncated_data",
        "cut-data.gguf",
        &base[..base.len() - 1000],
        Expect::bad_file(&["cut-data.gguf"]),
    )?;

    // Lengths inside the metadata: a key string and the token array claiming absurd sizes.
    let first_key_len = layout.kvs.first().map(|k| k.key_at).unwrap_or(24);
    bytes_case(
        c,
        "gguf_absurd_key_length",
        "keylen.gguf",
        &patch(first_key_len, &(u64::MAX / 2).to_le_bytes()),
        Expect::bad_file(&["keylen.gguf"]),
    )?;
    if let Some(tokens) = layout.kvs.iter().find(|k| k.key == "tokenizer.ggml.tokens") {
        // An array value is its element type (4 bytes) then its length (8 bytes).
        let b = patch(tokens.value_at + 4, &(1u64 << 50).to_le_bytes());
        bytes_case(
            c,
            "gguf_absurd_array_length",
            "arraylen.gguf",
            &b,
            Expect::bad_file(&["arraylen.gguf", "tokenizer.ggml.tokens"]),
        )?;
    }
    if let Some(kv) = layout.kvs.iter().find(|k| k.key == format!("{ARCH}.block_count")) {
        let b = patch(kv.type_at, &99u32.to_le_bytes());
        bytes_case(
            c,
            "gguf_unknown_value_type",
            "valtype.gguf",
            &b,
            Expect::bad_file(&["valtype.gguf", "llada.block_count"]),
        )?;
    }

    // The tensor table.
    let norm = layout
        .tensors
        .iter()
        .find(|t| t.name == NORM)
        .ok_or_else(|| files::source_err(&base_path, format!("no {NORM}")))?;
    let last = layout.tensors.last().ok_or_else(|| files::source_err(&base_path, "no tensors"))?;
    let b = patch(last.offset_at, &((base.len() as u64) * 4).div_ceil(32).wrapping_mul(32).to_le_bytes());
    bytes_case(
        c,
        "gguf_tensor_data_outside_file",
        "outside.gguf",
        &b,
        Expect::bad_file(&["outside.gguf", &last.name]),
    )?;
    let b = patch(last.offset_at, &(u64::MAX - 31).to_le_bytes());
    bytes_case(
        c,
        "gguf_tensor_offset_u64_max",
        "offset-max.gguf",
        &b,
        Expect::bad_file(&["offset-max.gguf", &last.name]),
    )?;
    let b = patch(norm.type_at, &99u32.to_le_bytes());
    bytes_case(c, "gguf_unknown_tensor_type", "ttype.gguf", &b, Expect::bad_file(&["ttype.gguf", NORM]))?;
    let b = patch(norm.ndims_at, &1000u32.to_le_bytes());
    bytes_case(c, "gguf_absurd_tensor_dims", "ndims.gguf", &b, Expect::bad_file(&["ndims.gguf", NORM]))?;
    let b = patch(norm.ndims_at + 4, &(1u64 << 62).to_le_bytes());
    bytes_case(c, "gguf_absurd_tensor_shape", "shape.gguf", &b, Expect::bad_file(&["shape.gguf", NORM]))?;
    // Two tensors at the same offset.
    if let Some(second) = layout.tensors.get(1) {
        let first_offset = layout.tensors[0].offset;
        let b = patch(second.offset_at, &first_offset.to_le_bytes());
        bytes_case(c, "gguf_overlapping_tensors", "overlap.gguf", &b, Expect::bad_file(&["overlap.gguf", "overlap"]))?;
    }

    // Metadata values, rebuilt through the writer.
    let key = |k: &str| format!("{ARCH}.{k}");
    rebuilt(
        c,
        "gguf_absurd_context_length",
        &parts,
        |p| set(p, &key("context_length"), GgufValue::U64(1_000_000_000_000_000)),
        Expect::bad_file(&["llada.context_length"]),
    )?;
    rebuilt(
        c,
        "gguf_absurd_block_count",
        &parts,
        |p| set(p, &key("block_count"), GgufValue::U64(1_000_000_000_000)),
        Expect::bad_file(&["llada.block_count"]),
    )?;
    rebuilt(
        c,
        "gguf_absurd_embedding_length",
        &parts,
        |p| set(p, &key("embedding_length"), GgufValue::U64(1 << 40)),
        Expect::bad_file(&["llada.embedding_length"]),
    )?;
    rebuilt(
        c,
        "gguf_absurd_feed_forward_length",
        &parts,
        |p| set(p, &key("feed_forward_length"), GgufValue::U64(1 << 40)),
        Expect::bad_file(&["llada.feed_forward_length"]),
    )?;
    rebuilt(
        c,
        "gguf_zero_head_count",
        &parts,
        |p| set(p, &key("attention.head_count"), GgufValue::U32(0)),
        Expect::bad_file(&["llada.attention.head_count"]),
    )?;
    rebuilt(
        c,
        "gguf_zero_kv_head_count",
        &parts,
        |p| set(p, &key("attention.head_count_kv"), GgufValue::U32(0)),
        Expect::bad_file(&["llada.attention.head_count_kv"]),
    )?;
    rebuilt(
        c,
        "gguf_negative_block_count",
        &parts,
        |p| set(p, &key("block_count"), GgufValue::I32(-6)),
        Expect::bad_file(&["llada.block_count"]),
    )?;
    rebuilt(
        c,
        "gguf_string_block_count",
        &parts,
        |p| set(p, &key("block_count"), GgufValue::String("six".into())),
        Expect::bad_file(&["llada.block_count"]).excluding(&["missing"]),
    )?;
    rebuilt(
        c,
        "gguf_missing_block_count",
        &parts,
        |p| remove(p, &key("block_count")),
        Expect::bad_file(&["llada.block_count"]),
    )?;
    rebuilt(
        c,
        "gguf_unknown_architecture",
        &parts,
        |p| set(p, "general.architecture", GgufValue::String("gpt2".into())),
        Expect::bad_file(&["gpt2"]),
    )?;
    rebuilt(
        c,
        "gguf_alignment_not_power_of_two",
        &parts,
        |p| set(p, "general.alignment", GgufValue::U32(3)),
        Expect::bad_file(&["general.alignment"]),
    )?;
    rebuilt(
        c,
        "gguf_alignment_zero",
        &parts,
        |p| set(p, "general.alignment", GgufValue::U32(0)),
        Expect::bad_file(&["general.alignment"]),
    )?;
    // A valid alignment the writer's 32-byte layout does not follow: offsets are misaligned.
    rebuilt(
        c,
        "gguf_alignment_not_followed",
        &parts,
        |p| set(p, "general.alignment", GgufValue::U32(4096)),
        Expect::bad_file(&["align"]),
    )?;
    rebuilt(
        c,
        "gguf_missing_mask_token_id",
        &parts,
        |p| remove(p, "tokenizer.ggml.mask_token_id"),
        Expect::bad_file(&["mask_token_id"]),
    )?;
    rebuilt(
        c,
        "gguf_mask_token_id_outside_vocab",
        &parts,
        |p| set(p, "tokenizer.ggml.mask_token_id", GgufValue::U32(100_000)),
        Expect::bad_file(&["mask_token_id"]),
    )?;
    rebuilt(
        c,
        "gguf_tokenizer_vocab_larger",
        &parts,
        |p| resize_vocab(p, 4196),
        Expect::bad_file(&["tokenizer.ggml.tokens"]),
    )?;
    rebuilt(
        c,
        "gguf_tokenizer_vocab_smaller",
        &parts,
        |p| resize_vocab(p, 3996),
        Expect::bad_file(&["tokenizer.ggml.tokens"]),
    )?;
    rebuilt(
        c,
        "gguf_tokens_not_strings",
        &parts,
        |p| set(p, "tokenizer.ggml.tokens", GgufValue::Array(ValueType::U32, (0..4096).map(GgufValue::U32).collect())),
        Expect::bad_file(&["tokenizer.ggml.tokens"]).excluding(&["missing", "no `tokenizer.ggml.tokens`"]),
    )?;
    rebuilt(
        c,
        "gguf_missing_tokens",
        &parts,
        |p| remove(p, "tokenizer.ggml.tokens"),
        Expect::bad_file(&["tokenizer.ggml.tokens"]),
    )?;
    rebuilt(
        c,
        "gguf_missing_tensor",
        &parts,
        |p| p.tensors.retain(|t| t.0 != "blk.3.attn_v.weight"),
        Expect::bad_file(&["blk.3.attn_v.weight"]),
    )?;

    // Non-finite weights in an F32 norm vector (1-D tensors stay F32 in the export).
    for (name, bits) in [("gguf_nan_in_norm", f32::NAN), ("gguf_inf_in_norm", f32::INFINITY)] {
        rebuilt(
            c,
            name,
            &parts,
            |p| {
                if let Some(t) = p.tensors.iter_mut().find(|t| t.0 == NORM && t.1 == DType::F32) {
                    t.3[40..44].copy_from_slice(&bits.to_le_bytes());
                }
            },
            Expect::bad_file(&[NORM]),
        )?;
    }
    Ok(())
}

/// Reads a GGUF into its metadata and tensor bytes.
fn take_apart(path: &Path) -> Result<Parts> {
    let file = GgufFile::open(path)?;
    let kvs = file.metadata().entries().to_vec();
    let mut tensors = Vec::new();
    for info in file.tensor_infos() {
        let dtype =
            g::dtype_of(info.ggml_type).ok_or_else(|| files::source_err(path, format!("{}: no dtype", info.name)))?;
        let raw = file.get(&info.name)?;
        let shape: Vec<usize> = info.ne.iter().rev().map(|&d| d as usize).collect();
        tensors.push((info.name.clone(), dtype, shape, raw.data.as_slice().to_vec()));
    }
    Ok(Parts { kvs, tensors })
}

fn set(p: &mut Parts, key: &str, v: GgufValue) {
    match p.kvs.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = v,
        None => p.kvs.push((key.to_owned(), v)),
    }
}

fn remove(p: &mut Parts, key: &str) {
    p.kvs.retain(|(k, _)| k != key);
}

/// Makes the embedded vocabulary `n` tokens long (token types follow, merges over dropped tokens
/// go), leaving the model at 4096.
fn resize_vocab(p: &mut Parts, n: usize) {
    let mut kept = std::collections::HashSet::new();
    if let Some((_, GgufValue::Array(_, items))) = p.kvs.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        kept.extend(items.iter().take(n).filter_map(|t| t.as_str().map(str::to_owned)));
    }
    for (k, v) in &mut p.kvs {
        if k == "tokenizer.ggml.merges" {
            if let GgufValue::Array(_, merges) = v {
                merges.retain(|m| {
                    let Some((a, b)) = m.as_str().and_then(|m| m.split_once(' ')) else { return false };
                    kept.contains(a) && kept.contains(b) && kept.contains(&format!("{a}{b}"))
                });
            }
            continue;
        }
        let GgufValue::Array(t, items) = v else { continue };
        if k == "tokenizer.ggml.tokens" {
            let len = items.len();
            items.resize_with(n, || GgufValue::String(String::new()));
            for (i, item) in items.iter_mut().enumerate().skip(len) {
                *item = GgufValue::String(format!("[EXTRA{i}]"));
            }
        } else if k == "tokenizer.ggml.token_type" && *t == ValueType::I32 {
            items.resize(n, GgufValue::I32(5));
        }
    }
}

/// A GGUF rebuilt from `parts` after `f` changed them.
fn rebuilt(c: &mut Corpus, name: &str, parts: &Parts, f: impl FnOnce(&mut Parts), expect: Expect) -> Result<()> {
    let mut p = parts.clone();
    f(&mut p);
    let mut w = GgufWriter::new();
    for (k, v) in p.kvs {
        w.add_kv(k, v);
    }
    for (n, dtype, shape, data) in p.tensors {
        w.add_raw_tensor(n, dtype, &shape, data)?;
    }
    let path = numbered(c)?;
    w.write(&path)?;
    let args = c.generate(&path);
    c.push(name, CLASS, args, expect);
    Ok(())
}

/// A GGUF file named `file` holding `bytes`.
fn bytes_case(c: &mut Corpus, name: &str, file: &str, bytes: &[u8], expect: Expect) -> Result<()> {
    let path = c.path("gguf").join(file);
    files::write(&path, bytes)?;
    let args = c.generate(&path);
    c.push(name, CLASS, args, expect);
    Ok(())
}

/// A fresh, neutrally named GGUF path (`gguf/model-NNN.gguf`).
fn numbered(c: &mut Corpus) -> Result<PathBuf> {
    c.folders += 1;
    let dir = c.path("gguf");
    files::create_dir(&dir)?;
    Ok(dir.join(format!("model-{:03}.gguf", c.folders)))
}

/// Byte positions inside a GGUF file, found by walking it (for damage at exact places).
struct Layout {
    kvs: Vec<KvAt>,
    tensors: Vec<TensorAt>,
}

struct KvAt {
    key: String,
    /// The key's length prefix.
    key_at: usize,
    type_at: usize,
    value_at: usize,
}

struct TensorAt {
    name: String,
    ndims_at: usize,
    type_at: usize,
    offset_at: usize,
    offset: u64,
}

impl Layout {
    fn of(b: &[u8]) -> Option<Layout> {
        let mut r = Walk { b, pos: 24 };
        let n_tensors = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        let n_kv = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
        let mut kvs = Vec::new();
        for _ in 0..n_kv {
            let key_at = r.pos;
            let key = r.string()?;
            let type_at = r.pos;
            let ty = r.u32()?;
            let value_at = r.pos;
            r.skip_value(ty)?;
            kvs.push(KvAt { key, key_at, type_at, value_at });
        }
        let mut tensors = Vec::new();
        for _ in 0..n_tensors {
            let name = r.string()?;
            let ndims_at = r.pos;
            let nd = r.u32()? as usize;
            r.take(nd.checked_mul(8)?)?;
            let type_at = r.pos;
            r.u32()?;
            let offset_at = r.pos;
            let offset = r.u64()?;
            tensors.push(TensorAt { name, ndims_at, type_at, offset_at, offset });
        }
        Some(Layout { kvs, tensors })
    }
}

struct Walk<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Walk<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.u64()?).ok()?;
        Some(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    /// Skips a value of GGUF type id `ty`.
    fn skip_value(&mut self, ty: u32) -> Option<()> {
        match ty {
            0 | 1 | 7 => self.take(1).map(|_| ()),
            2 | 3 => self.take(2).map(|_| ()),
            4..=6 => self.take(4).map(|_| ()),
            10..=12 => self.take(8).map(|_| ()),
            8 => self.string().map(|_| ()),
            9 => {
                let et = self.u32()?;
                let n = self.u64()?;
                for _ in 0..n {
                    self.skip_value(et)?;
                }
                Some(())
            }
            _ => None,
        }
    }
}
