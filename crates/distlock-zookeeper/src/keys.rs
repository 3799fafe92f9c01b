//! The data layout: where a lock lives in the ZooKeeper tree, how a name becomes
//! a path segment, and how the queue is ordered.
//!
//! ```text
//! /{namespace}/{escaped name}/_c_{uuid}-lock-{sequence}
//!  container    container      ephemeral-sequential, one per holder or waiter
//! ```
//!
//! Semaphores, elections and read-write locks live under `/{namespace}/%semaphore`,
//! `%election` and `%rw` ([`primitive_dir`]), their nodes named per
//! [`NodeKind`].
//!
//! The node names are those of Apache Curator's protected mode, and a name
//! without `/`, `%` or characters ZooKeeper forbids is used verbatim, so Curator's
//! `InterProcessMutex` on `/{namespace}/{name}` contends with this adapter.
//!
//! ```
//! use distlock_zookeeper::keys;
//! assert_eq!(keys::escape_name("orders/42"), "orders%2F42");
//! assert_eq!(keys::unescape_name("orders%2F42").as_deref(), Some("orders/42"));
//! let queue = keys::sort_queue(["_c_b-lock-0000000007", "_c_a-lock-0000000003", "junk"]);
//! assert_eq!(queue, vec!["_c_a-lock-0000000003", "_c_b-lock-0000000007"]);
//! ```

use std::fmt::Write as _;

/// The part of a lock node's name before the sequence, as Curator's
/// `InterProcessMutex` names it.
pub const LOCK_NAME: &str = "lock-";

/// Curator's protected-mode prefix: `_c_{uuid}-` comes before [`LOCK_NAME`].
pub const PROTECTED_PREFIX: &str = "_c_";

/// True for characters ZooKeeper rejects in a path: controls, surrogates, the
/// private use area up to U+F8FF, U+FFF0..=U+FFFF, and everything beyond the BMP
/// (Java holds those as surrogate pairs, which the server's check rejects).
pub(crate) fn forbidden_in_path(c: char) -> bool {
    let u = u32::from(c);
    [
        0x0000..=0x001f,
        0x007f..=0x009f,
        0xd800..=0xf8ff,
        0xfff0..=0x10_ffff,
    ]
    .into_iter()
    .any(|range| range.contains(&u))
}

