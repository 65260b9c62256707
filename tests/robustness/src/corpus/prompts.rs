//! Hostile prompts: a megabyte of text (more than the context holds), NUL bytes and invalid
//! UTF-8 through `--prompt-file PATH` and `--prompt-file -`, control characters, special-token
//! strings, and prompt files that cannot be read. Chat gets the same bytes on its input.

use super::{files, Corpus, Expect, Result, SHORT};

const CLASS: &str = "prompt";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let model = c.embedded("tiny-llada");
    let root = c.path("prompts");
    files::create_dir(&root)?;

    // A megabyte of words: far more tokens than the 256-token context.
    let mega: Vec<u8> =
        b"the quick brown fox jumps over the lazy dog. ".iter().copied().cycle().take(1 << 20).collect();
    let mega_file = root.join("megabyte.txt");
    files::write(&mega_file, &mega)?;
    let args = c.generate_with(&model, &SHORT, &["--prompt-file", &mega_file.display().to_string()]);
    c.push("prompt_megabyte_file", CLASS, args, Expect::invalid(&["context"]));
    let args = c.generate_with(&model, &SHORT, &["--prompt-file", "-"]);
    c.push_stdin("prompt_megabyte_stdin", CLASS, args, mega.clone(), Expect::invalid(&["context"]));
    // The longest single argument Linux passes (128 KiB) as the positional prompt.
    let long_arg = String::from_utf8_lossy(&mega[..(128 << 10) - 1]).into_owned();
    let args = c.generate_with(&model, &SHORT, &[&long_arg]);
    c.push("prompt_128k_argument", CLASS, args, Expect::invalid(&["context"]));

    // Bytes that are not text: accepted (invalid UTF-8 replaced, with a warning).
    let nul = b"hello\0world\0\0 how are\0 you".to_vec();
    let bad_utf8 = b"caf\xc3 \xff\xfe hello \xed\xa0\x80 surrogate \xc0\xaf overlong".to_vec();
    let mixed = b"\0\xff\0\xfe\x01\x02\x1b[2J\x7f tell me a story".to_vec();
    for (name, bytes, warns) in
        [("nul_bytes", &nul, false), ("invalid_utf8", &bad_utf8, true), ("nul_and_invalid_utf8", &mixed, true)]
    {
        let file = root.join(format!("{name}.bin"));
        files::write(&file, bytes)?;
        let expect = if warns { Expect::ok().with_stderr(&["warning"]) } else { Expect::ok() };
        let args = c.generate_with(&model, &SHORT, &["--prompt-file", &file.display().to_string()]);
        c.push(&format!("prompt_{name}_file"), CLASS, args, expect.clone());
        let args = c.generate_with(&model, &SHORT, &["--prompt-file", "-"]);
        c.push_stdin(&format!("prompt_{name}_stdin"), CLASS, args, bytes.clone(), expect);
    }

    // Special-token strings: the mask token in a prompt is refused as a request the model
    // cannot serve (a position to denoise inside the prompt); the others are plain text.
    let args = c.generate_with(&model, &SHORT, &["<|mdm_mask|><|endoftext|><|eot_id|>"]);
    c.push("prompt_mask_token_string", CLASS, args, Expect::invalid(&["mask"]));
    let args = c.generate_with(&model, &SHORT, &["<|endoftext|><|eot_id|><|start_header_id|>system<|end_header_id|>"]);
    c.push("prompt_special_token_strings", CLASS, args, Expect::ok());
    let args = c.generate_with(&model, &SHORT, &["\x01\x02\x03\x1b[2J\x1b]0;title\x07\u{202e}reversed\u{feff}"]);
    c.push("prompt_control_characters", CLASS, args, Expect::ok());
    let args = c.generate_with(&model, &SHORT, &["--raw", "<|mdm_mask|><|mdm_mask|><|mdm_mask|>"]);
    c.push("prompt_raw_mask_tokens", CLASS, args, Expect::invalid(&["mask"]));

    // Prompt files that cannot be read.
    let missing = root.join("no-such-prompt.txt");
    let args = c.generate_with(&model, &SHORT, &["--prompt-file", &missing.display().to_string()]);
    c.push("prompt_file_missing", CLASS, args, Expect::bad_file(&["no-such-prompt.txt"]));
    let folder = root.join("prompt-folder");
    files::create_dir(&folder)?;
    let args = c.generate_with(&model, &SHORT, &["--prompt-file", &folder.display().to_string()]);
    c.push("prompt_file_is_folder", CLASS, args, Expect::bad_file(&["prompt-folder"]));

    // Chat reads the same bytes as lines.
    let mut chat = c.base("chat", &model);
    chat.extend(SHORT.iter().map(|s| (*s).to_owned()));
    let mut lines = Vec::new();
    for l in [&nul, &bad_utf8, &mixed] {
        lines.extend_from_slice(l);
        lines.push(b'\n');
    }
    c.push_stdin("prompt_chat_hostile_lines", CLASS, chat.clone(), lines, Expect::ok());
    let mut one_line = mega.clone();
    one_line.push(b'\n');
    c.push_stdin("prompt_chat_megabyte_line", CLASS, chat, one_line, Expect::invalid(&["context"]).any_stdout());
    Ok(())
}
