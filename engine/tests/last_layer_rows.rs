//! The last layer runs only the rows whose logits are asked for: the logits of those rows and
//! the K/V every row writes are what a forward asking for every row gives, for less work.

use std::path::Path;

use unmask_engine::model::{load_model, ForwardRequest, KvCache, KvMode, Transformer};

fn transformer(name: &str) -> Transformer {
    load_model(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(name)).unwrap().transformer
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A cache holding a `prefix`-token prompt, then a forward of `block` tokens after it asking for
/// `rows`; returns the forward's output and the cache it wrote.
fn run(
    m: &Transformer,
    prefix: usize,
    block: usize,
    rows: &[usize],
) -> (unmask_engine::model::ForwardOutput, KvCache) {
    let vocab = m.config.vocab as u32;
    let tok = |i: usize| (i as u32 * 37 + 11) % vocab;
    let mut kc = m.new_cache(64);
    let pre: Vec<u32> = (0..prefix).map(tok).collect();
    let pre_pos: Vec<usize> = (0..prefix).collect();
    m.forward(&ForwardRequest { tokens: &pre, positions: &pre_pos, logits_rows: &[], kv: KvMode::ReadWrite }, Some(&mut kc))
        .unwrap();
    let blk: Vec<u32> = (prefix..prefix + block).map(tok).collect();
    let pos: Vec<usize> = (prefix..prefix + block).collect();
    let out = m
        .forward(&ForwardRequest { tokens: &blk, positions: &pos, logits_rows: rows, kv: KvMode::ReadWrite }, Some(&mut kc))
        .unwrap();
    (out, kc)
}

fn check(name: &str) {
    let m = transformer(name);
    let (prefix, block) = (10, 12);
    let all: Vec<usize> = (0..block).collect();
    let (full, full_kc) = run(&m, prefix, block, &all);
    // Out of order, with a repeat: each asked row gets its own logits.
    let some = [7usize, 0, 11, 7];
    let (part, part_kc) = run(&m, prefix, block, &some);
    assert_eq!(part.rows, some);
    for (i, &r) in some.iter().enumerate() {
        let d = max_abs_diff(part.row(i), full.row(r));
        assert!(d <= 1e-5, "{name}: row {r} differs by {d}");
    }
    let (none, none_kc) = run(&m, prefix, block, &[]);
    assert!(none.logits.is_empty());
    for kc in [&part_kc, &none_kc] {
        for li in 0..m.config.n_layers {
            for p in 0..prefix + block {
                assert!(kc.is_valid(p), "{name}: position {p} not written");
                assert!(max_abs_diff(&kc.k_row(li, p), &full_kc.k_row(li, p)) <= 1e-6, "{name}: K layer {li} pos {p}");
                assert!(max_abs_diff(&kc.v_row(li, p), &full_kc.v_row(li, p)) <= 1e-6, "{name}: V layer {li} pos {p}");
            }
        }
    }
    // Less work for fewer rows: the LM head's and, in the last layer, all but the K/V.
    let (c, n) = (&m.config, block as f64);
    let head = 2.0 * (c.hidden * c.vocab) as f64;
    assert!(part.flops + 1.0 < full.flops - (n - 4.0) * head, "{name}: {} vs {}", part.flops, full.flops);
    assert!(none.flops < part.flops, "{name}: {} vs {}", none.flops, part.flops);
}

#[test]
fn fewer_logits_rows_give_the_same_logits_and_cache_for_less_work() {
    check("tiny-llada");
    check("tiny-ar");
    check("tiny-llada-moe");
}
