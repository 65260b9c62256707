//! Weight streaming for a real forward: the matrices a [`MemoryPlan`] swaps in are copied by a
//! staging thread into one of two fixed staging slots while the previous layer computes, and the
//! layer then computes from the slot (not from the resident weights), so the copy is on the data
//! path.
//!
//! The slots live in a [`StagingPool`] made once per backend: two layer slots and one head slot.
//! A slot's buffer for a matrix is allocated the first time that matrix streams (a one-time
//! growth, counted in [`StreamReport::allocations`]) and overwritten in place by every later fill
//! ([`Linear::copy_storage_from`]): in steady state a streamed forward allocates nothing. Slots
//! travel between the two threads through channels, so neither side can touch a slot the other is
//! using (no shared mutable memory, no `unsafe`); the thread fills slot B with layer i+1 while layer
//! i computes from slot A, and may start on layer i+2 only once layer i has handed A back.
//! Copies hold the same bytes, so outputs are bit-identical to the resident forward.

use std::sync::mpsc;
use std::time::Instant;

use crate::error::{EngineError, Result};
use crate::kernels::linear::Linear;
use crate::model::transformer::LayerSource;
use crate::model::weights::{FeedForward, LayerMatrix, LayerWeights, ModelWeights};
use crate::model::{ForwardOutput, ForwardRequest, KvCache, Transformer};

use super::graph::{BufferClass, LayerGraph};
use super::plan::MemoryPlan;
use super::spans::{overlap, WallSpan};

/// Layer staging slots of the double buffer.
pub const SLOTS: usize = 2;

const ALL_MATRICES: [LayerMatrix; 7] = [
    LayerMatrix::Q,
    LayerMatrix::K,
    LayerMatrix::V,
    LayerMatrix::O,
    LayerMatrix::Gate,
    LayerMatrix::Up,
    LayerMatrix::Down,
];

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

/// The matrices of `m` in a layer (an MoE layer's gate/up/down: one per expert).
fn linears(l: &LayerWeights, m: LayerMatrix) -> Vec<&Linear> {
    match (m, &l.ffn) {
        (LayerMatrix::Q, _) => vec![&l.wq],
        (LayerMatrix::K, _) => vec![&l.wk],
        (LayerMatrix::V, _) => vec![&l.wv],
        (LayerMatrix::O, _) => vec![&l.wo],
        (LayerMatrix::Gate, FeedForward::Dense { gate, .. }) => vec![gate],
        (LayerMatrix::Up, FeedForward::Dense { up, .. }) => vec![up],
        (LayerMatrix::Down, FeedForward::Dense { down, .. }) => vec![down],
        (LayerMatrix::Gate, FeedForward::Moe { experts, .. }) => experts.iter().map(|e| &e.gate).collect(),
        (LayerMatrix::Up, FeedForward::Moe { experts, .. }) => experts.iter().map(|e| &e.up).collect(),
        (LayerMatrix::Down, FeedForward::Moe { experts, .. }) => experts.iter().map(|e| &e.down).collect(),
    }
}

fn linears_mut(l: &mut LayerWeights, m: LayerMatrix) -> Vec<&mut Linear> {
    match (m, &mut l.ffn) {
        (LayerMatrix::Q, _) => vec![&mut l.wq],
        (LayerMatrix::K, _) => vec![&mut l.wk],
        (LayerMatrix::V, _) => vec![&mut l.wv],
        (LayerMatrix::O, _) => vec![&mut l.wo],
        (LayerMatrix::Gate, FeedForward::Dense { gate, .. }) => vec![gate],
        (LayerMatrix::Up, FeedForward::Dense { up, .. }) => vec![up],
        (LayerMatrix::Down, FeedForward::Dense { down, .. }) => vec![down],
        (LayerMatrix::Gate, FeedForward::Moe { experts, .. }) => experts.iter_mut().map(|e| &mut e.gate).collect(),
        (LayerMatrix::Up, FeedForward::Moe { experts, .. }) => experts.iter_mut().map(|e| &mut e.up).collect(),
        (LayerMatrix::Down, FeedForward::Moe { experts, .. }) => experts.iter_mut().map(|e| &mut e.down).collect(),
    }
}

