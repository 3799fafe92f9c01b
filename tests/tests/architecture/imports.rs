//! Every path of one file that names a module of its own crate: `use` trees
//! (grouped, renamed, `pub use`) and paths in bodies (`crate::x::f()`), each
//! resolved to an absolute module path from the module it is written in.

use super::lexer::{Token, tokens};

/// One path to somewhere in the same crate.
#[derive(Debug, Clone)]
pub struct Reference {
    /// The module the path is written in (file module plus inline `mod x { }`).
    pub from: Vec<String>,
    /// What it names, from the crate root (`crate::a::B` is `["a", "B"]`).
    pub to: Vec<String>,
    pub line: usize,
}

/// The references of one file whose module path is `module`, and the inline
/// modules it declares (each a module path), which are modules as much as files.
pub fn references(src: &str, module: &[String]) -> (Vec<Reference>, Vec<Vec<String>>) {
    let toks = tokens(src);
    let mut refs = Vec::new();
    let mut inline_mods = Vec::new();
    // Inline modules open at a brace depth and end at its closing brace.
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut pending_mod: Option<String> = None;
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let current: Vec<String> = module
            .iter()
            .cloned()
            .chain(stack.iter().map(|(name, _)| name.clone()))
            .collect();
        let text = toks[i].text.as_str();
        match text {
            "{" => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline_mods.push(current.iter().cloned().chain([name.clone()]).collect());
                    stack.push((name, depth));
                }
            }
            "}" => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ";" => pending_mod = None,
            "mod" if toks.get(i + 2).is_some_and(|t| t.text == "{") => {
                pending_mod = toks.get(i + 1).map(|t| t.text.clone());
            }
            "use" => {
                let line = toks[i].line;
                let mut paths = Vec::new();
                i += 1;
                use_tree(&toks, &mut i, Vec::new(), &mut paths);
                for path in paths {
                    if let Some(to) = resolve(&current, &path) {
                        refs.push(Reference {
                            from: current.clone(),
                            to,
                            line,
                        });
                    }
                }
                continue;
            }
            "crate" | "super" | "self"
                if toks.get(i + 1).is_some_and(|t| t.text == "::")
                    && (i == 0 || toks[i - 1].text != "::") =>
            {
                let line = toks[i].line;
                let mut path = vec![text.to_string()];
                while toks.get(i + 1).is_some_and(|t| t.text == "::")
                    && toks.get(i + 2).is_some_and(|t| is_ident(&t.text))
                {
                    path.push(toks[i + 2].text.clone());
                    i += 2;
                }
                if let Some(to) = resolve(&current, &path) {
                    refs.push(Reference {
                        from: current.clone(),
                        to,
                        line,
                    });
                }
            }
            _ => {}
        }
        i += 1;
    }
    (refs, inline_mods)
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands one use tree from `toks[*i]` into its paths, leaving `*i` after it
/// (after the `;` at the top level).
fn use_tree(toks: &[Token], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    while let Some(tok) = toks.get(*i) {
        match tok.text.as_str() {
            "{" => {
                *i += 1;
                while toks.get(*i).is_some_and(|t| t.text != "}") {
                    use_tree(toks, i, prefix.clone(), out);
                    if toks.get(*i).is_some_and(|t| t.text == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                break;
            }
            "*" => {
                prefix.push("*".into());
                out.push(prefix);
                *i += 1;
                break;
            }
            // `$crate::` in a macro is this crate; a leading `::` is another crate.
            "$" | "::" => *i += 1,
            t if is_ident(t) => {
                prefix.push(t.to_string());
                *i += 1;
                if toks.get(*i).is_some_and(|t| t.text == "::") {
                    *i += 1;
                    continue;
                }
                if toks.get(*i).is_some_and(|t| t.text == "as") {
                    *i += 2;
                }
                // `a::{self, b}` names `a` itself.
                if prefix.len() > 1 && prefix.last().is_some_and(|s| s == "self") {
                    prefix.pop();
                }
                out.push(prefix);
                break;
            }
            _ => break,
        }
    }
    // Only the outermost tree can be followed by `;`: nested ones end at `,` or `}`.
    if toks.get(*i).is_some_and(|t| t.text == ";") {
        *i += 1;
    }
}

/// An absolute module path for `path` written in `current`; `None` for paths
/// into other crates (and for relative paths, which can only go down).
fn resolve(current: &[String], path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    match first.as_str() {
        "crate" => Some(rest.to_vec()),
        "self" => Some(current.iter().chain(rest).cloned().collect()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = current.len().checked_sub(ups)?;
            Some(
                current[..base]
                    .iter()
                    .chain(&path[ups..])
                    .cloned()
                    .collect(),
            )
        }
        _ => None,
    }
}
