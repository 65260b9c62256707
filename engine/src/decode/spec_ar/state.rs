//! The two sides of speculative decoding and what they keep: the drafter's own sequence and
//! K/V (it runs ahead of what is committed), and the verifier's committed sequence, K/V and the
//! target distribution for the next position when the last call left it.

use rand_chacha::ChaCha8Rng;

use super::accept::{entropy, judge, pick, probability_of, token_distribution, Verdict};
use crate::backend::Backend;
use crate::decode::ar::ArPrefixCache;
use crate::decode::denoise::to_rows;
use crate::decode::settings::DecodeSettings;
use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvCache, KvMode};

/// One drafted token with what verification needs of it.
#[derive(Debug, Clone)]
pub struct Draft {
    /// Absolute position it was drafted for.
    pub pos: usize,
    pub token: u32,
    /// Hash of every token before `pos` in the drafter's view: a draft is usable only while the
    /// committed sequence still starts that way.
    pub parent: u64,
    /// The draft's distribution it was drawn from (sampled decoding only).
    pub q: Option<Vec<f64>>,
    /// Entropy of that distribution, nats.
    pub entropy: f64,
}

/// Hash chain over a token sequence: `chain[i]` covers `tokens[..i]`.
#[derive(Debug, Clone)]
pub struct PrefixHashes(Vec<u64>);

impl PrefixHashes {
    pub fn of(tokens: &[u32]) -> Self {
        let mut h = PrefixHashes(vec![0xcbf2_9ce4_8422_2325]);
        tokens.iter().for_each(|&t| h.push(t));
        h
    }
    pub fn push(&mut self, token: u32) {
        let last = *self.0.last().unwrap_or(&0);
        self.0.push(Self::step(last, token));
    }
    /// The hash after `token` follows a prefix hashed `prev` (FNV-1a over its bytes, chained).
    pub fn step(prev: u64, token: u32) -> u64 {
        let mut x = prev;
        for b in token.to_le_bytes() {
            x ^= b as u64;
            x = x.wrapping_mul(0x0100_0000_01b3);
        }
        x
    }
    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len + 1);
    }
    /// Hash of the first `len` tokens.
    pub fn at(&self, len: usize) -> u64 {
        self.0[len]
    }
}

/// The drafting side: a draft model, its K/V and its view of the sequence (committed tokens
/// followed by its own unverified drafts).
pub struct Drafter<'a> {
    backend: &'a mut dyn Backend,
    cache: KvCache,
    seq: Vec<u32>,
    hashes: PrefixHashes,
    /// K/V valid for positions `..fed`.
    fed: usize,
    positions: Vec<usize>,
    /// Draft model forwards run.
    pub forwards: usize,
}

impl<'a> Drafter<'a> {
    pub fn new(backend: &'a mut dyn Backend, prompt: &[u32], capacity: usize, reuse: &mut ArPrefixCache) -> Self {
        let (cache, fed) = reuse.take_for(backend, prompt, capacity);
        Drafter {
            backend,
            cache,
            seq: prompt.to_vec(),
            hashes: PrefixHashes::of(prompt),
            fed,
            positions: (0..capacity).collect(),
            forwards: 0,
        }
    }

    /// Tokens in the drafter's view (committed and drafted).
    pub fn view_len(&self) -> usize {
        self.seq.len()
    }

    /// Drafts the next token: forwards what the draft model has not seen yet, takes the last
    /// row and draws from it.
    pub fn draft(&mut self, settings: &DecodeSettings, rng: &mut ChaCha8Rng) -> Result<Draft> {
        if self.fed == self.seq.len() {
            // Everything is in the K/V but the last token's logits are gone (a cut): refeed it.
            self.fed -= 1;
            self.cache.invalidate_from(self.fed);
        }
        let (start, end) = (self.fed, self.seq.len());
        if end >= self.positions.len() {
            return Err(EngineError::InvalidRequest("draft ran past the cache capacity".into()));
        }
        let n = end - start;
        let req = ForwardRequest {
            tokens: &self.seq[start..end],
            positions: &self.positions[start..end],
            logits_rows: &[n - 1],
            kv: KvMode::ReadWrite,
        };
        let (out, _) = self.backend.forward(&req, Some(&mut self.cache))?;
        self.forwards += 1;
        self.fed = end;
        let rows = to_rows(&out.logits, out.vocab, 1, self.backend.name())?;
        let q = token_distribution(&rows[0], settings);
        let token = pick(&q, settings, rng);
        let draft = Draft {
            pos: end,
            token,
            parent: self.hashes.at(end),
            entropy: entropy(&q),
            q: (settings.temperature != 0.0).then_some(q),
        };
        self.seq.push(token);
        self.hashes.push(token);
        Ok(draft)
    }

