//! Extreme decode settings: lengths and step counts sized to allocate without bound, zero and
//! non-finite values, thresholds outside [0, 1], absurd thread counts, speculative windows,
//! unknown devices and libraries. Values that no model can honour are requests that do not fit
//! (4); values clap cannot parse are bad command lines (2).

use super::{Corpus, Expect, Result, SHORT};

const CLASS: &str = "settings";
const U64_MAX: &str = "18446744073709551615";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let llada = c.embedded("tiny-llada");
    let ar = c.embedded("tiny-ar");
    let prompt = ["hello there"];
    let gen = |c: &mut Corpus, name: &str, settings: &[&str], expect: Expect| {
        let args = c.generate_with(&llada, settings, &prompt);
        c.push(name, CLASS, args, expect);
    };

    gen(c, "settings_gen_length_u64_max", &["--gen-length", U64_MAX], Expect::invalid(&["length"]));
    gen(c, "settings_gen_length_1e9", &["--gen-length", "1000000000"], Expect::invalid(&["length"]));
    gen(c, "settings_gen_length_zero", &["--gen-length", "0"], Expect::invalid(&["length"]));
    gen(c, "settings_gen_length_negative", &["--gen-length=-1"], Expect::usage(&["gen-length"]));
    gen(c, "settings_gen_length_not_a_number", &["--gen-length", "lots"], Expect::usage(&["gen-length"]));
    gen(c, "settings_steps_1e12", &["--gen-length", "16", "--steps", "1000000000000"], Expect::invalid(&["steps"]));
    gen(c, "settings_steps_u64_max", &["--gen-length", "16", "--steps", U64_MAX], Expect::invalid(&["steps"]));
    gen(c, "settings_steps_zero", &["--gen-length", "16", "--steps", "0"], Expect::invalid(&["steps"]));
    gen(
        c,
        "settings_block_length_zero",
        &["--gen-length", "16", "--steps", "4", "--block-length", "0"],
        Expect::invalid(&["block"]),
    );
    gen(
        c,
        "settings_block_length_u64_max",
        &["--gen-length", "16", "--steps", "4", "--block-length", U64_MAX],
        Expect::invalid(&["block"]),
    );
    gen(
        c,
        "settings_block_length_not_dividing",
        &["--gen-length", "16", "--steps", "4", "--block-length", "5"],
        Expect::invalid(&["block"]),
    );
    gen(
        c,
        "settings_temperature_nan",
        &[&SHORT[..], &["--temperature", "nan"]].concat(),
        Expect::invalid(&["temperature"]),
    );
    gen(
        c,
        "settings_temperature_inf",
        &[&SHORT[..], &["--temperature", "inf"]].concat(),
        Expect::invalid(&["temperature"]),
    );
    gen(
        c,
        "settings_temperature_negative",
        &[&SHORT[..], &["--temperature=-1"]].concat(),
        Expect::invalid(&["temperature"]),
    );
    gen(c, "settings_threshold_2", &[&SHORT[..], &["--threshold", "2"]].concat(), Expect::invalid(&["threshold"]));
    gen(c, "settings_threshold_nan", &[&SHORT[..], &["--threshold", "nan"]].concat(), Expect::invalid(&["threshold"]));
    gen(
        c,
        "settings_top_p_zero",
        &[&SHORT[..], &["--temperature", "1", "--top-p", "0"]].concat(),
        Expect::invalid(&["top"]),
    );
    gen(
        c,
        "settings_top_p_above_one",
        &[&SHORT[..], &["--temperature", "1", "--top-p", "1.5"]].concat(),
        Expect::invalid(&["top"]),
    );
    gen(c, "settings_cfg_scale_nan", &[&SHORT[..], &["--cfg-scale", "nan"]].concat(), Expect::invalid(&["cfg"]));
    gen(
        c,
        "settings_eos_id_outside_vocab",
        &[&SHORT[..], &["--eos-token-id", "4294967295"]].concat(),
        Expect::invalid(&["eos"]),
    );
    gen(c, "settings_seed_u64_max", &[&SHORT[..], &["--seed", U64_MAX]].concat(), Expect::ok());
    // A million worker threads is a bad command-line value, not something to try.
    gen(c, "settings_threads_1e6", &[&SHORT[..], &["--threads", "1000000"]].concat(), Expect::usage(&["threads"]));
    gen(
        c,
        "settings_spec_lookahead_u64_max",
        &[&SHORT[..], &["--speculative", "--spec-lookahead", U64_MAX]].concat(),
        Expect::invalid(&["lookahead"]),
    );
    gen(
        c,
        "settings_spec_lookahead_1e12",
        &[&SHORT[..], &["--speculative", "--spec-lookahead", "1000000000000"]].concat(),
        Expect::invalid(&["lookahead"]),
    );
    // Speculative windows need more than one block to look into.
    let spec = ["--gen-length", "64", "--block-length", "32", "--steps", "8", "--speculative"];
    gen(c, "settings_speculative_sound", &spec, Expect::ok());
    gen(c, "settings_spec_bucket_zero", &[&spec[..], &["--spec-buckets", "0"]].concat(), Expect::invalid(&["bucket"]));
    gen(
        c,
        "settings_revision_threshold_nan",
        &[&SHORT[..], &["--revision", "--revision-visible-threshold", "nan"]].concat(),
        Expect::invalid(&["threshold"]),
    );
    // A cap, not a size: harmless however large.
    gen(
        c,
        "settings_revision_max_checks_u64_max",
        &[&SHORT[..], &["--revision", "--revision-max-checks", U64_MAX]].concat(),
        Expect::ok(),
    );
    gen(
        c,
        "settings_unknown_device",
        &[&SHORT[..], &["--backend", "vnpu", "--device", "sm0000x"]].concat(),
        Expect::bad_file(&["sm0000x"]),
    );
    gen(
        c,
        "settings_missing_qnn_library",
        &[&SHORT[..], &["--backend", "qnn", "--qnn-lib", "/nonexistent/libQnnNope.so"]].concat(),
        Expect::bad_file(&["libQnnNope.so"]),
    );
    gen(c, "settings_unknown_flag", &[&SHORT[..], &["--frobnicate"]].concat(), Expect::usage(&["frobnicate"]));
    // The live canvas is sized from the generation length: it must be checked first.
    let mut live = c.generate_with(&llada, &["--gen-length", "1000000000"], &prompt);
    live.retain(|a| a != "--no-live");
    live.push("--live".into());
    c.push("settings_live_gen_length_1e9", CLASS, live, Expect::invalid(&["length"]).any_stdout());

    // The causal model takes another decode path.
    let args = c.generate_with(&ar, &["--gen-length", "1000000000"], &prompt);
    c.push("settings_ar_gen_length_1e9", CLASS, args, Expect::invalid(&["length"]));
    let args = c.generate_with(&ar, &["--gen-length", U64_MAX], &prompt);
    c.push("settings_ar_gen_length_u64_max", CLASS, args, Expect::invalid(&["length"]));

    // Chat checks its settings before reading a line.
    let mut chat = c.base("chat", &llada);
    chat.extend(["--gen-length", "1000000000"].map(str::to_owned));
    c.push_stdin("settings_chat_gen_length_1e9", CLASS, chat, b"hi\n".to_vec(), Expect::invalid(&["length"]));

    // Sound runs of each embedded model, so a broken corpus setup shows up as failing controls.
    for m in ["tiny-llada", "tiny-ar", "tiny-llada-moe"] {
        let dir = c.embedded(m);
        let args = c.generate(&dir);
        c.push(&format!("control_{m}"), "control", args, Expect::ok());
    }
    Ok(())
}