/// Points `dst` at `src`'s storage without copying weight data (shared buffers: a reference-count
/// bump; the name is copied into `dst`'s existing string).
fn share(dst: &mut Linear, src: &Linear) {
    dst.name.clone_from(&src.name);
    dst.n_out = src.n_out;
    dst.k_in = src.k_in;
    dst.storage.clone_from(&src.storage);
}

fn opt_clone_from(dst: &mut Option<Vec<f32>>, src: &Option<Vec<f32>>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => d.clone_from(s),
        _ => dst.clone_from(src),
    }
}

/// One layer staging slot: the weights the layer computes from, with owned buffers for the
/// matrices it has ever streamed (parked while a fill does not stream them).
struct Slot {
    layer: LayerWeights,
    /// Per matrix (index into `ALL_MATRICES`): whether `layer` currently holds this slot's own
    /// buffers for it.
    in_place: [bool; 7],
    /// Own buffers not in use by the current fill.
    parked: [Vec<Linear>; 7],
}

impl Slot {
    fn new(template: &LayerWeights) -> Self {
        Slot { layer: template.clone(), in_place: [false; 7], parked: Default::default() }
    }

    /// Makes `layer` layer `src`'s weights with the matrices in `which` copied into own buffers.
    /// Returns (bytes copied, buffers allocated).
    fn fill(&mut self, src: &LayerWeights, which: &[LayerMatrix]) -> Result<(u64, usize)> {
        let (mut bytes, mut allocs) = (0u64, 0usize);
        for (mi, &m) in ALL_MATRICES.iter().enumerate() {
            let srcs = linears(src, m);
            let streamed = which.contains(&m);
            if streamed && !self.in_place[mi] {
                // Bring the own buffers in (allocated once, the first time this matrix streams).
                let mut dsts = linears_mut(&mut self.layer, m);
                if dsts.len() != srcs.len() {
                    return Err(mismatch("experts"));
                }
                let mut parked = std::mem::take(&mut self.parked[mi]).into_iter();
                for (d, s) in dsts.iter_mut().zip(&srcs) {
                    let own = match parked.next() {
                        Some(p) => p,
                        None => {
                            allocs += 1;
                            s.staged_copy()
                        }
                    };
                    **d = own;
                }
                self.in_place[mi] = true;
            } else if !streamed && self.in_place[mi] {
                // Park the own buffers and share the resident weights.
                let dsts = linears_mut(&mut self.layer, m);
                self.parked[mi] = dsts.into_iter().zip(&srcs).map(|(d, s)| std::mem::replace(d, (*s).clone())).collect();
                self.in_place[mi] = false;
                continue;
            }
            let dsts = linears_mut(&mut self.layer, m);
            for (d, s) in dsts.into_iter().zip(&srcs) {
                if streamed {
                    match d.copy_storage_from(s) {
                        Some(b) => bytes += b as u64,
                        None => {
                            // A layer of another shape or format: a new own buffer (allocated).
                            *d = s.staged_copy();
                            allocs += 1;
                            bytes += d.bytes() as u64;
                        }
                    }
                } else {
                    share(d, s);
                }
            }
        }
        let l = &mut self.layer;
        l.attn_norm.clone_from(&src.attn_norm);
        l.ffn_norm.clone_from(&src.ffn_norm);
        opt_clone_from(&mut l.bq, &src.bq);
        opt_clone_from(&mut l.bk, &src.bk);
        opt_clone_from(&mut l.bv, &src.bv);
        opt_clone_from(&mut l.q_norm, &src.q_norm);
        opt_clone_from(&mut l.k_norm, &src.k_norm);
        if let (FeedForward::Moe { router: d, .. }, FeedForward::Moe { router: s, .. }) = (&mut l.ffn, &src.ffn) {
            share(d, s);
        }
        Ok((bytes, allocs))
    }

