//! What ARCHITECTURE.md names must exist: every path in backticks, and every
//! file of the adapter contract in every adapter crate.

use std::path::Path;

/// The adapter rows of the contract's second table, and the crate of each.
pub const ADAPTERS: &[(&str, &str)] = &[
    ("Redis", "distlock-redis"),
    ("etcd", "distlock-etcd"),
    ("ZooKeeper", "distlock-zookeeper"),
    ("PostgreSQL", "distlock-postgres"),
    ("MySQL", "distlock-mysql"),
];

const EXTENSIONS: &[&str] = &[
    ".rs", ".md", ".lua", ".sql", ".toml", ".java", ".yml", ".sh",
];

/// Every file and directory under `root` as `a/b/c` (no `target/`, no dot-dirs).
pub fn index(root: &Path) -> std::io::Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(rel.to_string_lossy().replace('\\', "/"));
            if path.is_dir() {
                walk(root, &path, out)?;
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// The backticked spans of `md` outside fenced code blocks, with their lines.
pub fn backticked(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        out.extend(
            parts
                .iter()
                .skip(1)
                .step_by(2)
                .take(parts.len() / 2)
                .map(|s| (n + 1, s.to_string())),
        );
    }
    out
}

/// A span that names a file or directory rather than code, a key or a URL.
pub fn is_path(span: &str, roots: &[String]) -> bool {
    let code = [" ", "::", "://", "(", "=", "\"", ",", "{", "→"];
    if span.is_empty() || code.iter().any(|c| span.contains(c)) {
        return false;
    }
    let first = span.split('/').next().unwrap_or_default();
    EXTENSIONS.iter().any(|e| span.ends_with(e))
        || (span.len() > 1 && span.ends_with('/'))
        || (span.contains('/') && roots.iter().any(|r| r == first))
}

/// Whether `pattern` names an entry of `paths`, as the whole of one or its
/// tail (`lease/shared.rs`); `*` and `<name>` stand for any text within one
/// segment.
pub fn exists(pattern: &str, paths: &[String]) -> bool {
    let want: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    paths.iter().any(|p| {
        let have: Vec<&str> = p.split('/').collect();
        have.len() >= want.len()
            && have[have.len() - want.len()..]
                .iter()
                .zip(&want)
                .all(|(h, w)| segment_matches(w, h))
    })
}

fn segment_matches(pattern: &str, name: &str) -> bool {
    // `<name>` is a placeholder like `*`.
    let mut glob = String::new();
    let mut in_placeholder = false;
    for c in pattern.chars() {
        match c {
            '<' => {
                in_placeholder = true;
                glob.push('*');
            }
            '>' => in_placeholder = false,
            _ if in_placeholder => {}
            _ => glob.push(c),
        }
    }
    let pieces: Vec<&str> = glob.split('*').collect();
    if pieces.len() == 1 {
        return glob == name;
    }
    let (Some(head), Some(tail)) = (pieces.first(), pieces.last()) else {
        return false;
    };
    if !name.starts_with(head) || name.len() < head.len() + tail.len() || !name.ends_with(tail) {
        return false;
    }
    let mut rest = &name[head.len()..name.len() - tail.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Every path `md` names that is not in `paths`, as `line N: path`.
pub fn missing_paths(md: &str, paths: &[String], roots: &[String]) -> Vec<String> {
    backticked(md)
        .into_iter()
        .filter(|(_, span)| is_path(span, roots) && !exists(span, paths))
        .map(|(line, span)| format!("ARCHITECTURE.md line {line}: `{span}`"))
        .collect()
}

/// The rows of the first markdown table after `heading`'s line, then of the
/// table after that one: (contract rows, adapter rows), each row its cells.
pub fn contract_tables(md: &str, heading: &str) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let after = md
        .split_once(heading)
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let mut tables: Vec<Vec<Vec<String>>> = Vec::new();
    let mut in_table = false;
    for line in after.lines() {
        let is_row = line.starts_with('|');
        if is_row && !in_table {
            tables.push(Vec::new());
        }
        in_table = is_row;
        if is_row && !line.starts_with("|---") {
            let cells = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            if let Some(table) = tables.last_mut() {
                table.push(cells);
            }
        }
        if tables.len() == 2 && !is_row {
            break;
        }
    }
    let mut tables = tables
        .into_iter()
        .map(|t| t.into_iter().skip(1).collect::<Vec<_>>());
    (
        tables.next().unwrap_or_default(),
        tables.next().unwrap_or_default(),
    )
}
