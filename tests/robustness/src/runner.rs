//! Runs corpus cases against an `unmask` binary: one process per case under a wall-clock limit
//! (killed past it) and a peak-RSS limit, the peak read from the kernel's resource accounting of
//! the reaped child (`wait4`'s `ru_maxrss`: resident memory, not address space).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::corpus::Case;

/// Limits every case runs under.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    pub wall: Duration,
    pub rss_mib: f64,
}

impl Default for Limits {
    /// 10 s and 1 GiB per case.
    fn default() -> Limits {
        Limits { wall: Duration::from_secs(10), rss_mib: 1024.0 }
    }
}

/// What one case did.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub class: String,
    pub expected_exit: u8,
    /// Exit code; `None` when a signal ended the process.
    pub exit: Option<i32>,
    /// The signal that ended the process (SIGABRT from an allocation failure, SIGKILL from a limit).
    pub signal: Option<i32>,
    pub wall_s: f64,
    pub peak_rss_mib: f64,
    /// The `error:` line of standard error when there is one, else its first line.
    pub stderr_first_line: String,
    pub passed: bool,
    /// Every reason the case failed, `; `-separated (empty when it passed).
    pub why: String,
}

/// Artefacts of Rust's debug formatting and of panics that must never reach a user.
const DEBUG_ARTEFACTS: &[&str] = &["Some(", "U32(", "U64(", "I32(", "Err(", "Ok(", "panicked at", "RUST_BACKTRACE"];
/// Output kept per stream (a run may print a megabyte of echoed prompt).
const KEEP_BYTES: usize = 64 << 10;
/// How often the child is polled for exit and resident memory.
const POLL: Duration = Duration::from_millis(5);

/// Runs every case in order.
pub fn run_all(unmask: &Path, cases: &[Case], limits: Limits) -> Vec<CaseResult> {
    cases.iter().map(|c| run_case(unmask, c, limits)).collect()
}

/// Runs one case and judges it against its expectation.
pub fn run_case(unmask: &Path, case: &Case, limits: Limits) -> CaseResult {
    // A case that ends while its launcher shell is still exiting can be reaped by that shell
    // (the shell's SIGCHLD handling), leaving nothing for `wait4` (ECHILD): run it again.
    let mut attempt = spawn_and_wait(unmask, case, limits);
    for _ in 0..3 {
        match &attempt {
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => attempt = spawn_and_wait(unmask, case, limits),
            _ => break,
        }
    }
    let run = match attempt {
        Ok(r) => r,
        Err(e) => {
            return CaseResult {
                name: case.name.clone(),
                class: case.class.to_owned(),
                expected_exit: case.expect.exit,
                exit: None,
                signal: None,
                wall_s: 0.0,
                peak_rss_mib: 0.0,
                stderr_first_line: String::new(),
                passed: false,
                why: format!("could not run {}: {e}", unmask.display()),
            }
        }
    };
    judge(case, &run, limits)
}

/// Raw facts of one process run.
struct Run {
    exit: Option<i32>,
    signal: Option<i32>,
    wall_s: f64,
    peak_rss_mib: f64,
    timed_out: bool,
    rss_killed: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Starts the case through `sh`, which puts `unmask` in the background and exits: the case then
/// belongs to this process (a child subreaper) without being forked from it. A process forked or
/// spawned from this one would start with this process's peak RSS in its `ru_maxrss` (the
/// kernel carries the old memory's peak across exec), hiding the case's own peak below it.
const LAUNCH: &str = r#"p=$1; shift; exec 3<&0; "$@" 0<&3 3<&- & echo $! > "$p""#;

fn spawn_and_wait(unmask: &Path, case: &Case, limits: Limits) -> std::io::Result<Run> {
    become_subreaper()?;
    let pid_dir = tempfile::tempdir()?;
    let pid_file = pid_dir.path().join("pid");
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(LAUNCH)
        .arg("sh")
        .arg(&pid_file)
        .arg(unmask)
        .args(&case.args)
        .stdin(if case.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Nothing inherited may choose the model, data folder or threads.
        .env_remove("UNMASK_MODEL")
        .env_remove("UNMASK_DATA_DIR")
        .env_remove("UNMASK_THREADS")
        .env_remove("UNMASK_MODELS_DIR")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LOG");
    let started = Instant::now();
    let mut launcher = cmd.spawn()?;
    let feeder = feed_stdin(&mut launcher, case.stdin.clone());
    let out = drain(launcher.stdout.take());
    let err = drain(launcher.stderr.take());
    let launched = launcher.wait()?;
    let pid: libc::pid_t = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("sh did not start the case ({launched})")))?;

