//! Cheap checks on the wording of rejection messages: users read them, so they must be one line
//! of prose, not Rust debug output.

/// Wording problems found in one message (empty when it reads fine).
pub fn issues(message: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if message.contains('\n') || message.contains('\r') {
        out.push("multi-line");
    }
    if message.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
        out.push("control-char");
    }
    if message.contains("Some(") || has_word(message, "None") {
        out.push("debug-option");
    }
    if has_debug_call(message) {
        out.push("debug-enum");
    }
    if has_debug_struct(message) {
        out.push("debug-struct");
    }
    if message.contains("\\\"") || message.contains("[\"") {
        out.push("debug-string");
    }
    if message.chars().count() > 600 {
        out.push("too-long");
    }
    if message.trim_end().ends_with(':') {
        out.push("empty-reason");
    }
    out
}

/// A form of `message` stable across runs (numbers and temp paths blanked), to group examples.
pub fn normalise(message: &str) -> String {
    let mut s = String::with_capacity(message.len().min(200));
    let mut last_digit = false;
    for c in message.chars().take(200) {
        if c.is_ascii_digit() {
            if !last_digit {
                s.push('#');
            }
            last_digit = true;
        } else {
            s.push(c);
            last_digit = false;
        }
    }
    s
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn has_word(s: &str, word: &str) -> bool {
    s.match_indices(word).any(|(i, _)| {
        let before = s[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = s[i + word.len()..].chars().next().is_none_or(|c| !is_ident(c));
        before && after
    })
}

/// The identifier ending right before byte `end`.
fn ident_before(s: &str, end: usize) -> &str {
    let start = s[..end].char_indices().rev().take_while(|&(_, c)| is_ident(c)).last().map_or(end, |(i, _)| i);
    &s[start..end]
}

/// `Variant(` as `{:?}` prints enum values (`U32(7)`, `String("x")`).
fn has_debug_call(s: &str) -> bool {
    s.match_indices('(').any(|(i, _)| {
        let id = ident_before(s, i);
        id.len() >= 2 && id.starts_with(|c: char| c.is_ascii_uppercase()) && id != "Some"
    })
}

/// `Name { field: ` as `{:?}` prints structs.
fn has_debug_struct(s: &str) -> bool {
    s.match_indices(" { ").any(|(i, _)| {
        let id = ident_before(s, i);
        let rest = &s[i + 3..];
        let field: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        id.starts_with(|c: char| c.is_ascii_uppercase()) && !field.is_empty() && rest[field.len()..].starts_with(':')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_artefacts_are_flagged() {
        assert_eq!(issues("x: bad general.alignment U32(7)"), vec!["debug-enum"]);
        assert_eq!(issues("needs Some(48) bytes"), vec!["debug-option"]);
        assert_eq!(issues("bad MoE settings MoeConfig { n_experts: 0, top_k: 1 }"), vec!["debug-struct"]);
        assert_eq!(issues("a\nb"), vec!["multi-line"]);
        assert!(issues("tensor `w`: expected shape [2, 3], found [3]").is_empty());
        assert!(issues("Q8_0 blocks (32 elements)").is_empty());
        assert!(issues("NoneSuch thing").is_empty());
        assert_eq!(normalise("a 123 b 4"), "a # b #");
    }
}
