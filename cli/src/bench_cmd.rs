//! `unmask bench`: runs the benchmark harness (the `unmask-bench` binary of `bench/`, or
//! `bench/run` in a source checkout) once per suite, with a progress bar per suite fed by the
//! harness's progress lines, and collects each suite's headline (the figures behind docs/benchmarks.md,
//! generated from `bench/results/SUITE.json`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Value};

use crate::exit::{fail, OTHER, UNAVAILABLE, USAGE};
use crate::progress;

/// Suites in the order of docs/benchmarks.md.
const DOCS_ORDER: &[&str] = &["forward", "kernels", "npu", "decoding", "ablation", "quality", "store"];

/// Flags of `unmask bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Suites to run (`unmask bench --list`).
    pub suites: Vec<String>,
    /// Run every suite, in docs/benchmarks.md's order (takes hours on a small machine).
    #[arg(long, conflicts_with = "suites")]
    pub all: bool,
    /// Short version of each suite (a few minutes each; numbers are not the recorded ones).
    #[arg(long)]
    pub quick: bool,
    /// List the suites and exit.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON object with every suite's headline on stdout.
    #[arg(long)]
    pub json: bool,
    /// Harness to run [default: $UNMASK_BENCH_HARNESS, else `unmask-bench` next to this binary,
    /// else bench/run of the source checkout].
    #[arg(long, value_name = "PATH")]
    pub harness: Option<PathBuf>,
}

/// How to start the harness.
struct Harness {
    program: PathBuf,
}

impl Harness {
    fn find(flag: Option<&Path>) -> Result<Harness> {
        if let Some(p) = flag.map(Path::to_owned).or_else(|| std::env::var_os("UNMASK_BENCH_HARNESS").map(PathBuf::from)) {
            if !p.exists() {
                return Err(fail(UNAVAILABLE, format!("benchmark harness {} does not exist", p.display())));
            }
            return Ok(Harness { program: p });
        }
        if let Ok(exe) = std::env::current_exe() {
            let next = exe.with_file_name(format!("unmask-bench{}", std::env::consts::EXE_SUFFIX));
            if next.exists() {
                return Ok(Harness { program: next });
            }
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/run");
        if script.exists() {
            return Ok(Harness { program: script });
        }
        Err(fail(
            UNAVAILABLE,
            "benchmark harness not found: build it with `cargo build --release -p unmask-bench` (it goes next to `unmask`), or pass --harness PATH",
        ))
    }

    fn command(&self) -> Command {
        Command::new(&self.program)
    }

    /// (name, description) of every suite, from the harness's `--list`.
    fn suites(&self) -> Result<Vec<(String, String)>> {
        let out = self
            .command()
            .arg("--list")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} --list", self.program.display()))?;
        if !out.status.success() {
            return Err(fail(OTHER, format!("{} --list failed: {}", self.program.display(), String::from_utf8_lossy(&out.stderr))));
        }
        let text = String::from_utf8_lossy(&out.stderr);
        Ok(text
            .lines()
            .filter(|l| l.starts_with("  "))
            .filter_map(|l| {
                let l = l.trim();
                let (name, desc) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
                (!name.is_empty()).then(|| (name.to_owned(), desc.trim().to_owned()))
            })
            .collect())
    }
}

/// What one suite produced.
struct SuiteResult {
    suite: String,
    headline: Value,
    results_path: Option<String>,
    elapsed_s: f64,
}

/// Runs `unmask bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let harness = Harness::find(args.harness.as_deref())?;
    let known = harness.suites()?;
    if args.list {
        for (n, d) in &known {
            println!("{n:10} {d}");
        }
        return Ok(());
    }
    let names: Vec<String> = if args.all {
        let mut v: Vec<String> = DOCS_ORDER.iter().filter(|n| known.iter().any(|(k, _)| k.as_str() == **n)).map(|s| s.to_string()).collect();
        v.extend(known.iter().map(|(k, _)| k.clone()).filter(|k| !DOCS_ORDER.contains(&k.as_str())));
        v
    } else {
        args.suites.clone()
    };
    if names.is_empty() {
        let list: Vec<&str> = known.iter().map(|(k, _)| k.as_str()).collect();
        return Err(fail(USAGE, format!("name one or more suites, or --all (suites: {})", list.join(", "))));
    }
    if let Some(bad) = names.iter().find(|n| !known.iter().any(|(k, _)| k == *n)) {
        let list: Vec<&str> = known.iter().map(|(k, _)| k.as_str()).collect();
        return Err(fail(USAGE, format!("unknown suite `{bad}` (suites: {})", list.join(", "))));
    }
    let m = progress::multi();
    let overall = m.add(indicatif::ProgressBar::new(names.len() as u64));
    overall.set_style(
        indicatif::ProgressStyle::with_template("{prefix:.bold} {bar:20} {pos}/{len} suites · {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    overall.set_prefix("bench");
    let mut results = Vec::new();
    for name in &names {
        let bar = progress::spinner(&m, name);
        let r = run_suite(&harness, name, args.quick, &bar);
        bar.finish_and_clear();
        let r = r?;
        overall.inc(1);
        if !args.json {
            m.suspend(|| print_suite(&r));
        }
        results.push(r);
    }
    overall.finish_and_clear();
    if args.json {
        let v = json!({
            "quick": args.quick,
            "suites": results.iter().map(|r| json!({
                "suite": r.suite, "headline": r.headline, "results_path": r.results_path, "elapsed_s": r.elapsed_s,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn run_suite(harness: &Harness, name: &str, quick: bool, bar: &indicatif::ProgressBar) -> Result<SuiteResult> {
    let started = Instant::now();
    let mut cmd = harness.command();
    cmd.arg(name);
    if quick {
        cmd.arg("--quick");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", harness.program.display()))?;
    let mut stdout = child.stdout.take().context("harness stdout")?;
    let stderr = child.stderr.take().context("harness stderr")?;
    // Headline JSON arrives on stdout at the end; read it on a thread so neither pipe can fill up.
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let draw = progress::enabled();
    let mut tail: Vec<String> = Vec::new();
    let mut results_path = None;
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        // The harness's own bars redraw with carriage returns: show the latest state only.
        let line = line.rsplit('\r').next().unwrap_or("").trim_end().to_owned();
        if line.is_empty() {
            continue;
        }
        if let Some(p) = line.strip_prefix("wrote ") {
            results_path = Some(p.trim().to_owned());
        }
        bar.set_message(line.clone());
        if !draw {
            // No bar to carry it: pass the harness's progress through, so logs keep it.
            eprintln!("{line}");
        }
        tail.push(line);
        if tail.len() > 20 {
            tail.remove(0);
        }
    }
    let status = child.wait().context("waiting for the harness")?;
    let stdout = out_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(fail(OTHER, format!("suite `{name}` failed ({status}); last output:\n{}", tail.join("\n"))));
    }
    let headline: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("suite `{name}`: the harness printed no headline JSON (got {:?})", clip(&stdout)))?;
    Ok(SuiteResult { suite: name.to_owned(), headline, results_path, elapsed_s: started.elapsed().as_secs_f64() })
}

fn clip(s: &str) -> String {
    s.chars().take(200).collect()
}

fn print_suite(r: &SuiteResult) {
    println!("== {} ({:.0} s)", r.suite, r.elapsed_s);
    match &r.headline {
        Value::Object(map) => {
            let w = map.keys().map(|k| k.len()).max().unwrap_or(0);
            for (k, v) in map {
                println!("  {k:<w$}  {v}");
            }
        }
        other => println!("  {other}"),
    }
    if let Some(p) = &r.results_path {
        println!("  full results: {p}");
    }
}
