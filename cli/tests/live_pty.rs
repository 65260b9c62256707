//! The live canvas through a real pseudo-terminal (and its absence on a pipe).

mod common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Env, SMALL};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};

/// Runs `unmask ARGS` with stdin, stdout and stderr on a new pty; returns everything it wrote.
fn run_in_pty(env: &Env, args: &[&str], input: &[u8]) -> (std::process::ExitStatus, String) {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("utf-8 pty name"))
        .expect("open pty slave")
        .into();
    let mut cmd = env.cmd();
    cmd.args(args)
        .env("COLUMNS", "80")
        .env_remove("NO_COLOR")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child: Child = cmd.spawn().expect("spawn in pty");
    // The command's copies of the slave are its own now; ours were moved into `cmd`.
    drop(cmd);
    let mut master_file = std::fs::File::from(master);
    if !input.is_empty() {
        use std::io::Write;
        master_file.write_all(input).unwrap();
    }
    let mut reader = master_file.try_clone().unwrap();
    let collector = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        // Linux reports EIO on the master once every slave fd is closed: that is the end.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("unmask in the pty did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = collector.join().unwrap();
    (status, String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn live_canvas_redraws_in_a_terminal() {
    let env = Env::new();
    let mut args = vec!["generate", "What is 2+3?", "--no-record"];
    args.extend_from_slice(&SMALL);
    let (status, out) = run_in_pty(&env, &args, b"");
    assert!(status.success(), "{out}");
    assert!(out.contains("step") && out.contains("committed"), "status line missing: {out:?}");
    assert!(out.contains('▒'), "masked positions not drawn: {out:?}");
    // Redraw in place: cursor up N lines, carriage return, clear to end of screen.
    let redraws = out.matches("A\r\x1b[J").count();
    assert!(redraws >= 2, "expected repeated redraws, got {redraws}: {out:?}");
    assert!(out.contains("\x1b[32m") || out.contains("\x1b[33m") || out.contains("\x1b[31m"), "no confidence colours");
    // The final text, as a pipe would get it, is printed after the canvas is cleared.
    let mut plain = vec!["generate", "What is 2+3?", "--no-record"];
    plain.extend_from_slice(&SMALL);
    let text = env.ok(&plain);
    let expected_tail = format!("\x1b[J{}\r\n", text.trim_end_matches('\n'));
    assert!(out.ends_with(&expected_tail), "final text missing after the canvas: {out:?} vs {text:?}");
}

#[test]
fn a_draft_models_accepted_and_refused_tokens_are_drawn() {
    let env = Env::new();
    let args = ["generate", "Continue: the old man and the", "-m", "tiny-ar", "--draft", "tiny-draft", "--no-record"];
    let (status, out) = run_in_pty(&env, &args, b"");
    assert!(status.success(), "{out}");
    let v = env.json(&["generate", "Continue: the old man and the", "-m", "tiny-ar", "--draft", "tiny-draft", "--no-record", "--json"]);
    let (accepted, judged) = (v["speculation"]["accepted"].as_u64().unwrap(), v["speculation"]["offered"].as_u64().unwrap());
    // Accepted drafts in cyan; a refused draft struck through in red before the target's token.
    assert_eq!(out.contains("\x1b[36m"), accepted > 0, "accepted drafts: {out:?}");
    assert_eq!(out.contains("\x1b[9;31m"), judged > accepted, "refused drafts: {out:?}");
}

#[test]
fn no_canvas_on_a_pipe_or_with_no_live() {
    let env = Env::new();
    let mut args = vec!["generate", "What is 2+3?", "--no-record"];
    args.extend_from_slice(&SMALL);
    let out = env.run(&args);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(!s.contains('\x1b') && !s.contains('▒'), "{s:?}");
    assert_eq!(s.lines().count(), 1, "just the answer: {s:?}");
    // --no-live in a terminal: the answer only.
    args.push("--no-live");
    let (status, out) = run_in_pty(&env, &args, b"");
    assert!(status.success());
    assert!(!out.contains("committed") && !out.contains('▒'), "{out:?}");
}

#[test]
fn chat_in_a_terminal_answers_each_turn() {
    let env = Env::new();
    let mut args = vec!["chat", "--no-record", "--no-live"];
    args.extend_from_slice(&SMALL);
    let (status, out) = run_in_pty(&env, &args, b"What is 2+3?\n/quit\n");
    assert!(status.success(), "{out}");
    // Interactive: banner and prompt go to the terminal.
    assert!(out.contains("unmask chat") && out.contains("> "), "{out:?}");
}