    /// Bytes of the own buffers this slot holds.
    fn own_bytes(&self) -> u64 {
        let mut b = 0u64;
        for (mi, &m) in ALL_MATRICES.iter().enumerate() {
            if self.in_place[mi] {
                b += linears(&self.layer, m).iter().map(|l| l.bytes() as u64).sum::<u64>();
            }
            b += self.parked[mi].iter().map(|l| l.bytes() as u64).sum::<u64>();
        }
        b
    }
}

fn mismatch(what: &str) -> EngineError {
    EngineError::Backend { backend: "vnpu".into(), reason: format!("staging slot does not match the layer ({what})") }
}

/// The fixed staging buffers of one backend: [`SLOTS`] layer slots and one head slot, made once
/// and reused by every streamed forward.
pub struct StagingPool {
    slots: Vec<Box<Slot>>,
    head: Option<Box<Linear>>,
    /// Buffers allocated over the pool's life (one-time growth).
    allocations: usize,
}

impl std::fmt::Debug for StagingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingPool").field("bytes", &self.bytes()).field("allocations", &self.allocations).finish()
    }
}

impl StagingPool {
    /// A pool for `weights` (slot templates share layer 0's storage until their first fill).
    pub fn new(weights: &ModelWeights) -> Result<Self> {
        let template = weights.layers.first().ok_or_else(|| mismatch("no layers"))?;
        Ok(StagingPool { slots: (0..SLOTS).map(|_| Box::new(Slot::new(template))).collect(), head: None, allocations: 0 })
    }
    /// Bytes of the staging buffers the pool owns (the NPU-visible staging space it stands for).
    pub fn bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.own_bytes()).sum::<u64>() + self.head.as_ref().map_or(0, |h| h.bytes() as u64)
    }
    /// Buffers allocated so far (grows only the first time a matrix streams).
    pub fn allocations(&self) -> usize {
        self.allocations
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
    /// Most layer slots ever filled or in use at once (never above [`SLOTS`]).
    pub max_slots_in_use: usize,
    /// Staging buffers allocated during this forward (0 in steady state: slots are refilled in
    /// place).
    pub allocations: usize,
    /// Bytes of the pool's staging buffers after the forward.
    pub pool_bytes: u64,
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

enum Filled {
    /// Layer index, the slot holding it, bytes copied, buffers allocated.
    Layer(usize, Box<Slot>, u64, usize, WallSpan),
    /// The head slot, bytes copied, buffers allocated.
    Head(Box<Linear>, u64, usize, WallSpan),
}

/// Runs `model`'s forward with the weights of `plan` streamed through `pool`'s slots.
pub fn forward_streamed(
    model: &Transformer,
    req: &ForwardRequest,
    cache: Option<&mut KvCache>,
    plan: &StreamPlan,
    pool: &mut StagingPool,
) -> Result<(ForwardOutput, StreamReport)> {
    let t0 = Instant::now();
    let items = plan.items();
    let (free_tx, free_rx) = mpsc::sync_channel::<Box<Slot>>(SLOTS);
    // Room for every slot and the head: the stager never blocks on a forward that stopped early.
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Filled>(SLOTS + 1);
    for slot in pool.slots.drain(..) {
        free_tx.send(slot).map_err(|_| lost())?;
    }
    let head_buf = pool.head.take();
    let in_use = std::sync::atomic::AtomicUsize::new(0);
    let max_in_use = std::sync::atomic::AtomicUsize::new(0);
    let weights = &model.weights;
    let result = std::thread::scope(|s| {
        let in_use = &in_use;
        let max_in_use = &max_in_use;
        let stager = std::thread::Builder::new()
            .name("vnpu-weight-staging".into())
            .spawn_scoped(s, move || -> StagerEnd {
                use std::sync::atomic::Ordering::SeqCst;
                let mut head_buf = head_buf;
                let mut kept: Vec<Box<Slot>> = Vec::new();
                for item in items {
                    match item {
                        StageItem::Layer(l, mats) => {
                            // Wait for a free slot: at most SLOTS filled or in use at once.
                            let Ok(mut slot) = free_rx.recv() else { return StagerEnd { kept, head_buf, err: None, free_rx } };
                            let now = in_use.fetch_add(1, SeqCst) + 1;
                            max_in_use.fetch_max(now, SeqCst);
                            let start = t0.elapsed().as_secs_f64();
                            let Some(layer) = weights.layers.get(l) else {
                                kept.push(slot);
                                return StagerEnd { kept, head_buf, err: Some(mismatch("layer index")), free_rx };
                            };
                            let (bytes, allocs) = match slot.fill(layer, &mats) {
                                Ok(x) => x,
                                Err(e) => {
                                    kept.push(slot);
                                    return StagerEnd { kept, head_buf, err: Some(e), free_rx };
                                }
                            };
                            let span = WallSpan { start, end: t0.elapsed().as_secs_f64() };
                            if let Err(mpsc::SendError(f)) = ready_tx.send(Filled::Layer(l, slot, bytes, allocs, span)) {
                                if let Filled::Layer(_, slot, ..) = f {
                                    kept.push(slot);
                                }
                                return StagerEnd { kept, head_buf, err: None, free_rx };
                            }
                        }
                        StageItem::Head => {
                            let start = t0.elapsed().as_secs_f64();
                            let src = &weights.lm_head;
                            let (buf, bytes, allocs) = match head_buf.take() {
                                Some(mut b) => match b.copy_storage_from(src) {
                                    Some(n) => (b, n as u64, 0),
                                    None => (Box::new(src.staged_copy()), src.bytes() as u64, 1),
                                },
                                None => (Box::new(src.staged_copy()), src.bytes() as u64, 1),
                            };
                            let span = WallSpan { start, end: t0.elapsed().as_secs_f64() };
                            if let Err(mpsc::SendError(Filled::Head(b, ..))) =
                                ready_tx.send(Filled::Head(buf, bytes, allocs, span))
                            {
                                head_buf = Some(b);
                                return StagerEnd { kept, head_buf, err: None, free_rx };
                            }
                        }
                    }
                }
                StagerEnd { kept, head_buf, err: None, free_rx }
            })
            .map_err(|e| EngineError::Backend { backend: "vnpu".into(), reason: format!("staging thread: {e}") })?;
        let mut source = StreamedLayers {
            weights,
            plan,
            ready: ready_rx,
            free: Some(free_tx),
            in_use,
            t0,
            report: StreamReport::default(),
            head: None,
        };
        let out = model.forward_with(req, cache, &mut source);
        let StreamedLayers { ready, free, mut report, head, .. } = source;
        // Close the free queue so the stager stops waiting, take back every slot in flight.
        drop(free);
        let mut back: Vec<Box<Slot>> = Vec::new();
        let mut head_back = head;
        let StagerEnd { kept, head_buf: stager_head, err, free_rx } = stager.join().map_err(|_| lost())?;
        // Slots the compute side handed back after the stager finished wait in the free queue.
        while let Ok(slot) = free_rx.try_recv() {
            back.push(slot);
        }
        while let Ok(f) = ready.try_recv() {
            match f {
                Filled::Layer(_, slot, ..) => back.push(slot),
                Filled::Head(b, ..) => head_back = Some(b),
            }
        }
        back.extend(kept);
        Ok::<_, EngineError>((out, report_take(&mut report), back, head_back.or(stager_head), err))
    });
    let (out, mut report, back, head_back, err) = result?;
    pool.slots.extend(back);
    pool.head = head_back;
    if pool.slots.len() != SLOTS {
        return Err(EngineError::Backend {
            backend: "vnpu".into(),
            reason: format!("staging pool lost slots ({} of {SLOTS} returned)", pool.slots.len()),
        });
    }
    if let Some(e) = err {
        return Err(e);
    }
    let out = out?;
    pool.allocations += report.allocations;
    report.pool_bytes = pool.bytes();
    report.wall_s = t0.elapsed().as_secs_f64();
    report.copy_s = report.copy_spans.iter().map(|(_, s)| s.end - s.start).sum();
    report.compute_s = report.compute_spans.iter().map(|(_, s)| s.end - s.start).sum();
    report.overlap_s = overlap(&report.copy_spans, &report.compute_spans);
    report.max_slots_in_use = max_in_use.load(std::sync::atomic::Ordering::SeqCst);
    Ok((out, report))
}

/// What the staging thread hands back when it stops.
struct StagerEnd {
    kept: Vec<Box<Slot>>,
    head_buf: Option<Box<Linear>>,
    err: Option<EngineError>,
    free_rx: mpsc::Receiver<Box<Slot>>,
}

fn report_take(r: &mut StreamReport) -> StreamReport {
    std::mem::take(r)
}

fn lost() -> EngineError {
    EngineError::Backend { backend: "vnpu".into(), reason: "weight staging thread stopped".into() }
}

/// The compute side: resident layers in place, streamed ones from the slots in order.
struct StreamedLayers<'a> {
    weights: &'a ModelWeights,
    plan: &'a StreamPlan,
    ready: mpsc::Receiver<Filled>,
    free: Option<mpsc::SyncSender<Box<Slot>>>,
    in_use: &'a std::sync::atomic::AtomicUsize,
    t0: Instant,
    report: StreamReport,
    /// The head slot after its use (returned to the pool).
    head: Option<Box<Linear>>,
}

