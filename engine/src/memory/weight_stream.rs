//! Weight streaming for a real forward: the matrices a [`MemoryPlan`] swaps in are copied by a
//! staging thread into one of two slots while the previous layer computes, and the layer then
//! computes from those copies (not from the resident weights), so the copy is on the data path.
//!
//! Two slots, handed back and forth with credits: the thread fills slot B with layer i+1 while
//! layer i computes from slot A, and may start on layer i+2 only once layer i has released A.
//! Copies hold the same bytes, so outputs are bit-identical to the resident forward.

use std::sync::mpsc;
use std::time::Instant;

use crate::error::{EngineError, Result};
use crate::kernels::linear::Linear;
use crate::model::transformer::LayerSource;
use crate::model::weights::{LayerMatrix, LayerWeights};
use crate::model::{ForwardOutput, ForwardRequest, KvCache, Transformer};

use super::graph::{BufferClass, LayerGraph};
use super::plan::MemoryPlan;
use super::staging::{overlap, WallSpan};

/// Staging slots of the double buffer.
pub const SLOTS: usize = 2;

/// Which weights a forward streams, derived from a memory plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPlan {
    /// Per layer, the matrices swapped in for it (empty = fully resident).
    pub layers: Vec<Vec<LayerMatrix>>,
    /// Whether the LM head is swapped in.
    pub head: bool,
}