    /// Brings the drafter's view in line with the committed sequence `committed` (which the
    /// verifier owns): drafts that agree with it stay, the first disagreement and everything
    /// after it are dropped, and committed tokens past the drafter's view are appended.
    /// Returns how many drafted tokens were discarded.
    pub fn sync_to(&mut self, committed: &[u32]) -> usize {
        let agree = self.seq.iter().zip(committed).take_while(|(a, b)| a == b).count();
        let mut discarded = 0;
        if agree < committed.len() {
            discarded = self.seq.len() - agree;
            self.seq.truncate(agree);
            self.hashes.truncate(agree);
            for &t in &committed[agree..] {
                self.seq.push(t);
                self.hashes.push(t);
            }
            if self.fed > agree {
                self.fed = agree;
                self.cache.invalidate_from(agree);
            }
        }
        discarded
    }

    /// The K/V, how many leading tokens of the sequence it holds, and the sequence.
    pub fn into_cache(self) -> (KvCache, usize, Vec<u32>) {
        (self.cache, self.fed, self.seq)
    }

    /// Forgets drafts past `len` (the drafter's own early drop).
    pub fn truncate(&mut self, len: usize) {
        if len < self.seq.len() {
            self.seq.truncate(len);
            self.hashes.truncate(len);
            if self.fed > len {
                self.fed = len;
                self.cache.invalidate_from(len);
            }
        }
    }
}

/// What one verification did.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    /// Drafts accepted (a prefix of those offered).
    pub accepted: usize,
    /// Drafts offered.
    pub offered: usize,
    /// Tokens appended to the committed sequence: the accepted drafts, then the replacement
    /// of the first rejected one or the bonus token.
    pub emitted: Vec<u32>,
    /// Probability of each emitted token under the target.
    pub confidence: Vec<f32>,
    /// The draft the verifier refused (its position's emitted token replaced it), if any.
    pub rejected_draft: Option<u32>,
    /// Tokens in the target forward.
    pub forward_tokens: usize,
    pub wall_s: f64,
    pub simulated_s: Option<f64>,
}

/// The verifying side: the target model, its K/V and the committed sequence.
pub struct Verifier<'a> {
    backend: &'a mut dyn Backend,
    cache: KvCache,
    /// Prompt followed by every committed generated token.
    pub seq: Vec<u32>,
    hashes: PrefixHashes,
    /// K/V valid for positions `..fed`.
    fed: usize,
    /// Target distribution for position `seq.len()`, when the last call computed it.
    next: Option<Vec<f64>>,
    positions: Vec<usize>,
    /// Target forwards run.
    pub forwards: usize,
}

impl<'a> Verifier<'a> {
    /// A verifier starting from the K/V `reuse` kept of an earlier prompt, where it applies.
    pub fn new(backend: &'a mut dyn Backend, prompt: &[u32], capacity: usize, reuse: &mut ArPrefixCache) -> Self {
        let (cache, fed) = reuse.take_for(backend, prompt, capacity);
        Verifier {
            backend,
            cache,
            seq: prompt.to_vec(),
            hashes: PrefixHashes::of(prompt),
            fed,
            next: None,
            positions: (0..capacity).collect(),
            forwards: 0,
        }
    }

    /// Whether `d` continues the committed sequence.
    pub fn continues(&self, d: &Draft) -> bool {
        d.pos == self.seq.len() && d.parent == self.hashes.at(self.seq.len())
    }

