//! Damaged `config.json` (LLaDA keys and HF keys) and `generation_config.json`: zero, absurd,
//! negative and wrongly typed sizes, inconsistent head counts, special ids outside the vocab,
//! a diffusion model without a mask id, files that are not JSON.

use serde_json::{json, Map, Value};

use super::{files, Corpus, Expect, Result};

const LLADA: &str = "config-llada";
const HF: &str = "config-hf";
const GEN: &str = "generation-config";
const CFG: &str = "config.json";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    llada(c)?;
    hf(c)?;
    moe(c)?;
    generation(c)
}

/// The LLaDA scheme (d_model, n_heads, n_layers, ...) of tiny-llada.
fn llada(c: &mut Corpus) -> Result<()> {
    let m = "tiny-llada";
    set(c, m, LLADA, "config_llada_zero_heads", &[("n_heads", json!(0))], Expect::bad_file(&[CFG, "n_heads"]))?;
    set(
        c,
        m,
        LLADA,
        "config_llada_zero_heads_and_kv_heads",
        &[("n_heads", json!(0)), ("n_kv_heads", json!(0))],
        Expect::bad_file(&[CFG, "n_heads"]),
    )?;
    set(c, m, LLADA, "config_llada_zero_layers", &[("n_layers", json!(0))], Expect::bad_file(&[CFG, "n_layers"]))?;
    set(
        c,
        m,
        LLADA,
        "config_llada_absurd_layers",
        &[("n_layers", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "n_layers"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_absurd_max_sequence_length",
        &[("max_sequence_length", json!(1_000_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "max_sequence_length"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_u64_max_sequence_length",
        &[("max_sequence_length", json!(u64::MAX))],
        Expect::bad_file(&[CFG, "max_sequence_length"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_absurd_mlp_hidden_size",
        &[("mlp_hidden_size", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "mlp_hidden_size"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_absurd_vocab",
        &[("vocab_size", json!(1_000_000_000_000u64)), ("embedding_size", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_negative_d_model",
        &[("d_model", json!(-192))],
        Expect::bad_file(&[CFG, "d_model"]),
    )?;
    set(c, m, LLADA, "config_llada_float_d_model", &[("d_model", json!(192.5))], Expect::bad_file(&[CFG, "d_model"]))?;
    set(
        c,
        m,
        LLADA,
        "config_llada_string_n_layers",
        &[("n_layers", json!("6"))],
        Expect::bad_file(&[CFG, "n_layers"]).excluding(&["missing"]),
    )?;
    set(c, m, LLADA, "config_llada_null_n_heads", &[("n_heads", Value::Null)], Expect::bad_file(&[CFG, "n_heads"]))?;
    set(
        c,
        m,
        LLADA,
        "config_llada_object_d_model",
        &[("d_model", json!({"value": 192}))],
        Expect::bad_file(&[CFG, "d_model"]).excluding(&["missing"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_d_model_not_divisible_by_heads",
        &[("d_model", json!(190))],
        Expect::bad_file(&[CFG, "d_model", "n_heads"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_heads_not_divisible_by_kv_heads",
        &[("n_kv_heads", json!(3))],
        Expect::bad_file(&[CFG, "n_kv_heads"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_mask_id_outside_vocab",
        &[("mask_token_id", json!(5000))],
        Expect::bad_file(&[CFG, "mask_token_id"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_mask_id_negative",
        &[("mask_token_id", json!(-1))],
        Expect::bad_file(&[CFG, "mask_token_id"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_eos_id_outside_vocab",
        &[("eos_token_id", json!(99_999))],
        Expect::bad_file(&[CFG, "eos_token_id"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_eot_id_outside_vocab",
        &[("eot_token_id", json!(4_096))],
        Expect::bad_file(&[CFG, "eot_token_id"]),
    )?;
    set(
        c,
        m,
        LLADA,
        "config_llada_vocab_not_matching_weights",
        &[("vocab_size", json!(5000)), ("embedding_size", json!(5000))],
        Expect::bad_file(&["wte"]),
    )?;
    // A diffusion model must say which id is the mask: the 8B model's default is no guess for
    // another vocabulary.
    edit(
        c,
        m,
        LLADA,
        "config_llada_missing_mask_id",
        |j| {
            j.remove("mask_token_id");
        },
        Expect::bad_file(&[CFG, "mask_token_id"]),
    )?;
    edit(
        c,
        m,
        LLADA,
        "config_llada_missing_d_model",
        |j| {
            j.remove("d_model");
        },
        Expect::bad_file(&[CFG, "d_model"]),
    )?;
    edit(
        c,
        m,
        LLADA,
        "config_llada_unknown_architecture",
        |j| {
            j.insert("architectures".into(), json!(["GPT2LMHeadModel"]));
            j.insert("model_type".into(), json!("gpt2"));
        },
        Expect::bad_file(&[CFG, "GPT2LMHeadModel"]),
    )?;
    raw(c, m, LLADA, "config_llada_invalid_json", b"{\"d_model\": 192, \"n_heads\": ", Expect::bad_file(&[CFG]))?;
    raw(c, m, LLADA, "config_llada_empty_file", b"", Expect::bad_file(&[CFG]))?;
    raw(c, m, LLADA, "config_llada_json_array", b"[192, 4, 6]", Expect::bad_file(&[CFG]))?;
    raw(c, m, LLADA, "config_llada_nul_bytes", b"{\"d_model\": 192\0\0\0}", Expect::bad_file(&[CFG]))?;
    let dir = c.model_copy(m, &[CFG])?;
    let args = c.generate(&dir);
    c.push("config_llada_missing_file", LLADA, args, Expect::bad_file(&[CFG]));
    Ok(())
}

/// HF keys (hidden_size, num_attention_heads, ...) of tiny-ar (Llama).
fn hf(c: &mut Corpus) -> Result<()> {
    let m = "tiny-ar";
    edit(
        c,
        m,
        HF,
        "config_hf_zero_heads",
        |j| {
            // Without head_dim the head size is derived by dividing by the head count.
            j.remove("head_dim");
            j.insert("num_attention_heads".into(), json!(0));
        },
        Expect::bad_file(&[CFG, "num_attention_heads"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_zero_heads_with_head_dim",
        &[("num_attention_heads", json!(0))],
        Expect::bad_file(&[CFG, "num_attention_heads"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_zero_kv_heads",
        &[("num_key_value_heads", json!(0))],
        Expect::bad_file(&[CFG, "num_key_value_heads"]),
    )?;
    set(c, m, HF, "config_hf_zero_head_dim", &[("head_dim", json!(0))], Expect::bad_file(&[CFG, "head_dim"]))?;
    set(
        c,
        m,
        HF,
        "config_hf_absurd_layers",
        &[("num_hidden_layers", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "num_hidden_layers"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_absurd_max_position_embeddings",
        &[("max_position_embeddings", json!(1_000_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "max_position_embeddings"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_absurd_head_dim",
        &[("head_dim", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "head_dim"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_negative_hidden_size",
        &[("hidden_size", json!(-1))],
        Expect::bad_file(&[CFG, "hidden_size"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_float_intermediate_size",
        &[("intermediate_size", json!(576.5))],
        Expect::bad_file(&[CFG, "intermediate_size"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_string_layers",
        &[("num_hidden_layers", json!("six"))],
        Expect::bad_file(&[CFG, "num_hidden_layers"]).excluding(&["missing"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_bool_vocab_size",
        &[("vocab_size", json!(true))],
        Expect::bad_file(&[CFG, "vocab_size"]).excluding(&["missing"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_string_rms_norm_eps",
        &[("rms_norm_eps", json!("1e-5"))],
        Expect::bad_file(&[CFG, "rms_norm_eps"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_negative_rope_theta",
        &[("rope_theta", json!(-10000.0))],
        Expect::bad_file(&[CFG, "rope_theta"]),
    )?;
    edit(
        c,
        m,
        HF,
        "config_hf_hidden_not_divisible_by_heads",
        |j| {
            j.remove("head_dim");
            j.insert("num_attention_heads".into(), json!(5));
            j.insert("num_key_value_heads".into(), json!(5));
        },
        Expect::bad_file(&[CFG, "hidden_size", "num_attention_heads"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_heads_not_divisible_by_kv_heads",
        &[("num_key_value_heads", json!(3))],
        Expect::bad_file(&[CFG, "num_key_value_heads"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_bos_id_outside_vocab",
        &[("bos_token_id", json!(70_000))],
        Expect::bad_file(&[CFG, "bos_token_id"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_hf_eos_id_u32_max",
        &[("eos_token_id", json!(u32::MAX))],
        Expect::bad_file(&[CFG, "eos_token_id"]),
    )?;
    edit(
        c,
        m,
        HF,
        "config_hf_missing_hidden_size",
        |j| {
            j.remove("hidden_size");
        },
        Expect::bad_file(&[CFG, "hidden_size"]),
    )?;
    raw(c, m, HF, "config_hf_invalid_json", b"{\"hidden_size\": 192,,}", Expect::bad_file(&[CFG]))?;
    raw(c, m, HF, "config_hf_empty_file", b"", Expect::bad_file(&[CFG]))?;
    Ok(())
}

/// HF-style diffusion MoE model (tiny-llada-moe): mask id and expert counts.
fn moe(c: &mut Corpus) -> Result<()> {
    let m = "tiny-llada-moe";
    edit(
        c,
        m,
        HF,
        "config_moe_missing_mask_id",
        |j| {
            j.remove("mask_token_id");
        },
        Expect::bad_file(&[CFG, "mask_token_id"]),
    )?;
    set(c, m, HF, "config_moe_zero_experts", &[("num_experts", json!(0))], Expect::bad_file(&[CFG, "num_experts"]))?;
    set(
        c,
        m,
        HF,
        "config_moe_absurd_experts",
        &[("num_experts", json!(1_000_000_000_000u64))],
        Expect::bad_file(&[CFG, "num_experts"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_moe_top_k_above_experts",
        &[("num_experts_per_tok", json!(9))],
        Expect::bad_file(&[CFG, "num_experts_per_tok"]),
    )?;
    set(
        c,
        m,
        HF,
        "config_moe_zero_top_k",
        &[("num_experts_per_tok", json!(0))],
        Expect::bad_file(&[CFG, "num_experts_per_tok"]),
    )?;
    Ok(())
}

/// `generation_config.json`: the defaults a run falls back to.
fn generation(c: &mut Corpus) -> Result<()> {
    const FILE: &str = "generation_config.json";
    let bad = |c: &mut Corpus, name: &str, text: &[u8], expect: Expect| -> Result<()> {
        let dir = c.model_copy("tiny-llada", &[FILE])?;
        files::write(&dir.join(FILE), text)?;
        // No decode flags: the defaults file is what the run uses.
        let args = c.generate_with(&dir, &[], &["hello there"]);
        c.push(name, GEN, args, expect);
        Ok(())
    };
    bad(c, "generation_config_invalid_json", b"{\"gen_length\": ", Expect::bad_file(&[FILE]))?;
    bad(
        c,
        "generation_config_string_steps",
        br#"{"gen_length": 16, "steps": "many"}"#,
        Expect::bad_file(&[FILE, "steps"]),
    )?;
    bad(
        c,
        "generation_config_negative_gen_length",
        br#"{"gen_length": -16}"#,
        Expect::bad_file(&[FILE, "gen_length"]),
    )?;
    Ok(())
}

/// A copy of `model` with `pairs` set in its config.json.
fn set(
    c: &mut Corpus,
    model: &str,
    class: &'static str,
    name: &str,
    pairs: &[(&str, Value)],
    expect: Expect,
) -> Result<()> {
    edit(
        c,
        model,
        class,
        name,
        |j| {
            for (k, v) in pairs {
                j.insert((*k).to_owned(), v.clone());
            }
        },
        expect,
    )
}

/// A copy of `model` with its config.json edited by `f`.
fn edit(
    c: &mut Corpus,
    model: &str,
    class: &'static str,
    name: &str,
    f: impl FnOnce(&mut Map<String, Value>),
    expect: Expect,
) -> Result<()> {
    let mut j = files::read_json(&c.embedded(model).join(CFG))?;
    f(&mut j);
    let dir = c.model_copy(model, &[CFG])?;
    files::write_json(&dir.join(CFG), &j)?;
    let args = c.generate(&dir);
    c.push(name, class, args, expect);
    Ok(())
}

/// A copy of `model` whose config.json is `text`.
fn raw(c: &mut Corpus, model: &str, class: &'static str, name: &str, text: &[u8], expect: Expect) -> Result<()> {
    let dir = c.model_copy(model, &[CFG])?;
    files::write(&dir.join(CFG), text)?;
    let args = c.generate(&dir);
    c.push(name, class, args, expect);
    Ok(())
}
