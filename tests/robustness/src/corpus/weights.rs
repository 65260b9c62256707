//! Non-finite weights: NaN and Inf written into a weight matrix, a norm vector and the
//! embedding of the tiny LLaDA model (BF16). Loading them would only produce NaN logits and
//! text sampled from them.

use super::files::{self, Safetensors};
use super::{Corpus, Expect, Result};

const CLASS: &str = "non-finite";
const FILE: &str = "model.safetensors";
const BF16_NAN: [u8; 2] = 0x7fc0u16.to_le_bytes();
const BF16_INF: [u8; 2] = 0x7f80u16.to_le_bytes();
const BF16_NEG_INF: [u8; 2] = 0xff80u16.to_le_bytes();

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let cases: [(&str, &str, [u8; 2], usize); 6] = [
        ("weights_nan_in_matrix", "model.transformer.blocks.2.ff_out.weight", BF16_NAN, 1234),
        ("weights_inf_in_matrix", "model.transformer.blocks.2.q_proj.weight", BF16_INF, 77),
        ("weights_neg_inf_in_lm_head", "model.transformer.ff_out.weight", BF16_NEG_INF, 5000),
        ("weights_nan_in_norm", "model.transformer.blocks.0.attn_norm.weight", BF16_NAN, 3),
        ("weights_inf_in_final_norm", "model.transformer.ln_f.weight", BF16_INF, 100),
        ("weights_nan_in_embedding", "model.transformer.wte.weight", BF16_NAN, 192 * 300 + 5),
    ];
    let src = c.embedded("tiny-llada").join(FILE);
    let base = Safetensors::read(&src)?;
    for (name, tensor, value, element) in cases {
        let e = base.entry(tensor).ok_or_else(|| files::source_err(&src, format!("no tensor {tensor}")))?;
        if e.dtype != "BF16" || e.begin + 2 * element + 2 > e.end {
            return Err(files::source_err(
                &src,
                format!("{tensor} is not a BF16 tensor of more than {element} values"),
            ));
        }
        let mut s = Safetensors { header: base.header.clone(), data: base.data.clone() };
        let at = e.begin + 2 * element;
        s.data[at..at + 2].copy_from_slice(&value);
        let dir = c.model_copy("tiny-llada", &[FILE])?;
        files::write(&dir.join(FILE), &s.to_bytes())?;
        let args = c.generate(&dir);
        // The short name after `model.transformer.` is what the error must name.
        let short = tensor.trim_start_matches("model.transformer.");
        c.push(name, CLASS, args, Expect::bad_file(&[FILE, short]));
    }
    Ok(())
}
