//! One crate's module graph and its cycles. Each module with children is one
//! graph whose nodes are those children (the crate root's are the top-level
//! modules); `a -> b` when code anywhere inside `a` names a path inside `b`.
//! A path through a re-export counts where it is written (`crate::Lease` is
//! the root, which is no node), so keep imports on the defining module.

use super::imports::{Reference, references};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// What one crate's `src/` declares and names.
pub struct Crate {
    pub name: String,
    modules: BTreeSet<ModPath>,
    refs: Vec<(PathBuf, Reference)>,
}

/// A cycle among the children of one module, ready to print.
pub struct Cycle {
    /// `a -> b -> a` as (from, to, the first line that makes the hop).
    pub hops: Vec<(String, String, String)>,
    /// Every module of the strongly connected set, when more than the cycle.
    pub also: Vec<String>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.hops.iter().map(|(from, _, _)| from.as_str()).collect();
        write!(
            f,
            "{} -> {}",
            names.join(" -> "),
            names.first().unwrap_or(&"")
        )?;
        for (from, to, why) in &self.hops {
            write!(f, "\n    {from} -> {to}: {why}")?;
        }
        if !self.also.is_empty() {
            write!(f, "\n    strongly connected with: {}", self.also.join(", "))?;
        }
        Ok(())
    }
}

impl Crate {
    /// Reads every `.rs` file under `src` (not `src/bin/`, whose files are
    /// crates of their own).
    pub fn scan(name: &str, src: &Path) -> std::io::Result<Crate> {
        let mut krate = Crate {
            name: name.into(),
            modules: BTreeSet::new(),
            refs: Vec::new(),
        };
        let mut files = Vec::new();
        rust_files(src, &mut files)?;
        for file in files {
            let rel = file.strip_prefix(src).unwrap_or(&file).to_path_buf();
            if rel.starts_with("bin") {
                continue;
            }
            let module = module_path(&rel);
            let text = std::fs::read_to_string(&file)?;
            let (refs, inline) = references(&text, &module);
            krate.modules.insert(module);
            krate.modules.extend(inline);
            krate
                .refs
                .extend(refs.into_iter().map(|r| (rel.clone(), r)));
        }
        Ok(krate)
    }

    /// Every cycle, one per strongly connected set of sibling modules.
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut cycles = Vec::new();
        let parents: BTreeSet<ModPath> = std::iter::once(Vec::new())
            .chain(
                self.modules
                    .iter()
                    .filter(|m| !m.is_empty())
                    .map(|m| m[..m.len() - 1].to_vec()),
            )
            .collect();
        for parent in parents {
            cycles.extend(self.cycles_under(&parent));
        }
        cycles
    }

    fn cycles_under(&self, parent: &[String]) -> Vec<Cycle> {
        let depth = parent.len();
        let is_child = |name: &str| {
            self.modules
                .iter()
                .any(|m| m.len() == depth + 1 && m.starts_with(parent) && m[depth] == name)
        };
        // (from, to) -> where it is first written
        let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
        for (file, r) in &self.refs {
            if r.from.len() <= depth || r.to.len() <= depth {
                continue;
            }
            if !r.from.starts_with(parent) || !r.to.starts_with(parent) {
                continue;
            }
            let (from, to) = (&r.from[depth], &r.to[depth]);
            if from != to && is_child(to) {
                let why = format!("{}:{} `{}`", file.display(), r.line, r.to.join("::"));
                edges.entry((from.clone(), to.clone())).or_insert(why);
            }
        }
        let qualify = |name: &str| {
            parent
                .iter()
                .map(String::as_str)
                .chain([name])
                .collect::<Vec<_>>()
                .join("::")
        };
        strongly_connected(&edges)
            .into_iter()
            .map(|set| {
                let ring = shortest_ring(&set, &edges);
                let hops = ring
                    .iter()
                    .zip(ring.iter().cycle().skip(1))
                    .map(|(a, b)| {
                        (
                            qualify(a),
                            qualify(b),
                            edges[&(a.clone(), b.clone())].clone(),
                        )
                    })
                    .collect();
                let also = if set.len() > ring.len() {
                    set.iter().map(|m| qualify(m)).collect()
                } else {
                    Vec::new()
                };
                Cycle { hops, also }
            })
            .collect()
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `lib.rs` and `main.rs` are the root, `a/mod.rs` and `a.rs` are `a`.
fn module_path(rel: &Path) -> ModPath {
    let mut parts: ModPath = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod")
        || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main"))
    {
        parts.pop();
    }
    parts
}

/// Tarjan's algorithm; only sets of two or more modules are returned, since
/// a module naming itself is no import.
fn strongly_connected(edges: &BTreeMap<(String, String), String>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        sets: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in s.next.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                set.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                s.sets.push(set);
            }
        }
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    let mut state = State {
        next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        sets: Vec::new(),
    };
    for v in nodes {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.sets
}

/// The shortest cycle through the set's first module, by breadth-first search.
fn shortest_ring(
    set: &BTreeSet<String>,
    edges: &BTreeMap<(String, String), String>,
) -> Vec<String> {
    let Some(start) = set.first() else {
        return Vec::new();
    };
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for ((a, b), _) in edges.range((v.clone(), String::new())..) {
            if a != v {
                break;
            }
            if !set.contains(b) {
                continue;
            }
            if b == start {
                let mut ring = vec![v.clone()];
                let mut at = v;
                while at != start {
                    at = came_from[at];
                    ring.push(at.clone());
                }
                ring.reverse();
                return ring;
            }
            if !came_from.contains_key(b) {
                came_from.insert(b, v);
                queue.push_back(b);
            }
        }
    }
    Vec::new()
}
