//! Crash safety: a child process writing runs is killed with SIGKILL in the middle of a run;
//! the database must open, pass `integrity_check`, keep every completed run intact and mark
//! the killed run `interrupted`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::frames::{frame, frames};
use unmask_engine::decode::DecodeSettings;
use unmask_store::{NewRun, RunMetrics, RunOutcome, RunStatus, Store, TraceBatching};

const CHILD_ENV: &str = "UNMASK_STORE_CRASH_CHILD";
const COMPLETED_PER_ROUND: u64 = 3;
const FRAMES_PER_RUN: usize = 40;

fn new_run(seed: u64) -> NewRun {
    NewRun {
        model_id: None,
        model_name: format!("synthetic-{seed}"),
        backend: unmask_engine::run::BackendSpec::Cpu,
        prompt: format!("prompt {seed}"),
        settings: DecodeSettings { seed, ..Default::default() },
    }
}

fn outcome(seed: u64) -> RunOutcome {
    RunOutcome {
        output: format!("output of run {seed}"),
        output_tokens: (0..8).map(|t| t + seed as u32).collect(),
        metrics: RunMetrics {
            wall_s: Some(1.5),
            steps: Some(40),
            forwards: Some(40),
            tokens_per_forward: Some(2.0),
            simulated_npu_s: None,
            energy_mj: Some(seed as f64),
            answer_tokens: Some(8),
        },
        stop_reason: Some("completed".into()),
    }
}

/// The child: completes a few runs, then writes one run forever until it is killed.
async fn child(dir: &str, round: u64) {
    let store = Store::open(dir).await.expect("child opens the store");
    for k in 0..COMPLETED_PER_ROUND {
        let seed = round * 100 + k;
        let mut rec = store.start_run(new_run(seed)).await.unwrap();
        for f in frames(seed, FRAMES_PER_RUN) {
            rec.record(&f);
        }
        rec.finish(outcome(seed)).await.unwrap();
    }
    let seed = round * 100 + 99;
    let batching = TraceBatching { max_frames: 4, max_delay: Duration::from_millis(5) };
    let mut rec = store.start_run_with(new_run(seed), batching).await.unwrap();
    let mut i = 0usize;
    loop {
        rec.record(&frame(seed, i));
        i += 1;
        if i == 16 {
            rec.flush().await.unwrap();
            println!("READY {}", rec.id());
        }
        if i.is_multiple_of(64) {
            tokio::task::yield_now().await;
        }
        if i > 16 {
            // Keep the writer busy with small transactions so the kill lands inside one.
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
}

#[test]
#[ignore = "entry point of the child process of `killed_writer_leaves_a_consistent_database`"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let round: u64 = std::env::var("UNMASK_STORE_CRASH_ROUND").ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(child(&dir, round));
}

/// Starts the child, waits for its READY line, lets it write a little more and SIGKILLs it.
fn run_and_kill(dir: &std::path::Path, round: u64, extra: Duration) -> i64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("UNMASK_STORE_CRASH_ROUND", round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child test process");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The test harness may print "test crash_child ... " on the same line.
            if let Some(id) = line.split("READY ").nth(1) {
                let _ = tx.send(id.trim().parse::<i64>().ok());
                return;
            }
        }
        let _ = tx.send(None);
    });
    let started = Instant::now();
    let id = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Some(id)) => id,
        other => {
            let _ = child.kill();
            panic!("child did not become ready after {:?}: {other:?}", started.elapsed());
        }
    };
    std::thread::sleep(extra);
    // `Child::kill` is SIGKILL on Unix (TerminateProcess on Windows): no cleanup runs.
    child.kill().expect("kill the child");
    let status = child.wait().unwrap();
    assert!(!status.success());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writer_leaves_a_consistent_database() {
    let dir = tempfile::tempdir().unwrap();
    let mut killed = Vec::new();
    // Two rounds, killed at different moments; the second also finds the first round's state.
    for (round, extra) in [(1u64, Duration::from_millis(30)), (2, Duration::from_millis(150))] {
        let d = dir.path().to_owned();
        let id = tokio::task::spawn_blocking(move || run_and_kill(&d, round, extra)).await.unwrap();
        killed.push((round, id));

        let store = Store::open(dir.path()).await.expect("the database opens after the kill");
        store.integrity_check().await.expect("integrity_check is ok");
        for &(r, run_id) in &killed {
            let run = store.run_detail(run_id).await.unwrap();
            assert_eq!(run.status, RunStatus::Interrupted, "round {r}");
            assert!(run.finished_at.is_some());
            assert!(run.error.as_deref().unwrap_or("").contains("ended before it finished"));
            // The frames that were committed are readable and exactly what was written.
            let trace = store.run_trace(run_id).await.unwrap();
            assert!(trace.len() >= 16, "round {r}: {} frames", trace.len());
            assert_eq!(trace.len() as u64, run.trace_frames);
            assert_eq!(trace, frames(r * 100 + 99, trace.len()));
            eprintln!("round {r}: the killed run kept {} committed frames", trace.len());
        }
        let all = store.recent_runs(100, 0).await.unwrap();
        let completed: Vec<_> = all.iter().filter(|r| r.status == RunStatus::Completed).collect();
        assert_eq!(completed.len() as u64, COMPLETED_PER_ROUND * round);
        for run in completed {
            let seed = run.settings.seed;
            assert_eq!(run.prompt, format!("prompt {seed}"));
            assert_eq!(run.output.as_deref(), Some(format!("output of run {seed}").as_str()));
            assert_eq!(run.metrics, outcome(seed).metrics);
            assert_eq!(store.run_trace(run.id).await.unwrap(), frames(seed, FRAMES_PER_RUN));
        }
        assert!(!all.iter().any(|r| r.status == RunStatus::Running));
        store.close().await;
    }
}

#[tokio::test]
async fn runs_of_a_live_store_are_not_interrupted_by_another_open() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path()).await.unwrap();
    let mut rec = a.start_run(new_run(1)).await.unwrap();
    rec.record(&frame(1, 0));
    rec.flush().await.unwrap();
    // A second process (here: a second store) opening the same data folder.
    let b = Store::open(dir.path()).await.unwrap();
    assert_eq!(b.recover_interrupted_runs().await.unwrap(), 0);
    assert_eq!(b.run_detail(rec.id()).await.unwrap().status, RunStatus::Running);
    let done = rec.finish(outcome(1)).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(b.run_trace(done.id).await.unwrap(), frames(1, 1));

    // A recorder dropped without finishing: the run is marked interrupted, its frames kept.
    let mut rec = a.start_run(new_run(2)).await.unwrap();
    for f in frames(2, 5) {
        rec.record(&f);
    }
    let id = rec.id();
    drop(rec);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = b.run_detail(id).await.unwrap();
        if r.status != RunStatus::Running {
            assert_eq!(r.status, RunStatus::Interrupted);
            break;
        }
        assert!(Instant::now() < deadline, "dropped run never finalised");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.run_trace(id).await.unwrap(), frames(2, 5));
}
