//! Model paths that are not models: nothing there, an empty folder, a text file, a link loop, a
//! FIFO (opening it would block forever), a device, a folder named like a GGUF file.

use std::path::Path;

use super::{files, Corpus, Expect, Result};

const CLASS: &str = "model-path";

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let root = c.path("paths");
    files::create_dir(&root)?;

    let missing = root.join("no-such-model");
    c.push("path_nonexistent", CLASS, c.generate(&missing), Expect::bad_file(&["no-such-model"]));

    let missing_gguf = root.join("no-such-model.gguf");
    c.push("path_nonexistent_gguf", CLASS, c.generate(&missing_gguf), Expect::bad_file(&["no-such-model.gguf"]));

    let empty = root.join("empty-folder");
    files::create_dir(&empty)?;
    c.push("path_empty_folder", CLASS, c.generate(&empty), Expect::bad_file(&["empty-folder", "config.json"]));

    let text = root.join("notes.txt");
    files::write(&text, b"these are my notes, not a model\n")?;
    c.push("path_text_file", CLASS, c.generate(&text), Expect::bad_file(&["notes.txt"]));

    let fake = root.join("fake.gguf");
    files::write(&fake, b"this is plain text with a .gguf name\n")?;
    c.push("path_text_file_named_gguf", CLASS, c.generate(&fake), Expect::bad_file(&["fake.gguf", "magic"]));

    let zero = root.join("zero-bytes.gguf");
    files::write(&zero, b"")?;
    c.push("path_empty_gguf_file", CLASS, c.generate(&zero), Expect::bad_file(&["zero-bytes.gguf"]));

    let dir_gguf = root.join("folder.gguf");
    files::create_dir(&dir_gguf)?;
    c.push(
        "path_folder_named_gguf",
        CLASS,
        c.generate(&dir_gguf),
        Expect::bad_file(&["folder.gguf"]).excluding(&["no such device"]),
    );

    let lp = root.join("loop.gguf");
    symlink(&lp, &lp)?;
    c.push("path_symlink_loop_gguf", CLASS, c.generate(&lp), Expect::bad_file(&["loop.gguf"]));

    let lp_dir = root.join("loop-dir");
    symlink(&lp_dir, &lp_dir)?;
    c.push("path_symlink_loop_folder", CLASS, c.generate(&lp_dir), Expect::bad_file(&["loop-dir"]));

    let dangling = root.join("dangling.gguf");
    symlink(&root.join("gone.gguf"), &dangling)?;
    c.push("path_dangling_symlink", CLASS, c.generate(&dangling), Expect::bad_file(&["dangling.gguf"]));

    let dev = root.join("dev-zero.gguf");
    symlink(Path::new("/dev/zero"), &dev)?;
    c.push("path_device_named_gguf", CLASS, c.generate(&dev), Expect::bad_file(&["dev-zero.gguf"]));

    // Opening a FIFO for reading blocks until a writer appears: a loader must check the file type.
    let fifo = root.join("fifo.gguf");
    if mkfifo(&fifo) {
        c.push("path_fifo_named_gguf", CLASS, c.generate(&fifo), Expect::bad_file(&["fifo.gguf"]));
    }

    // A model folder whose weights are a FIFO.
    let fifo_dir = c.model_copy("tiny-llada", &["model.safetensors"])?;
    if mkfifo(&fifo_dir.join("model.safetensors")) {
        c.push("path_fifo_weights", CLASS, c.generate(&fifo_dir), Expect::bad_file(&["model.safetensors"]));
    }

    // The config is a folder.
    let cfg_dir = c.model_copy("tiny-llada", &["config.json"])?;
    files::create_dir(&cfg_dir.join("config.json"))?;
    c.push(
        "path_config_is_folder",
        CLASS,
        c.generate(&cfg_dir),
        Expect::bad_file(&["config.json"]).excluding(&["no config.json"]),
    );
    Ok(())
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    files::remove_if_present(link)?;
    std::os::unix::fs::symlink(target, link).map_err(|source| files::CorpusError::Io { path: link.to_owned(), source })
}

/// Creates a FIFO; false when the file system cannot hold one (the case is then left out).
fn mkfifo(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if files::remove_if_present(path).is_err() {
        return false;
    }
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) == 0 }
}
