//! Cross-request batching: several decodes, each on its own thread, share one backend, and
//! their forwards run packed into one.
//!
//! Each decode holds a [`BatchMember`], a [`Backend`] whose `forward` hands the block to the
//! shared [`ForwardBatcher`] and waits. A decode that is running joins the batcher for the length
//! of its run ([`ForwardBatcher::join`]); the batcher runs a packed forward as soon as every
//! joined decode has a block waiting, on the thread of the last one to arrive, so no decode
//! waits for a forward it is not part of and none waits on a timer. The decoding loops stay as
//! they are: batching is invisible to them except in time.
//!
//! A decode may go ahead ([`Joined::go_ahead`]): while any decode that goes ahead is running, a
//! packed forward runs as soon as those decodes have their blocks waiting, without the others'
//! blocks. A server uses it for requests that have not shown their first token yet, so that a
//! newcomer's first token does not wait for the whole pack's compute. The blocks passed over
//! wait at most [`MAX_PASSED_OVER`] such forwards in a row, so nobody starves.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

use super::{Backend, CostProfile, ForwardStats};
use crate::error::{EngineError, Result};
use crate::model::{BatchItem, ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig};

/// What a packed forward gives one sequence back: its result and its cache.
type Done = (Result<(ForwardOutput, ForwardStats)>, Option<KvCache>);

/// A block waiting for the next packed forward (owned: its caller is blocked meanwhile).
struct Pending {
    ticket: u64,
    tokens: Vec<u32>,
    positions: Vec<usize>,
    logits_rows: Vec<usize>,
    kv: KvMode,
    cache: Option<KvCache>,
    /// Submitted by a decode that goes ahead.
    ahead: bool,
}

/// How many packed forwards in a row may run without the blocks of decodes that do not go
/// ahead while those blocks wait; the next one takes every block.
pub const MAX_PASSED_OVER: u32 = 3;

/// How much packing happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounters {
    /// Packed forwards run.
    pub batches: u64,
    /// Sequence forwards they carried.
    pub forwards: u64,
    /// The most sequences one packed forward carried.
    pub largest: usize,
    /// Packed forwards that ran only the blocks of decodes going ahead while others waited.
    pub passed_over: u64,
}

impl BatchCounters {
    /// Mean sequences per packed forward (0 before the first).
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.forwards as f64 / self.batches as f64
        }
    }
}

#[derive(Default)]
struct BatchState {
    /// Decodes that joined and have not left; a batch runs when all of them wait. (A forward
    /// from a thread that did not join runs with the next batch, or alone when nobody joined.)
    joined: usize,
    pending: Vec<Pending>,
    done: HashMap<u64, Done>,
    /// A thread is running a packed forward.
    leading: bool,
    next_ticket: u64,
    counters: BatchCounters,
    /// The threads of joined decodes that go ahead.
    ahead: HashSet<ThreadId>,
    /// Packed forwards run in a row without waiting blocks of decodes that do not go ahead.
    passed_over: u32,
}

/// Which waiting blocks the next packed forward takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    All,
    Ahead,
}

impl BatchState {
    /// The packed forward that can run now, if any: the blocks of the decodes going ahead as soon
    /// as all of them wait (unless the others were passed over too often already), else every
    /// block once every joined decode has one waiting. Nothing while a forward runs.
    fn next(&self) -> Option<Take> {
        if self.leading || self.pending.is_empty() {
            return None;
        }
        let ahead_waiting = self.pending.iter().filter(|p| p.ahead).count();
        let others_waiting = ahead_waiting < self.pending.len();
        if !self.ahead.is_empty()
            && ahead_waiting >= self.ahead.len()
            && (!others_waiting || self.passed_over < MAX_PASSED_OVER)
        {
            return Some(if others_waiting { Take::Ahead } else { Take::All });
        }
        (self.pending.len() >= self.joined).then_some(Take::All)
    }

    /// Removes the blocks `take` runs.
    fn take(&mut self, take: Take) -> Vec<Pending> {
        match take {
            Take::All => {
                self.passed_over = 0;
                std::mem::take(&mut self.pending)
            }
            Take::Ahead => {
                self.passed_over += 1;
                self.counters.passed_over += 1;
                let (ahead, rest) = std::mem::take(&mut self.pending).into_iter().partition(|p| p.ahead);
                self.pending = rest;
                ahead
            }
        }
    }
}

/// One backend shared by several decodes, whose forwards it packs.
pub struct ForwardBatcher {
    backend: Mutex<Box<dyn Backend>>,
    config: ModelConfig,
    name: String,
    cost: Option<CostProfile>,
    state: Mutex<BatchState>,
    turn: Condvar,
}

impl ForwardBatcher {
    /// Shares `backend` (its [`Backend::forward_batch`] decides how packed a batch really runs).
    pub fn new(backend: Box<dyn Backend>) -> Arc<Self> {
        Arc::new(ForwardBatcher {
            config: backend.config().clone(),
            name: backend.name(),
            cost: backend.cost_profile(),
            backend: Mutex::new(backend),
            state: Mutex::default(),
            turn: Condvar::new(),
        })
    }