/// The lock name as one path segment: `%`, `/` and every character ZooKeeper
/// forbids (emoji included) are percent-encoded (UTF-8 bytes, upper-case hex), and the segments `.`
/// and `..` become `%2E` and `%2E%2E`. Distinct names give distinct segments, so
/// `a` never waits on `a/b`.
pub fn escape_name(name: &str) -> String {
    if name == "." || name == ".." {
        return "%2E".repeat(name.len());
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c == '/' || forbidden_in_path(c) {
            let mut utf8 = [0; 4];
            for byte in c.encode_utf8(&mut utf8).bytes() {
                // Writing to a String cannot fail.
                let _ = write!(out, "%{byte:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape_name`]; `None` for a segment it cannot have produced
/// (a bad or needless escape, or bytes that are not UTF-8), so one name has one
/// segment and a stray directory is never taken for a lock.
pub fn unescape_name(segment: &str) -> Option<String> {
    let name = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()?;
    (escape_name(&name) == segment).then(|| name.into_owned())
}

/// The lock's directory, `/{namespace}/{escaped name}` (relative to the chroot).
pub fn lock_dir(namespace: &str, name: &str) -> String {
    format!("/{namespace}/{}", escape_name(name))
}

/// What every node of one acquisition starts with, `_c_{uuid}-`: how the client
/// finds its own node after a create whose reply was lost. A UUID in its text
/// form, because Curator recognises protected names by that length.
pub fn protected_marker(uuid: &uuid::Uuid) -> String {
    format!("{PROTECTED_PREFIX}{uuid}-")
}

/// The path to pass to a sequential create for one acquisition:
/// `{dir}/_c_{uuid}-lock-`; the server appends the sequence.
pub fn node_prefix(dir: &str, uuid: &uuid::Uuid) -> String {
    format!("{dir}/{}{LOCK_NAME}", protected_marker(uuid))
}

/// The path of child `name` of the lock directory `dir`.
pub fn node_path(dir: &str, name: &str) -> String {
    format!("{dir}/{name}")
}

/// The sequence ZooKeeper appended to a lock node's name: the digits after the
/// last `lock-`. `None` for a child that is not a lock node.
pub fn sequence_of(node: &str) -> Option<i64> {
    sequence_after(node, LOCK_NAME)
}

/// The digits after the last `base` in `node`, as a sequence.
fn sequence_after(node: &str, base: &str) -> Option<i64> {
    let at = node.rfind(base)?;
    let digits = &node[at + base.len()..];
    // ZooKeeper prints the parent's cversion with `%010d`, which goes negative
    // after 2^31 child changes on one parent.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return None;
    }
    digits.parse().ok()
}

/// A sort key that orders sequences by creation, across the 32-bit rollover.
///
/// ZooKeeper's sequence is the parent's `cversion`, a signed 32-bit counter that
/// wraps from 2147483647 to -2147483648. Nodes alive at the same time were created
/// within far fewer than 2^31 child changes of each other, so their signed
/// distance (mod 2^32) from any one of them, `reference`, orders them correctly on
/// both sides of the wrap. The key is a plain integer, so sorting by it is a total
/// order whatever names a server returns. (Curator compares the digits as strings,
/// which is wrong across the wrap; the two agree everywhere else.)
pub fn creation_key(sequence: i64, reference: i64) -> i64 {
    match (i32::try_from(sequence), i32::try_from(reference)) {
        (Ok(s), Ok(r)) => i64::from(s.wrapping_sub(r)),
        _ => sequence.saturating_sub(reference),
    }
}

/// The lock nodes among `children`, first in line (the holder) first. Children
/// that are not lock nodes (no `lock-{sequence}` suffix) are left out, as Curator
/// leaves them out.
pub fn sort_queue<I, S>(children: I) -> Vec<S>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    sort_queue_of(children, NodeKind::Lock.queue())
}

/// The nodes of `kinds` among `children`, first in line first, as
/// [`sort_queue`] orders lock nodes.
pub fn sort_queue_of<I, S>(children: I, kinds: &[NodeKind]) -> Vec<S>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut queue: Vec<(i64, S)> = children
        .into_iter()
        .filter_map(|child| {
            let (_, seq) = NodeKind::of(child.as_ref(), kinds)?;
            Some((seq, child))
        })
        .collect();
    let reference = queue.first().map_or(0, |(seq, _)| *seq);
    queue.sort_by_key(|(seq, _)| creation_key(*seq, reference));
    queue.into_iter().map(|(_, child)| child).collect()
}

/// The recipes' node kinds, each named as Curator names it: the base name
/// comes after the protected prefix and before the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// `InterProcessMutex`'s `lock-`; also the guard lock of a semaphore.
    Lock,
    /// `InterProcessSemaphoreV2`'s `lease-`: one live permit.
    Lease,
    /// `LeaderLatch`'s `latch-`: one candidate.
    Latch,
    /// `InterProcessReadWriteLock`'s `__READ__`: a reader.
    Read,
    /// `InterProcessReadWriteLock`'s `__WRIT__`: a writer.
    Write,
}

impl NodeKind {
    /// The base name the server appends the sequence to.
    pub const fn base(self) -> &'static str {
        match self {
            NodeKind::Lock => LOCK_NAME,
            NodeKind::Lease => "lease-",
            NodeKind::Latch => "latch-",
            NodeKind::Read => "__READ__",
            NodeKind::Write => "__WRIT__",
        }
    }

    /// The kinds that stand in one queue with this one (readers and writers
    /// share theirs).
    pub const fn queue(self) -> &'static [NodeKind] {
        match self {
            NodeKind::Lock => &[NodeKind::Lock],
            NodeKind::Lease => &[NodeKind::Lease],
            NodeKind::Latch => &[NodeKind::Latch],
            NodeKind::Read | NodeKind::Write => &[NodeKind::Read, NodeKind::Write],
        }
    }

    /// The kind among `kinds` whose base `node` carries, and its sequence.
    pub fn of(node: &str, kinds: &[NodeKind]) -> Option<(NodeKind, i64)> {
        kinds
            .iter()
            .find_map(|kind| Some((*kind, sequence_after(node, kind.base())?)))
    }
}

/// Where semaphores live under the namespace: `%` is always escaped in a
/// name, so no lock directory is ever called this.
pub const SEMAPHORES: &str = "%semaphore";
/// Where elections live under the namespace.
pub const ELECTIONS: &str = "%election";
/// Where read-write locks live under the namespace.
pub const RWLOCKS: &str = "%rw";
/// A semaphore's guard lock directory, as Curator names it.
pub const SEMAPHORE_LOCKS: &str = "locks";
/// A semaphore's permits directory, as Curator names it.
pub const SEMAPHORE_LEASES: &str = "leases";

/// The directory of primitive `name` under `root` ([`SEMAPHORES`],
/// [`ELECTIONS`], [`RWLOCKS`]): `/{namespace}/{root}/{escaped name}`.
pub fn primitive_dir(namespace: &str, root: &str, name: &str) -> String {
    format!("/{namespace}/{root}/{}", escape_name(name))
}