    let mut timed_out = false;
    let mut rss_killed = false;
    let (status, usage) = loop {
        if let Some(done) = try_reap(pid, false)? {
            break done;
        }
        if started.elapsed() > limits.wall {
            timed_out = true;
        } else if current_rss_mib(pid).is_some_and(|r| r > limits.rss_mib) {
            rss_killed = true;
        }
        if timed_out || rss_killed {
            // SAFETY: `pid` is our unreaped child, so the id cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break try_reap(pid, true)?.ok_or_else(|| std::io::Error::other("child vanished"))?;
        }
        std::thread::sleep(POLL);
    };
    let wall_s = started.elapsed().as_secs_f64();
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let (exit, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    // ru_maxrss is in KiB on Linux.
    let peak_rss_mib = usage.ru_maxrss as f64 / 1024.0;
    Ok(Run { exit, signal, wall_s, peak_rss_mib, timed_out, rss_killed, stdout, stderr })
}

/// Makes orphaned descendants (the cases `sh` leaves behind) children of this process.
fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Reaps `pid` if it has ended (or waits for it when `block`), returning its status and usage.
fn try_reap(pid: libc::pid_t, block: bool) -> std::io::Result<Option<(i32, libc::rusage)>> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            return Ok(Some((status, usage)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Resident memory of a live process (VmRSS), used to stop a runaway before it hurts the machine.
pub fn current_rss_mib(pid: libc::pid_t) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kib(&status, "VmRSS:").map(|k| k as f64 / 1024.0)
}

/// A `Vm*:` line of /proc/PID/status in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

fn feed_stdin(child: &mut Child, bytes: Option<Vec<u8>>) -> Option<JoinHandle<()>> {
    let mut stdin = child.stdin.take()?;
    let bytes = bytes?;
    // A process that exits early closes the pipe: the write error is expected then.
    Some(std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    }))
}

/// Reads a stream to its end, keeping its first [`KEEP_BYTES`].
fn drain<R: Read + Send + 'static>(stream: Option<R>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let Some(mut s) = stream else { return kept };
        let mut buf = [0u8; 8192];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = KEEP_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        kept
    })
}

