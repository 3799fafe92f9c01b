//! The value of a semaphore's or read-write lock's one KV entry: the limit (a
//! semaphore's) and every member, holder or queued waiter, one per line.
//!
//! ```text
//! v1 sem LIMIT              v1 rw 0
//! HP SLOT TTL_MS RENEWS GRANTED OWNER     a permit
//! HR 0 TTL_MS RENEWS GRANTED OWNER        a read share
//! HW 0 TTL_MS RENEWS GRANTED OWNER        the write share
//! QR 0 PLACE_MS RENEWS 0 OWNER            a queued reader's place
//! QW 0 PLACE_MS RENEWS 0 OWNER            a queued writer's place
//! ```
//!
//! `RENEWS` counts the member's own writes (each renewal adds one), which is
//! how a contender tells a live member from one that stopped: the entry's
//! revision moves with every member's writes. `GRANTED` is the revision of
//! the write that added the holder, `0` in that write itself (it cannot know
//! its own revision); whoever writes the entry next fills it in from the
//! revision it read. Queue members keep their arrival order in the list.

use std::time::Duration;

/// The primitive an entry belongs to, named in its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Semaphore,
    RwLock,
}

impl Kind {
    /// The word in the value, also the key's first token.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Semaphore => "sem",
            Kind::RwLock => "rw",
        }
    }
}

/// What a member holds or waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Permit,
    Read,
    Write,
}

/// One holder or queued waiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Holds (`true`) or waits in the queue.
    pub(crate) holds: bool,
    pub(crate) mode: Mode,
    /// A permit's slot; `0` for the other modes.
    pub(crate) slot: u32,
    /// A holder's ttl; a waiter's place lifetime.
    pub(crate) ttl: Duration,
    pub(crate) renews: u64,
    /// The granting write's revision (see the module docs).
    pub(crate) granted: u64,
    pub(crate) owner: String,
}

/// A decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    /// The semaphore's limit; `0` for a read-write lock.
    pub(crate) limit: u32,
    pub(crate) members: Vec<Member>,
}

impl Entry {
    /// An entry with no member.
    pub(crate) fn empty(kind: Kind) -> Entry {
        Entry {
            kind,
            limit: 0,
            members: Vec::new(),
        }
    }

    /// The holders.
    pub(crate) fn holders(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.holds)
    }

    /// The member `owner`, holder or waiter.
    pub(crate) fn member(&self, owner: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.owner == owner)
    }

    /// Drops the member `owner`; whether there was one.
    pub(crate) fn remove(&mut self, owner: &str) -> bool {
        let before = self.members.len();
        self.members.retain(|m| m.owner != owner);
        self.members.len() != before
    }

    pub(crate) fn encode(&self) -> bytes::Bytes {
        let mut text = format!("v1 {} {}", self.kind.word(), self.limit);
        for m in &self.members {
            let role = if m.holds { 'H' } else { 'Q' };
            let mode = match m.mode {
                Mode::Permit => 'P',
                Mode::Read => 'R',
                Mode::Write => 'W',
            };
            let ttl_ms = u64::try_from(m.ttl.as_millis()).unwrap_or(u64::MAX);
            text.push_str(&format!(
                "\n{role}{mode} {} {ttl_ms} {} {} {}",
                m.slot, m.renews, m.granted, m.owner
            ));
        }
        bytes::Bytes::from(text)
    }

    /// The entry a value read at `revision` holds, with every holder's
    /// `granted` filled in; why not, for bytes this protocol did not write (or
    /// wrote for another primitive).
    pub(crate) fn decode(value: &[u8], revision: u64, kind: Kind) -> Result<Entry, String> {
        let text = std::str::from_utf8(value).map_err(|_| "not UTF-8".to_owned())?;
        let mut lines = text.split('\n');
        let head: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
        let limit = match head[..] {
            ["v1", word, limit] if word == kind.word() => {
                limit.parse().map_err(|_| format!("limit `{limit}`"))?
            }
            ["v1", word, _] => return Err(format!("an entry of `{word}`, not `{}`", kind.word())),
            _ => return Err("no `v1` header (another format or version)".to_owned()),
        };
        let members = lines
            .map(|line| member(line, revision).ok_or_else(|| format!("member line `{line}`")))
            .collect::<Result<_, _>>()?;
        Ok(Entry {
            kind,
            limit,
            members,
        })
    }
}

fn member(line: &str, revision: u64) -> Option<Member> {
    let mut parts = line.splitn(6, ' ');
    let (holds, mode) = match parts.next()? {
        "HP" => (true, Mode::Permit),
        "HR" => (true, Mode::Read),
        "HW" => (true, Mode::Write),
        "QR" => (false, Mode::Read),
        "QW" => (false, Mode::Write),
        _ => return None,
    };
    let slot = parts.next()?.parse().ok()?;
    let ttl = Duration::from_millis(parts.next()?.parse().ok()?);
    let renews = parts.next()?.parse().ok()?;
    let granted = match parts.next()?.parse().ok()? {
        0 if holds => revision,
        granted => granted,
    };
    let owner = parts.next()?.to_owned();
    (!owner.is_empty()).then_some(Member {
        holds,
        mode,
        slot,
        ttl,
        renews,
        granted,
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        let m = |holds, mode, slot, granted, owner: &str| Member {
            holds,
            mode,
            slot,
            ttl: Duration::from_millis(1500),
            renews: 3,
            granted,
            owner: owner.to_owned(),
        };
        Entry {
            kind: Kind::RwLock,
            limit: 0,
            members: vec![
                m(true, Mode::Read, 0, 7, "a host=h pid=1"),
                m(true, Mode::Write, 0, 0, "b"),
                m(false, Mode::Write, 0, 0, "c host=h pid=2 label=x y"),
            ],
        }
    }

    #[test]
    fn entries_round_trip_and_fill_in_the_granting_revision() {
        let entry = sample();
        let decoded = Entry::decode(&entry.encode(), 9, Kind::RwLock).unwrap();
        assert_eq!(decoded.members[0], entry.members[0]);
        assert_eq!(decoded.members[1].granted, 9, "granted in the write at 9");
        assert_eq!(
            decoded.members[2], entry.members[2],
            "a waiter has no grant"
        );
        let empty = Entry::empty(Kind::Semaphore);
        assert_eq!(&empty.encode()[..], b"v1 sem 0");
        assert_eq!(
            Entry::decode(&empty.encode(), 1, Kind::Semaphore),
            Ok(empty)
        );
    }

    #[test]
    fn garbled_values_are_refused_with_the_reason() {
        for (bad, why) in [
            (&b""[..], "no `v1` header"),
            (b"v2 sem 1", "no `v1` header"),
            (b"\xff", "not UTF-8"),
            (b"v1 sem x", "limit `x`"),
            (b"v1 rw 0", "an entry of `rw`, not `sem`"),
            (b"v1 sem 2\nHP 0 10 0 0", "member line"),
            (b"v1 sem 2\nXP 0 10 0 0 o", "member line"),
            (b"v1 sem 2\nHP -1 10 0 0 o", "member line"),
            (b"v1 sem 2\nHP 0 10 0 0 ", "member line"),
            (b"v1 sem 2\n", "member line"),
        ] {
            let refused = Entry::decode(bad, 1, Kind::Semaphore).unwrap_err();
            assert!(refused.contains(why), "{bad:?}: {refused}");
        }
    }
}