impl StreamedLayers<'_> {
    fn timed(&mut self, idx: usize, f: impl FnOnce() -> Result<f64>) -> Result<f64> {
        let start = self.t0.elapsed().as_secs_f64();
        let r = f();
        self.report.compute_spans.push((idx, WallSpan { start, end: self.t0.elapsed().as_secs_f64() }));
        r
    }
    fn note_fill(&mut self, idx: usize, bytes: u64, allocs: usize, span: WallSpan) {
        self.report.remaps += 1;
        self.report.bytes += bytes;
        self.report.allocations += allocs;
        self.report.copy_spans.push((idx, span));
    }
}

impl LayerSource for StreamedLayers<'_> {
    fn with_layer(&mut self, li: usize, f: &mut dyn FnMut(&LayerWeights) -> Result<f64>) -> Result<f64> {
        let resident =
            self.weights.layers.get(li).ok_or_else(|| EngineError::InvalidRequest(format!("no layer {li}")))?;
        if self.plan.layers.get(li).is_none_or(Vec::is_empty) {
            return self.timed(li, || f(resident));
        }
        let filled = self.ready.recv().map_err(|_| lost())?;
        let (l, slot, bytes, allocs, span) = match filled {
            Filled::Layer(l, slot, bytes, allocs, span) => (l, slot, bytes, allocs, span),
            Filled::Head(b, ..) => {
                self.head = Some(b);
                return Err(EngineError::Backend {
                    backend: "vnpu".into(),
                    reason: format!("staged head arrived for layer {li}"),
                });
            }
        };
        self.note_fill(l, bytes, allocs, span);
        if l != li {
            let _ = self.free.as_ref().map(|tx| tx.send(slot));
            return Err(EngineError::Backend { backend: "vnpu".into(), reason: format!("staged layer {l} arrived for {li}") });
        }
        let r = self.timed(li, || f(&slot.layer));
        self.in_use.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        // The slot is free again: hand it back for layer li + 2.
        if let Some(tx) = &self.free {
            tx.send(slot).map_err(|_| lost())?;
        }
        r
    }
    fn with_head(&mut self, f: &mut dyn FnMut(&Linear) -> Result<f64>) -> Result<f64> {
        let idx = self.weights.layers.len();
        if !self.plan.head {
            return self.timed(idx, || f(&self.weights.lm_head));
        }
        let filled = self.ready.recv().map_err(|_| lost())?;
        let Filled::Head(head, bytes, allocs, span) = filled else {
            if let (Filled::Layer(_, slot, ..), Some(tx)) = (filled, &self.free) {
                let _ = tx.send(slot);
            }
            return Err(EngineError::Backend { backend: "vnpu".into(), reason: "staged layer arrived for the head".into() });
        };
        self.note_fill(idx, bytes, allocs, span);
        let r = self.timed(idx, || f(&head));
        self.head = Some(head);
        r
    }
}