impl StreamPlan {
    /// The weights `plan` streams for `graph`, grouped by layer (vectors such as norm gains are
    /// ignored: a few KB that a real runtime keeps resident).
    pub fn from_memory_plan(graph: &LayerGraph, plan: &MemoryPlan, n_layers: usize) -> Self {
        let mut out = StreamPlan { layers: vec![Vec::new(); n_layers], head: false };
        for ids in &plan.per_op_streamed {
            for &b in ids {
                let Some(buf) = graph.buffers.get(b) else { continue };
                if buf.class != BufferClass::Weight {
                    continue;
                }
                if buf.name == "lm_head" {
                    out.head = true;
                } else if let Some((l, m)) = LayerMatrix::from_buffer_name(&buf.name) {
                    if let Some(v) = out.layers.get_mut(l) {
                        if !v.contains(&m) {
                            v.push(m);
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether nothing is streamed (the forward can read resident weights only).
    pub fn is_empty(&self) -> bool {
        !self.head && self.layers.iter().all(Vec::is_empty)
    }

    fn items(&self) -> Vec<StageItem> {
        let mut v: Vec<StageItem> = self
            .layers
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(l, m)| StageItem::Layer(l, m.clone()))
            .collect();
        if self.head {
            v.push(StageItem::Head);
        }
        v
    }
}

/// What a streamed forward moved and how much of the copying hid behind compute (measured).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StreamReport {
    /// Bytes copied into staging slots.
    pub bytes: u64,
    /// Slot fills (one per streamed layer, plus the head).
    pub remaps: usize,
    /// Copy intervals on the staging thread: (layer index, `n_layers` for the head, span).
    pub copy_spans: Vec<(usize, WallSpan)>,
    /// Compute intervals of every layer (and the head) on the caller's thread.
    pub compute_spans: Vec<(usize, WallSpan)>,
    /// Total copy seconds.
    pub copy_s: f64,
    /// Total compute seconds.
    pub compute_s: f64,
    /// Copy seconds that ran while a layer computed.
    pub overlap_s: f64,
    /// Wall seconds of the forward.
    pub wall_s: f64,
    /// Most slots ever filled or in use at once (never above [`SLOTS`]).
    pub max_slots_in_use: usize,
}

impl StreamReport {
    /// Fraction of copy time hidden behind compute (1 when nothing was copied).
    pub fn overlap_fraction(&self) -> f64 {
        if self.copy_s > 0.0 {
            (self.overlap_s / self.copy_s).min(1.0)
        } else {
            1.0
        }
    }
}

#[derive(Debug, Clone)]
enum StageItem {
    Layer(usize, Vec<LayerMatrix>),
    Head,
}

enum Staged {
    /// Layer index, its weights with the streamed matrices copied, bytes copied.
    Layer(usize, Box<LayerWeights>, u64),
    Head(Box<Linear>),
}

struct Filled {
    staged: Staged,
    span: WallSpan,
}

/// Runs `model`'s forward with the weights of `plan` streamed through the double buffer.
pub fn forward_streamed(
    model: &Transformer,
    req: &ForwardRequest,
    cache: Option<&mut KvCache>,
    plan: &StreamPlan,
) -> Result<(ForwardOutput, StreamReport)> {
    let t0 = Instant::now();
    let items = plan.items();
    let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(SLOTS);
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Filled>(SLOTS);
    for _ in 0..SLOTS {
        credit_tx.send(()).map_err(|_| lost())?;
    }
    let in_use = std::sync::atomic::AtomicUsize::new(0);
    let max_in_use = std::sync::atomic::AtomicUsize::new(0);
    let weights = &model.weights;
    std::thread::scope(|s| {
        let in_use = &in_use;
        let max_in_use = &max_in_use;
        let stager = std::thread::Builder::new()
            .name("vnpu-weight-staging".into())
            .spawn_scoped(s, move || {
                use std::sync::atomic::Ordering::SeqCst;
                for item in items {
                    // Wait for a free slot: at most SLOTS staged copies exist at once.
                    if credit_rx.recv().is_err() {
                        return;
                    }
                    let now = in_use.fetch_add(1, SeqCst) + 1;
                    max_in_use.fetch_max(now, SeqCst);
                    let start = t0.elapsed().as_secs_f64();
                    let staged = match item {
                        StageItem::Layer(l, mats) => match weights.layers.get(l) {
                            Some(layer) => {
                                let (copy, bytes) = layer.staged_copy(&mats);
                                Staged::Layer(l, Box::new(copy), bytes)
                            }
                            None => return,
                        },
                        StageItem::Head => Staged::Head(Box::new(weights.lm_head.staged_copy())),
                    };
                    let span = WallSpan { start, end: t0.elapsed().as_secs_f64() };
                    if ready_tx.send(Filled { staged, span }).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| EngineError::Backend { backend: "vnpu".into(), reason: format!("staging thread: {e}") })?;
        let mut source = StreamedLayers {
            weights,
            plan,
            ready: ready_rx,
            credits: credit_tx,
            in_use,
            t0,
            report: StreamReport::default(),
        };
        let out = model.forward_with(req, cache, &mut source);
        // Unblock the stager if the forward stopped early (an error), then wait for it.
        let StreamedLayers { ready, credits, mut report, .. } = source;
        drop(ready);
        drop(credits);
        stager.join().map_err(|_| lost())?;
        let out = out?;
        report.wall_s = t0.elapsed().as_secs_f64();
        report.copy_s = report.copy_spans.iter().map(|(_, s)| s.end - s.start).sum();
        report.compute_s = report.compute_spans.iter().map(|(_, s)| s.end - s.start).sum();
        report.overlap_s = overlap(&report.copy_spans, &report.compute_spans);
        report.max_slots_in_use = max_in_use.load(std::sync::atomic::Ordering::SeqCst);
        Ok((out, report))
    })
}

fn lost() -> EngineError {
    EngineError::Backend { backend: "vnpu".into(), reason: "weight staging thread stopped".into() }
}

/// The compute side: resident layers in place, streamed ones from the slots in order.
struct StreamedLayers<'a> {
    weights: &'a crate::model::weights::ModelWeights,
    plan: &'a StreamPlan,
    ready: mpsc::Receiver<Filled>,
    credits: mpsc::SyncSender<()>,
    in_use: &'a std::sync::atomic::AtomicUsize,
    t0: Instant,
    report: StreamReport,
}

impl StreamedLayers<'_> {
    fn next_filled(&mut self) -> Result<Filled> {
        let f = self.ready.recv().map_err(|_| lost())?;
        self.report.remaps += 1;
        let l = match &f.staged {
            Staged::Layer(l, ..) => *l,
            Staged::Head(_) => self.weights.layers.len(),
        };
        self.report.copy_spans.push((l, f.span));
        Ok(f)
    }
    fn release(&mut self, bytes: u64) {
        self.report.bytes += bytes;
        self.in_use.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        // The stager may have finished (no more items): a closed channel is fine here.
        let _ = self.credits.try_send(());
    }
    fn timed(&mut self, idx: usize, f: impl FnOnce() -> Result<f64>) -> Result<f64> {
        let start = self.t0.elapsed().as_secs_f64();
        let r = f();
        self.report.compute_spans.push((idx, WallSpan { start, end: self.t0.elapsed().as_secs_f64() }));
        r
    }
}

impl LayerSource for StreamedLayers<'_> {
    fn with_layer(&mut self, li: usize, f: &mut dyn FnMut(&LayerWeights) -> Result<f64>) -> Result<f64> {
        let resident =
            self.weights.layers.get(li).ok_or_else(|| EngineError::InvalidRequest(format!("no layer {li}")))?;
        if self.plan.layers.get(li).is_none_or(Vec::is_empty) {
            return self.timed(li, || f(resident));
        }
        let filled = self.next_filled()?;
        let Staged::Layer(l, layer, bytes) = filled.staged else {
            return Err(EngineError::Backend {
                backend: "vnpu".into(),
                reason: format!("staged head arrived for layer {li}"),
            });
        };
        if l != li {
            return Err(EngineError::Backend {
                backend: "vnpu".into(),
                reason: format!("staged layer {l} arrived for {li}"),
            });
        }
        let r = self.timed(li, || f(&layer));
        drop(layer);
        self.release(bytes);
        r
    }
    fn with_head(&mut self, f: &mut dyn FnMut(&Linear) -> Result<f64>) -> Result<f64> {
        let idx = self.weights.layers.len();
        if !self.plan.head {
            return self.timed(idx, || f(&self.weights.lm_head));
        }
        let filled = self.next_filled()?;
        let Staged::Head(head) = filled.staged else {
            return Err(EngineError::Backend {
                backend: "vnpu".into(),
                reason: "staged layer arrived for the head".into(),
            });
        };
        let bytes = head.bytes() as u64;
        let r = self.timed(idx, || f(&head));
        drop(head);
        self.release(bytes);
        r
    }
}