    /// Runs the target on the unfed committed tokens followed by `drafts` (which must continue
    /// the committed sequence one after another), judges the drafts in order, commits the
    /// accepted ones and the replacement of the first rejected one. With every draft accepted
    /// it emits a bonus token when `bonus` (synchronous schedules) or keeps the target's
    /// distribution for the next position for the next call (a drafter running ahead).
    pub fn verify(&mut self, drafts: &[Draft], bonus: bool, settings: &DecodeSettings, rng: &mut ChaCha8Rng) -> Result<Verified> {
        let t0 = std::time::Instant::now();
        if self.next.is_none() && self.fed == self.seq.len() {
            // The distribution for the next position is gone (a cut): refeed the last token.
            self.fed -= 1;
            self.cache.invalidate_from(self.fed);
        }
        let base = self.seq.len();
        let unfed = base - self.fed;
        let k = drafts.len();
        let mut inputs: Vec<u32> = self.seq[self.fed..].to_vec();
        inputs.extend(drafts.iter().map(|d| d.token));
        if self.fed + inputs.len() > self.positions.len() {
            return Err(EngineError::InvalidRequest("verification ran past the cache capacity".into()));
        }
        // Rows predicting positions base..=base+k: the last unfed committed token's row (unless
        // the previous call left that distribution), then one per draft.
        let first_row = if self.next.is_some() && unfed == 0 { unfed } else { unfed - 1 };
        let rows_idx: Vec<usize> = (first_row..inputs.len()).collect();
        let req = ForwardRequest {
            tokens: &inputs,
            positions: &self.positions[self.fed..self.fed + inputs.len()],
            logits_rows: &rows_idx,
            kv: KvMode::ReadWrite,
        };
        let (out, stats) = self.backend.forward(&req, Some(&mut self.cache))?;
        self.forwards += 1;
        let rows = to_rows(&out.logits, out.vocab, rows_idx.len(), self.backend.name())?;
        let mut dists: Vec<Vec<f64>> = Vec::with_capacity(k + 1);
        if first_row == unfed {
            dists.push(self.next.take().unwrap_or_default());
        }
        // Greedy judging needs only the argmax: rows stay logits (confidence computed per
        // emitted token); sampling needs the full distributions.
        let greedy = settings.temperature == 0.0;
        for r in rows {
            dists.push(if greedy { r } else { token_distribution(&r, settings) });
        }
        let conf = |row: &[f64], t: u32| -> f32 {
            if greedy {
                probability_of(row, t as usize) as f32
            } else {
                row[t as usize] as f32
            }
        };
        let mut v = Verified { offered: k, forward_tokens: inputs.len(), ..Default::default() };
        let mut rejected = None;
        for (i, d) in drafts.iter().enumerate() {
            let q = d.q.as_deref().unwrap_or(&[]);
            match judge(d.token, &dists[i], q, settings, rng) {
                Verdict::Accept => {
                    v.accepted += 1;
                    v.emitted.push(d.token);
                    v.confidence.push(conf(&dists[i], d.token));
                }
                Verdict::Reject(t) => {
                    v.emitted.push(t);
                    v.confidence.push(conf(&dists[i], t));
                    rejected = Some(i);
                    v.rejected_draft = Some(d.token);
                    break;
                }
            }
        }
        // K/V stays valid for the committed tokens fed and the accepted drafts.
        self.fed = base + v.accepted;
        self.cache.invalidate_from(self.fed);
        match rejected {
            Some(_) => self.next = None,
            None if bonus => {
                let p = &dists[k];
                let t = pick(p, settings, rng);
                v.emitted.push(t);
                v.confidence.push(conf(p, t));
                self.next = None;
            }
            None => self.next = dists.pop(),
        }
        for &t in &v.emitted {
            self.seq.push(t);
            self.hashes.push(t);
        }
        v.wall_s = t0.elapsed().as_secs_f64();
        v.simulated_s = stats.simulated_s;
        Ok(v)
    }

    /// Cuts the committed sequence back to `len` tokens (a stop token or the length limit
    /// landed inside an emitted run).
    pub fn truncate(&mut self, len: usize) {
        if len < self.seq.len() {
            self.seq.truncate(len);
            self.hashes.truncate(len);
            self.next = None;
            if self.fed > len {
                self.fed = len;
                self.cache.invalidate_from(len);
            }
        }
    }

    /// The K/V and how many leading tokens of `seq` it holds (for reuse by the next call).
    pub fn into_cache(self) -> (KvCache, usize, Vec<u32>) {
        (self.cache, self.fed, self.seq)
    }

}
