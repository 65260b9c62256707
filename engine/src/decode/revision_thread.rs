//! The CPU path of dual-path revision on its own OS thread for a whole run (the `threaded`
//! schedule, [`super::revision::CpuPathSchedule::Threaded`]): jobs go in through a one-slot queue,
//! outcomes come back through a channel, and the dense loop only polls at step boundaries. It
//! waits for the worker only at the end of a run (to drain its last job, and to join it).

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

use super::revision::{RevisionJob, RevisionOutcome, RevisionWorker};
use crate::backend::CpuPathExecutor;
use crate::error::{EngineError, Result};

/// A job on the worker: the step it was launched at and the positions it checks.
struct Running {
    step: usize,
    positions: Vec<usize>,
}

/// The CPU-path worker thread of one run.
pub(crate) struct RevisionThread {
    jobs: Option<SyncSender<RevisionJob>>,
    outcomes: Receiver<Result<RevisionOutcome>>,
    handle: Option<JoinHandle<()>>,
    running: Option<Running>,
}

fn worker_gone() -> EngineError {
    EngineError::Backend { backend: "cpu-path".into(), reason: "the revision thread stopped (panicked)".into() }
}

impl RevisionThread {
    /// Starts the worker on `executor`. Its kernels run on a one-thread pool of their own, so the
    /// CPU path takes one core and the dense path keeps the global pool.
    pub(crate) fn spawn(mut executor: Box<dyn CpuPathExecutor>) -> Result<Self> {
        let (jobs, job_rx) = mpsc::sync_channel::<RevisionJob>(1);
        let (out_tx, outcomes) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("unmask-cpu-path".into())
            .spawn(move || {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().ok();
                for job in job_rx {
                    executor.begin_step();
                    let r = match &pool {
                        Some(p) => p.install(|| RevisionWorker::run(executor.as_mut(), job)),
                        None => RevisionWorker::run(executor.as_mut(), job),
                    };
                    if out_tx.send(r).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| EngineError::Backend {
                backend: "cpu-path".into(),
                reason: format!("cannot start the revision thread: {e}"),
            })?;
        Ok(RevisionThread { jobs: Some(jobs), outcomes, handle: Some(handle), running: None })
    }

    /// Whether a job is on the worker.
    pub(crate) fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Positions the running job checks (empty when idle).
    pub(crate) fn checking(&self) -> &[usize] {
        self.running.as_ref().map_or(&[], |r| &r.positions)
    }

    /// Hands `job` to the idle worker (never blocks: the queue has room for exactly this job).
    pub(crate) fn launch(&mut self, job: RevisionJob, step: usize) -> Result<()> {
        let positions = job.positions.clone();
        let tx = self.jobs.as_ref().ok_or_else(worker_gone)?;
        tx.try_send(job).map_err(|_| worker_gone())?;
        self.running = Some(Running { step, positions });
        Ok(())
    }

    /// The running job's outcome with its launch step, if it has finished (never blocks).
    pub(crate) fn poll(&mut self) -> Option<(usize, Result<RevisionOutcome>)> {
        let step = self.running.as_ref()?.step;
        match self.outcomes.try_recv() {
            Ok(r) => {
                self.running = None;
                Some((step, r))
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.running = None;
                Some((step, Err(worker_gone())))
            }
        }
    }

    /// Waits for the running job's outcome (draining at the end of a run); `None` when idle.
    pub(crate) fn wait(&mut self) -> Option<(usize, Result<RevisionOutcome>)> {
        let step = self.running.take()?.step;
        Some((step, self.outcomes.recv().unwrap_or_else(|_| Err(worker_gone()))))
    }

    /// Forgets the running job (its outcome is discarded); returns whether there was one.
    pub(crate) fn abandon(&mut self) -> bool {
        self.running.take().is_some()
    }
}

impl Drop for RevisionThread {
    fn drop(&mut self) {
        // Closing the queue ends the worker's loop once its current job is done.
        self.jobs = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
