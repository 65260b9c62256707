//! Live denoising canvas in the terminal: redrawn after every step. Masked positions show as `▒`,
//! visible (revisable) tokens in yellow, stable tokens coloured by confidence (green ≥ 0.9,
//! default ≥ 0.5, red below), speculative drafts of later blocks dim and underlined, revised
//! tokens bold. Speculative AR decoding (`--draft`): accepted drafts cyan, and a draft the target
//! refused struck through in red before the token the target wrote instead (`~draft~` without
//! colour).

use std::io::Write;

use unmask_engine::decode::{StepFrame, TokenState};
use unmask_engine::model::TextTokenizer;

/// The generated region as the terminal shows it.
pub struct LiveCanvas<'a> {
    tokenizer: &'a TextTokenizer,
    prompt_len: usize,
    tokens: Vec<u32>,
    states: Vec<TokenState>,
    conf: Vec<f32>,
    speculative: Vec<bool>,
    revised: Vec<bool>,
    rejected_draft: Vec<Option<u32>>,
    special: Vec<u32>,
    lines_drawn: usize,
    width: usize,
    color: bool,
}

impl<'a> LiveCanvas<'a> {
    /// A canvas of `gen_length` masked positions after a prompt of `prompt_len` tokens.
    pub fn new(tokenizer: &'a TextTokenizer, prompt_len: usize, gen_length: usize, mask_id: u32, special: Vec<u32>) -> Self {
        let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(80usize).max(20);
        LiveCanvas {
            tokenizer,
            prompt_len,
            tokens: vec![mask_id; gen_length],
            states: vec![TokenState::Masked; gen_length],
            conf: vec![0.0; gen_length],
            speculative: vec![false; gen_length],
            revised: vec![false; gen_length],
            rejected_draft: vec![None; gen_length],
            special,
            lines_drawn: 0,
            width,
            color: std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// Applies a frame's deltas.
    pub fn apply(&mut self, f: &StepFrame) {
        for c in &f.changes {
            let Some(i) = c.pos.checked_sub(self.prompt_len) else { continue };
            if i >= self.tokens.len() {
                continue;
            }
            self.tokens[i] = c.token;
            self.states[i] = c.state;
            self.conf[i] = c.confidence;
            self.speculative[i] = c.speculative;
            self.revised[i] |= c.revised;
            self.rejected_draft[i] = c.rejected_draft;
        }
    }

    fn cell_text(&self, i: usize) -> String {
        match self.states[i] {
            // A speculative draft of a later block: shown, but it is still a mask.
            TokenState::Masked if self.speculative[i] => self.tokenizer.token_text(self.tokens[i]).replace('\n', "↵"),
            TokenState::Masked => "▒".into(),
            _ if self.special.contains(&self.tokens[i]) => "·".into(),
            _ => self.tokenizer.token_text(self.tokens[i]).replace('\n', "↵"),
        }
    }

    fn style(&self, i: usize) -> &'static str {
        if !self.color {
            return "";
        }
        match self.states[i] {
            TokenState::Masked if self.speculative[i] => "\x1b[2;4m",
            TokenState::Masked => "\x1b[2m",
            TokenState::Visible => "\x1b[33m",
            TokenState::Stable if self.revised[i] => "\x1b[1m",
            TokenState::Stable if self.speculative[i] => "\x1b[36m",
            TokenState::Stable if self.conf[i] >= 0.9 => "\x1b[32m",
            TokenState::Stable if self.conf[i] >= 0.5 => "",
            TokenState::Stable => "\x1b[31m",
        }
    }

    /// Redraws the status line and the canvas in place.
    pub fn draw(&mut self, out: &mut impl Write, f: &StepFrame) -> std::io::Result<()> {
        let committed = self.states.iter().filter(|s| **s != TokenState::Masked).count();
        let mean_conf = {
            let c: Vec<f32> = f.changes.iter().filter(|c| c.state != TokenState::Masked).map(|c| c.confidence).collect();
            if c.is_empty() { 0.0 } else { c.iter().sum::<f32>() / c.len() as f32 }
        };
        let mut status = format!(
            "step {:>3} · block {}–{} · {committed}/{} committed · window {} · conf {:.2} · {:.0} ms",
            f.step + 1,
            f.block.0.saturating_sub(self.prompt_len),
            f.block.1.saturating_sub(self.prompt_len),
            self.tokens.len(),
            f.forward_tokens,
            mean_conf,
            f.step_wall_s * 1e3
        );
        if let Some(s) = f.simulated_s {
            status.push_str(&format!(" · {:.1} ms simulated", s * 1e3));
        }
        // Lay the cells out into lines of the terminal width (counting visible characters only).
        let mut lines: Vec<String> = vec![String::new()];
        let mut col = 0usize;
        for i in 0..self.tokens.len() {
            let text = self.cell_text(i);
            let refused = self.rejected_draft[i].map(|t| {
                if self.special.contains(&t) { "·".into() } else { self.tokenizer.token_text(t).replace('\n', "↵") }
            });
            let w = text.chars().count() + refused.as_ref().map_or(0, |r| r.chars().count() + if self.color { 0 } else { 2 });
            if col + w > self.width && col > 0 {
                lines.push(String::new());
                col = 0;
            }
            let style = self.style(i);
            let line = lines.last_mut().expect("lines is never empty");
            if let Some(r) = &refused {
                if self.color {
                    line.push_str(&format!("\x1b[9;31m{r}\x1b[0m"));
                } else {
                    line.push_str(&format!("~{r}~"));
                }
            }
            if style.is_empty() {
                line.push_str(&text);
            } else {
                line.push_str(style);
                line.push_str(&text);
                line.push_str("\x1b[0m");
            }
            col += w;
        }
        if self.lines_drawn > 0 {
            write!(out, "\x1b[{}A\r\x1b[J", self.lines_drawn)?;
        }
        let status_line: String = status.chars().take(self.width).collect();
        writeln!(out, "{}{status_line}{}", if self.color { "\x1b[2m" } else { "" }, if self.color { "\x1b[0m" } else { "" })?;
        for l in &lines {
            writeln!(out, "{l}")?;
        }
        self.lines_drawn = 1 + lines.len();
        out.flush()
    }

    /// Removes the canvas from the screen (before printing the final answer).
    pub fn clear(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.lines_drawn > 0 {
            write!(out, "\x1b[{}A\r\x1b[J", self.lines_drawn)?;
            self.lines_drawn = 0;
        }
        out.flush()
    }
}