    /// A backend handle for one decoding thread.
    pub fn member(self: &Arc<Self>) -> BatchMember {
        BatchMember { batcher: Arc::clone(self) }
    }

    /// Takes part in batches until the guard is dropped: from now on no packed forward runs
    /// without this decode's next block (unless decodes going ahead pass it over). Join for
    /// exactly the length of a run, on the thread that decodes it: the guard stays on that thread.
    pub fn join(self: &Arc<Self>) -> Joined {
        self.lock().joined += 1;
        Joined { batcher: Arc::clone(self), thread: std::thread::current().id(), _on_this_thread: PhantomData }
    }

    /// Packing so far.
    pub fn counters(&self) -> BatchCounters {
        self.lock().counters
    }

    fn lock(&self) -> MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one block and waits for its result, running the packed forward itself when it is
    /// the last block the batch waits for.
    fn submit(&self, req: &ForwardRequest, mut cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let ahead = st.ahead.contains(&std::thread::current().id());
        st.pending.push(Pending {
            ticket,
            tokens: req.tokens.to_vec(),
            positions: req.positions.to_vec(),
            logits_rows: req.logits_rows.to_vec(),
            kv: req.kv,
            // The cache travels with the block (moved, not copied) and comes back with the result.
            cache: cache.as_deref_mut().map(std::mem::take),
            ahead,
        });
        loop {
            if let Some((result, back)) = st.done.remove(&ticket) {
                drop(st);
                if let (Some(dst), Some(back)) = (cache, back) {
                    *dst = back;
                }
                return result;
            }
            if let Some(take) = st.next() {
                st.leading = true;
                let batch = st.take(take);
                drop(st);
                let results = self.run(batch);
                st = self.lock();
                st.leading = false;
                st.counters.batches += 1;
                st.counters.forwards += results.len() as u64;
                st.counters.largest = st.counters.largest.max(results.len());
                st.done.extend(results);
                self.turn.notify_all();
                continue;
            }
            st = self.turn.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Runs one packed forward; a panic inside the backend fails every sequence of the batch
    /// instead of leaving the others waiting forever.
    fn run(&self, mut batch: Vec<Pending>) -> Vec<(u64, Done)> {
        let outcome = {
            let mut backend = self.backend.lock().unwrap_or_else(|e| e.into_inner());
            let mut items: Vec<BatchItem<'_>> = batch
                .iter_mut()
                .map(|p| BatchItem {
                    req: ForwardRequest {
                        tokens: &p.tokens,
                        positions: &p.positions,
                        logits_rows: &p.logits_rows,
                        kv: p.kv,
                    },
                    cache: p.cache.as_mut(),
                })
                .collect();
            catch_unwind(AssertUnwindSafe(|| backend.forward_batch(&mut items)))
        };
        let results = match outcome {
            Ok(r) if r.len() == batch.len() => r,
            Ok(_) => batch.iter().map(|_| Err(lost("the backend answered a different number of blocks"))).collect(),
            Err(_) => batch.iter().map(|_| Err(lost("the backend panicked during a packed forward"))).collect(),
        };
        batch.into_iter().zip(results).map(|(p, r)| (p.ticket, (r, p.cache))).collect()
    }
}

fn lost(why: &str) -> EngineError {
    EngineError::Backend { backend: "batch".into(), reason: why.into() }
}

/// A decode's part in batching, for the length of its run (tied to its thread, which its
/// blocks are known by).
pub struct Joined {
    batcher: Arc<ForwardBatcher>,
    thread: ThreadId,
    _on_this_thread: PhantomData<*const ()>,
}

impl Joined {
    /// From now on (`true`) this decode's blocks go ahead of the others', or (`false`) no
    /// longer: see the module's documentation.
    pub fn go_ahead(&self, on: bool) {
        let mut st = self.batcher.lock();
        let changed = if on { st.ahead.insert(self.thread) } else { st.ahead.remove(&self.thread) };
        if changed {
            // Whether a packed forward can run depends on who goes ahead.
            self.batcher.turn.notify_all();
        }
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        let mut st = self.batcher.lock();
        st.joined = st.joined.saturating_sub(1);
        st.ahead.remove(&self.thread);
        // The others may have been waiting only for this decode.
        self.batcher.turn.notify_all();
    }
}

/// The [`Backend`] one decoding thread holds: its forwards go through the shared batcher.
pub struct BatchMember {
    batcher: Arc<ForwardBatcher>,
}

impl BatchMember {
    /// The batcher this member's forwards go through.
    pub fn batcher(&self) -> &Arc<ForwardBatcher> {
        &self.batcher
    }
}

impl Backend for BatchMember {
    fn name(&self) -> String {
        self.batcher.name.clone()
    }
    fn config(&self) -> &ModelConfig {
        &self.batcher.config
    }
    fn new_cache(&self, capacity: usize) -> KvCache {
        self.batcher.backend.lock().unwrap_or_else(|e| e.into_inner()).new_cache(capacity)
    }
    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        self.batcher.submit(req, cache)
    }
    fn cost_profile(&self) -> Option<CostProfile> {
        self.batcher.cost.clone()
    }
}