fn judge(case: &Case, run: &Run, limits: Limits) -> CaseResult {
    let stderr = String::from_utf8_lossy(&run.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let error_lines: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("error:")).collect();
    let shown = error_lines.first().or(lines.first()).copied().unwrap_or("");
    let mut why: Vec<String> = Vec::new();
    let e = &case.expect;

    if run.timed_out {
        why.push(format!("timeout after {:.0} s", limits.wall.as_secs_f64()));
    }
    if run.rss_killed {
        why.push(format!("killed above {:.0} MiB resident", limits.rss_mib));
    }
    if let Some(sig) = run.signal {
        if !run.timed_out && !run.rss_killed {
            why.push(format!("killed by signal {sig}{}", if sig == libc::SIGABRT { " (abort)" } else { "" }));
        }
    }
    if run.peak_rss_mib > limits.rss_mib {
        why.push(format!("peak RSS {:.0} MiB above {:.0} MiB", run.peak_rss_mib, limits.rss_mib));
    }
    if let Some(code) = run.exit {
        if code != i32::from(e.exit) {
            why.push(format!("exit {code}, expected {}", e.exit));
        }
    }
    for a in DEBUG_ARTEFACTS {
        if stderr.contains(a) {
            why.push(format!("stderr shows `{a}`"));
        }
    }
    if shows_debug_none(&stderr) {
        why.push("stderr shows `None`".into());
    }

    if e.exit == 0 {
        let all = stderr.to_lowercase();
        for w in &e.stderr_contains {
            if !all.contains(&w.to_lowercase()) {
                why.push(format!("stderr lacks `{w}`"));
            }
        }
    } else {
        check_error_line(&lines, &error_lines, e.exit, &mut why);
        let line = error_lines.first().copied().unwrap_or("").to_lowercase();
        for w in &e.stderr_contains {
            if !line.contains(&w.to_lowercase()) {
                why.push(format!("error lacks `{w}`"));
            }
        }
        if let Some(p) = repeated_path(&line) {
            why.push(format!("error names `{p}` twice"));
        }
        if line.matches("os error").count() > 1 {
            why.push("error repeats the OS error".into());
        }
        for w in &e.stderr_excludes {
            if line.contains(&w.to_lowercase()) {
                why.push(format!("error says `{w}`"));
            }
        }
        if e.stdout_empty && !run.stdout.is_empty() {
            why.push(format!("stdout not empty ({} bytes)", run.stdout.len()));
        }
    }

    CaseResult {
        name: case.name.clone(),
        class: case.class.to_owned(),
        expected_exit: e.exit,
        exit: run.exit,
        signal: run.signal,
        wall_s: run.wall_s,
        peak_rss_mib: run.peak_rss_mib,
        stderr_first_line: shown.to_owned(),
        passed: why.is_empty(),
        why: why.join("; "),
    }
}

/// `None` as Rust's debug output writes it (`None)`, `None,`, `: None` at a line end), not the
/// English word starting a sentence.
fn shows_debug_none(s: &str) -> bool {
    s.match_indices("None").any(|(i, _)| {
        let before = s[..i].chars().next_back();
        let after = s[i + 4..].chars().next();
        let word_start = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let debug_end = matches!(after, None | Some(')' | ',' | '}' | ']' | '\n'));
        word_start && debug_end
    })
}

/// An absolute path named twice in one error line (an OS or loader message repeating the path
/// the caller already gave).
fn repeated_path(line: &str) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    line.split(|c: char| c.is_whitespace() || "`'\"(),;".contains(c))
        .map(|t| t.trim_end_matches([':', '.']))
        .filter(|t| t.starts_with('/') && t.len() > 1)
        .find(|t| !seen.insert(*t))
        .map(str::to_owned)
}

/// A failed run reports exactly one `error:` line. Clap's usage errors (exit 2) follow theirs
/// with usage lines; every other error is the last line (warnings may precede it).
fn check_error_line(lines: &[&str], error_lines: &[&str], exit: u8, why: &mut Vec<String>) {
    match error_lines.len() {
        0 => why.push("no `error:` line on stderr".into()),
        1 => {}
        n => why.push(format!("{n} `error:` lines")),
    }
    if exit != 2 && !error_lines.is_empty() && lines.last().is_some_and(|l| !l.starts_with("error:")) {
        why.push("the error spans several lines".into());
    }
}

/// A fixed-width table of results, one line per case.
pub fn table(results: &[CaseResult]) -> String {
    let mut s = format!(
        "{:<48} {:<18} {:>4} {:>6} {:>7} {:>8}  {:<4}  {}\n",
        "case", "class", "want", "got", "wall_s", "rss_MiB", "ok", "stderr / why"
    );
    for r in results {
        let got = match (r.exit, r.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(sig)) => format!("sig{sig}"),
            _ => "?".into(),
        };
        let detail = if r.passed {
            shorten(&r.stderr_first_line, 90)
        } else {
            format!("{} | {}", r.why, shorten(&r.stderr_first_line, 90))
        };
        s.push_str(&format!(
            "{:<48} {:<18} {:>4} {:>6} {:>7.2} {:>8.1}  {:<4}  {}\n",
            r.name,
            r.class,
            r.expected_exit,
            got,
            r.wall_s,
            r.peak_rss_mib,
            if r.passed { "ok" } else { "FAIL" },
            detail
        ));
    }
    s
}

/// `s` cut to `n` characters (with an ellipsis).
pub fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
    t.push('…');
    t
}
