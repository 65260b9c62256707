//! A bounded first-in first-out queue between the HTTP handlers and a model's decoding slots.
//! The slots block on it (they are plain threads, not async tasks); handlers never wait on it:
//! a full queue is answered at once (429) and a closed one means the server is shutting down.
//! The bound counts the jobs no idle slot is about to take, so requests arriving together while
//! slots are free are never refused because the slots had not woken yet.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Why a job was not queued; the job comes back.
#[derive(Debug)]
pub enum PushError<T> {
    Full(T),
    Closed(T),
}

/// Jobs waiting for one worker.
pub struct JobQueue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    capacity: usize,
}

struct State<T> {
    jobs: VecDeque<T>,
    closed: bool,
    /// Consumers blocked in `pop` (each takes one of the jobs pushed meanwhile).
    idle: usize,
}

impl<T> JobQueue<T> {
    /// A queue holding at most `capacity` waiting jobs (those being run, or about to be taken by
    /// an idle consumer, are not counted).
    pub fn new(capacity: usize) -> Self {
        let state = State { jobs: VecDeque::new(), closed: false, idle: 0 };
        JobQueue { state: Mutex::new(state), ready: Condvar::new(), capacity }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic elsewhere while holding the lock leaves the queue itself intact.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a job at the back; returns how many jobs wait ahead of it.
    pub fn push(&self, job: T) -> Result<usize, PushError<T>> {
        let mut s = self.lock();
        if s.closed {
            return Err(PushError::Closed(job));
        }
        if s.jobs.len() >= self.capacity + s.idle {
            return Err(PushError::Full(job));
        }
        let ahead = s.jobs.len();
        s.jobs.push_back(job);
        drop(s);
        self.ready.notify_one();
        Ok(ahead)
    }

    /// The oldest job, waiting for one; `None` once the queue is closed.
    pub fn pop(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(job) = s.jobs.pop_front() {
                return Some(job);
            }
            s.idle += 1;
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
            s.idle -= 1;
        }
    }

    /// Closes the queue and hands back the jobs still waiting; the worker's `pop` returns `None`.
    pub fn close(&self) -> Vec<T> {
        let mut s = self.lock();
        s.closed = true;
        let left = s.jobs.drain(..).collect();
        drop(s);
        self.ready.notify_all();
        left
    }

    /// Removes the waiting jobs `gone` says are no longer wanted; returns how many.
    pub fn remove_where(&self, gone: impl Fn(&T) -> bool) -> usize {
        let mut s = self.lock();
        let before = s.jobs.len();
        s.jobs.retain(|j| !gone(j));
        before - s.jobs.len()
    }

    /// Jobs waiting.
    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    /// How many jobs may wait.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn first_in_first_out_bounded_then_closed() {
        let q = JobQueue::new(2);
        assert_eq!(q.push(1).ok(), Some(0));
        assert_eq!(q.push(2).ok(), Some(1));
        assert!(matches!(q.push(3), Err(PushError::Full(3))));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.push(4).ok(), Some(1));
        assert_eq!(q.remove_where(|j| *j == 2), 1);
        assert_eq!(q.push(6).ok(), Some(1));
        assert_eq!(q.close(), vec![4, 6]);
        assert!(matches!(q.push(5), Err(PushError::Closed(5))));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn idle_consumers_take_jobs_beyond_the_capacity() {
        let q = Arc::new(JobQueue::new(1));
        let (took, took_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (q, took, release_rx) = (q.clone(), took.clone(), release_rx.clone());
                std::thread::spawn(move || {
                    // One job each, then hold it (a slot busy decoding).
                    let job = q.pop();
                    took.send(job).expect("send");
                    let _ = release_rx.lock().expect("lock").recv();
                })
            })
            .collect();
        while q.lock().idle < 2 {
            std::thread::yield_now();
        }
        // Three arrive at once: two for the idle consumers, one waits; a fourth is refused
        // whether or not the consumers have woken yet.
        for j in 0..3 {
            assert!(q.push(j).is_ok(), "job {j} refused with idle consumers");
        }
        assert!(matches!(q.push(3), Err(PushError::Full(3))));
        let mut got: Vec<i32> = (0..2).map(|_| took_rx.recv().expect("took").expect("a job")).collect();
        got.sort();
        assert_eq!(got, vec![0, 1]);
        assert_eq!(q.len(), 1);
        assert!(matches!(q.push(4), Err(PushError::Full(4))));
        drop(release);
        for c in consumers {
            c.join().expect("consumer");
        }
    }

    #[test]
    fn a_waiting_worker_wakes_on_push_and_on_close() {
        let q = Arc::new(JobQueue::new(4));
        let worker = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Some(j) = q.pop() {
                    got.push(j);
                }
                got
            })
        };
        for j in 0..3 {
            while q.push(j).is_err() {
                std::thread::yield_now();
            }
        }
        while q.len() > 0 {
            std::thread::yield_now();
        }
        q.close();
        assert_eq!(worker.join().expect("worker"), vec![0, 1, 2]);
    }
}
