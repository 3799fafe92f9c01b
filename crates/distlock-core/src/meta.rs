//! Who holds a lock: the host, the process and the app's label, stored beside
//! the lock so that an operator (and the `Busy` error) can name the holder
//! rather than a random owner id.

use crate::LockError;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The holder of a lock as it recorded itself: its host name, its process
/// id and the label its app gave ([`crate::AcquireOptions::label`]).
///
/// It is written by whoever acquires and read back by anyone, so it is
/// bounded and printable: a label is at most [`HolderMeta::MAX_LABEL`]
/// bytes without control characters, and data a foreign client wrote (a
/// Curator node's address, an `etcdctl elect` proposal) reads as no
/// metadata rather than as an error.
///
/// ```
/// use distlock_core::HolderMeta;
/// let me = HolderMeta::this_process().labelled(Some("billing"));
/// let stored = me.encode();
/// assert_eq!(HolderMeta::decode(&stored), Some(me.clone()));
/// assert!(me.to_string().ends_with("(billing)"));
/// assert_eq!(HolderMeta::decode("10.0.0.7"), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderMeta {
    host: Arc<str>,
    pid: u32,
    label: Option<String>,
}

/// The longest host name kept, in bytes (Linux's own limit is 64).
const MAX_HOST: usize = 255;

impl HolderMeta {
    /// The longest label, in bytes.
    pub const MAX_LABEL: usize = 64;

    /// This process: its host name and its pid, no label. Both are read once
    /// per process and shared: every acquire records them, and a `getpid` and
    /// a copy of the name per acquire cost more than the rest of the record.
    /// (A child forked after the first read records its parent's pid.)
    pub fn this_process() -> HolderMeta {
        static ME: OnceLock<HolderMeta> = OnceLock::new();
        ME.get_or_init(|| {
            let read = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .or_else(|_| std::fs::read_to_string("/etc/hostname"))
                .unwrap_or_default();
            let host = read.trim();
            // A host name never holds spaces; anything else is not one.
            let host =
                if host.is_empty() || host.len() > MAX_HOST || !host.chars().all(is_host_char) {
                    "unknown-host"
                } else {
                    host
                };
            HolderMeta {
                host: host.into(),
                pid: std::process::id(),
                label: None,
            }
        })
        .clone()
    }

    /// The same holder with `label` (already checked by [`HolderMeta::check_label`]).
    pub fn labelled(mut self, label: Option<&str>) -> HolderMeta {
        self.label = label.map(str::to_owned);
        self
    }

    /// Refuses a label that is empty, over [`HolderMeta::MAX_LABEL`] bytes or
    /// holds a control character, saying which.
    pub fn check_label(label: &str) -> Result<(), LockError> {
        match label_problem(label) {
            Some(why) => Err(LockError::invalid_options(format!("holder label {why}"))),
            None => Ok(()),
        }
    }

    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The app's label, if it gave one.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The stored form, one line: `host=web-3 pid=4121 label=billing`.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// An upper bound of the stored form's length.
    fn encoded_len(&self) -> usize {
        // "host=" " pid=" (10 digits at most) " label="
        self.host.len() + self.label.as_deref().map_or(0, str::len) + 32
    }

    /// Appends the stored form to `out`, without `format!`: every acquire
    /// writes it, and the formatting machinery cost more than the copies.
    fn encode_into(&self, out: &mut String) {
        out.push_str("host=");
        out.push_str(&self.host);
        out.push_str(" pid=");
        let mut pid = [0_u8; 10];
        out.push_str(decimal(self.pid, &mut pid));
        if let Some(label) = &self.label {
            out.push_str(" label=");
            out.push_str(label);
        }
    }

    /// Reads [`HolderMeta::encode`]'s form back; `None` for anything else
    /// (data another client wrote, a lock taken before holders were recorded).
    pub fn decode(stored: &str) -> Option<HolderMeta> {
        let rest = stored.strip_prefix("host=")?;
        let (host, rest) = rest.split_once(" pid=")?;
        let (pid, label) = match rest.split_once(" label=") {
            Some((pid, label)) => (pid, Some(label)),
            None => (rest, None),
        };
        let host_ok = !host.is_empty() && host.len() <= MAX_HOST && host.chars().all(is_host_char);
        if !host_ok || label.is_some_and(|l| label_problem(l).is_some()) {
            return None;
        }
        Some(HolderMeta {
            host: host.into(),
            pid: pid.parse().ok()?,
            label: label.map(str::to_owned),
        })
    }

