//! Just enough of Rust's lexical grammar to find paths: comments, strings,
//! chars and lifetimes are skipped so that `crate::` in a doc comment or a
//! string never counts as an import.

/// One token of interest, with the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub line: usize,
}

/// Splits `src` into identifiers (`r#` dropped) and punctuation (`::` as one
/// token, everything else one char); literals and comments yield nothing.
pub fn tokens(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = block_comment_end(&chars, i, &mut line);
        } else if let Some(end) = raw_string_end(&chars, i, &mut line) {
            i = end;
        } else if c == '"' || (matches!(c, 'b' | 'c') && next == Some('"')) {
            i = string_end(&chars, if c == '"' { i } else { i + 1 }, &mut line);
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            i = quote_end(&chars, if c == '\'' { i } else { i + 1 });
        } else if c.is_alphanumeric() || c == '_' {
            let start = if c == 'r' && next == Some('#') {
                i + 2
            } else {
                i
            };
            let mut end = start;
            while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
                end += 1;
            }
            if !c.is_ascii_digit() {
                out.push(Token {
                    text: chars[start..end].iter().collect(),
                    line,
                });
            }
            i = end.max(i + 1);
        } else if c == ':' && next == Some(':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// Block comments nest in Rust.
fn block_comment_end(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            (ch, _) => {
                *line += usize::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// `r"…"`, `r#"…"#`, `br#"…"#`, `cr"…"`: ends at the quote followed by as many
/// `#` as opened it. `None` when `i` does not start one (`r#ident` is an ident).
fn raw_string_end(chars: &[char], i: usize, line: &mut usize) -> Option<usize> {
    let mut j = i;
    if matches!(chars[j], 'b' | 'c') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        *line += usize::from(chars[j] == '\n');
        j += 1;
    }
    Some(j)
}

/// A string opened by the quote at `i`, escapes honoured.
fn string_end(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            ch => {
                *line += usize::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// A char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`), opened
/// by the quote at `i`; a lifetime ends after its quote so its name is lexed
/// as an identifier, which no path starts with.
fn quote_end(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if chars.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        i + 1
    }
}