/// Checks a ZooKeeper path (a chroot, or `/` and the namespace) by the server's
/// own rules, saying what is wrong.
pub(crate) fn check_path(path: &str, allow_root: bool) -> Result<(), &'static str> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err("it must start with `/`");
    };
    if rest.is_empty() {
        return if allow_root {
            Ok(())
        } else {
            Err("it is empty")
        };
    }
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err("it has an empty segment (`//` or a trailing `/`)");
        }
        if segment == "." || segment == ".." {
            return Err("`.` and `..` segments are not allowed");
        }
        if segment.chars().any(forbidden_in_path) {
            return Err("it has characters ZooKeeper forbids (controls, private use, U+FFF0..)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_distinct_single_segments() {
        let names: Vec<&str> = distlock_testkit::cases::NAMES_THAT_MUST_NOT_COLLIDE
            .into_iter()
            .chain(["...", "zookeeper", "\u{e000}", "\u{fff0}", "🔒"])
            .collect();
        let escaped: Vec<String> = names.iter().map(|n| escape_name(n)).collect();
        for (name, segment) in names.iter().zip(&escaped) {
            assert!(!segment.contains('/'), "{segment}");
            assert!(segment != "." && segment != "..", "{segment}");
            assert!(!segment.chars().any(forbidden_in_path), "{segment:?}");
            assert_eq!(unescape_name(segment).as_deref(), Some(*name));
        }
        let mut unique = escaped.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), escaped.len());
    }

    #[test]
    fn plain_names_stay_verbatim_for_curator() {
        assert_eq!(escape_name("orders-42"), "orders-42");
        assert_eq!(lock_dir("distlock", "job"), "/distlock/job");
        assert_eq!(escape_name("a%b/c"), "a%25b%2Fc");
        assert_eq!(escape_name("ключ/🔒"), "ключ%2F%F0%9F%94%92");
    }

    #[test]
    fn bad_escapes_do_not_unescape() {
        assert_eq!(unescape_name("%2"), None);
        assert_eq!(unescape_name("%zz"), None);
        assert_eq!(unescape_name("%FF"), None);
        assert_eq!(unescape_name("%41"), None, "A is never escaped");
        assert_eq!(unescape_name("a/b"), None, "/ is always escaped");
    }

    #[test]
    fn sequences_parse_from_curator_names() {
        let uuid = uuid::Uuid::nil();
        let prefix = node_prefix("/ns/job", &uuid);
        assert_eq!(
            prefix,
            "/ns/job/_c_00000000-0000-0000-0000-000000000000-lock-"
        );
        assert_eq!(sequence_of("_c_x-lock-0000000042"), Some(42));
        assert_eq!(sequence_of("_c_x-lock--2147483648"), Some(-2_147_483_648));
        assert_eq!(sequence_of("lock-"), None);
        assert_eq!(sequence_of("readme"), None);
        assert_eq!(sequence_of("_c_x-lock-12a"), None);
    }

    #[test]
    fn recipe_nodes_sort_in_one_queue_per_recipe() {
        let rw = [
            "_c_b-__WRIT__0000000005",
            "_c_a-__READ__0000000002",
            "_c_c-lock-0000000001",
        ];
        assert_eq!(
            sort_queue_of(rw, NodeKind::Read.queue()),
            vec!["_c_a-__READ__0000000002", "_c_b-__WRIT__0000000005"]
        );
        assert_eq!(
            NodeKind::of("_c_b-__WRIT__0000000005", NodeKind::Write.queue()),
            Some((NodeKind::Write, 5))
        );
        assert_eq!(
            sort_queue_of(
                ["latch-0000000003", "_c_x-latch-0000000001"],
                &[NodeKind::Latch]
            ),
            vec!["_c_x-latch-0000000001", "latch-0000000003"]
        );
        assert_eq!(
            primitive_dir("ns", SEMAPHORES, "a/b"),
            "/ns/%semaphore/a%2Fb"
        );
        assert_eq!(unescape_name(SEMAPHORES), None, "never a lock directory");
        assert_eq!(unescape_name(RWLOCKS), None);
        assert_eq!(unescape_name(ELECTIONS), None);
    }

    #[test]
    fn paths_follow_the_server_rules() {
        assert_eq!(check_path("/", true), Ok(()));
        assert!(check_path("/", false).is_err());
        assert_eq!(check_path("/apps/prod", false), Ok(()));
        for bad in ["relative", "/a//b", "/a/", "/a/../b", "/a/\u{1}"] {
            assert!(check_path(bad, true).is_err(), "{bad}");
        }
    }

    #[test]
    fn any_names_a_server_returns_sort_without_panicking() {
        // Spread wider than 2^31: no order is right, but sorting must not fail.
        let names = [
            "_c_a-lock-0000000000",
            "_c_b-lock-1500000000",
            "_c_c-lock--1500000000",
            "_c_d-lock-99999999999",
        ];
        assert_eq!(sort_queue(names).len(), 4);
    }

    #[test]
    fn queue_order_survives_rollover() {
        let before = "_c_a-lock-2147483646";
        let last = "_c_b-lock-2147483647";
        let wrapped = "_c_c-lock--2147483648";
        let after = "_c_d-lock--2147483647";
        assert_eq!(
            sort_queue([after, wrapped, before, last]),
            vec![before, last, wrapped, after]
        );
        assert_eq!(
            sort_queue(["_c_x-lock-0000000010", "_c_y-lock-0000000002"]),
            vec!["_c_y-lock-0000000002", "_c_x-lock-0000000010"]
        );
    }
}