    /// An owner value carrying this metadata after `owner`, for layouts that
    /// store one string per holder (a Redis value): `owner host=… pid=…`.
    pub fn tag_owner(&self, owner: &str) -> String {
        let mut tagged = String::with_capacity(owner.len() + 1 + self.encoded_len());
        tagged.push_str(owner);
        tagged.push(' ');
        self.encode_into(&mut tagged);
        tagged
    }

    /// Splits a value [`HolderMeta::tag_owner`] wrote into the owner and its
    /// metadata; an untagged value is all owner.
    pub fn split_owner(value: &str) -> (&str, Option<HolderMeta>) {
        match value.split_once(' ') {
            Some((owner, meta)) => match HolderMeta::decode(meta) {
                Some(meta) => (owner, Some(meta)),
                None => (value, None),
            },
            None => (value, None),
        }
    }
}

/// What is wrong with a label, if anything.
pub(crate) fn label_problem(label: &str) -> Option<String> {
    if label.is_empty() {
        Some("is empty; leave it unset for none".to_owned())
    } else if label.len() > HolderMeta::MAX_LABEL {
        Some(format!(
            "is {} bytes; use at most {}",
            label.len(),
            HolderMeta::MAX_LABEL
        ))
    } else if label.chars().any(char::is_control) {
        Some("holds a control character (a newline, a tab...); use printable text".to_owned())
    } else {
        None
    }
}

/// `n` in decimal, written into `buf` (a u32 has at most 10 digits).
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_graphic()
}

impl fmt::Display for HolderMeta {
    /// `host web-3 pid 4121 (billing)`, as the `Busy` error and `distlock
    /// status` show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host {} pid {}", self.host, self.pid)?;
        match &self.label {
            Some(label) => write!(f, " ({label})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_printable() {
        assert!(HolderMeta::check_label("billing nightly").is_ok());
        for bad in ["", "a\nb", "tab\there", &"x".repeat(65)] {
            let err = HolderMeta::check_label(bad).unwrap_err().to_string();
            assert!(err.contains("holder label"), "{err}");
        }
    }

    #[test]
    fn foreign_data_is_no_metadata() {
        for foreign in [
            "",
            "10.0.0.7",
            "host=",
            "host=a pid=x",
            "host=a b pid=1",
            "host=a pid=1 label=\n",
        ] {
            assert_eq!(HolderMeta::decode(foreign), None, "{foreign:?}");
        }
        let (owner, meta) = HolderMeta::split_owner("abc host=web-3 pid=7 label=a b");
        assert_eq!(
            (owner, meta.map(|m| m.to_string())),
            ("abc", Some("host web-3 pid 7 (a b)".into()))
        );
        assert_eq!(HolderMeta::split_owner("abc"), ("abc", None));
    }

    #[test]
    fn a_url_label_is_a_default_and_is_checked() {
        use crate::AcquireOptions;
        use crate::toolkit::LockUrl;
        let read = |url: &str| AcquireOptions::new().read(&mut LockUrl::parse("redis", url)?);
        let opts = read("redis://h/0?label=billing").unwrap();
        assert_eq!(opts.get_label(), Some("billing"));
        let mine = AcquireOptions::new().label("mine").or_defaults(&opts);
        assert_eq!(mine.get_label(), Some("mine"));
        let err = read("redis://h/0?label=").unwrap_err().to_string();
        assert!(err.contains("label") && err.contains("empty"), "{err}");
    }

    #[test]
    fn every_pid_and_label_round_trip() {
        for pid in [0, 7, 10, 4121, u32::MAX] {
            for label in [None, Some("a b")] {
                let meta = HolderMeta {
                    host: "web-3".into(),
                    pid,
                    label: label.map(str::to_owned),
                };
                let stored = meta.encode();
                assert!(stored.len() <= meta.encoded_len(), "{stored}");
                assert_eq!(HolderMeta::decode(&stored), Some(meta.clone()));
                let tagged = meta.tag_owner("abc");
                assert_eq!(tagged, format!("abc {stored}"));
                assert_eq!(HolderMeta::split_owner(&tagged), ("abc", Some(meta)));
            }
        }
    }

    #[test]
    fn this_process_is_read_once_and_round_trips() {
        let me = HolderMeta::this_process();
        assert_eq!(me.pid(), std::process::id());
        assert!(!me.host().is_empty() && !me.host().contains(' '));
        assert_eq!(HolderMeta::decode(&me.encode()), Some(me));
    }
}
