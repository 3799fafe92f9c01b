//! One raw RESP round trip, for the launchers' own checks (a Sentinel's view of
//! its primary, a primary's replication state) without a Redis client crate.

use super::redis::resp_command;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest reply read: far above any INFO section or SENTINEL answer.
const MAX_REPLY: usize = 1 << 20;

/// Sends `args` to `addr` (after `AUTH password`, when given) and returns the
/// reply's values flattened in order: an array's elements, a bulk string's
/// text, a status or integer as written, an error with its leading `-`. A nil
/// is left out. `None` when the server cannot be reached or the reply is not
/// RESP.
pub(crate) async fn query(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
) -> Option<Vec<String>> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend_from_slice(&resp_command(&["AUTH", password]));
    }
    request.extend_from_slice(&resp_command(args));
    stream.write_all(&request).await.ok()?;
    let replies = if password.is_some() { 2 } else { 1 };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let mut values = Vec::new();
        let mut at = 0;
        let mut complete = true;
        for _ in 0..replies {
            values.clear();
            match parse(&buf, at, &mut values) {
                Parsed::Done(next) => at = next,
                Parsed::Incomplete => {
                    complete = false;
                    break;
                }
                Parsed::Invalid => return None,
            }
        }
        if complete {
            return Some(values);
        }
        if buf.len() > MAX_REPLY {
            return None;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

enum Parsed {
    Done(usize),
    Incomplete,
    Invalid,
}

/// Parses one reply starting at `at`, pushing its values into `out`.
fn parse(buf: &[u8], at: usize, out: &mut Vec<String>) -> Parsed {
    let Some(line_end) = buf
        .get(at..)
        .and_then(|rest| rest.windows(2).position(|pair| pair == b"\r\n"))
    else {
        return Parsed::Incomplete;
    };
    let line = String::from_utf8_lossy(&buf[at + 1..at + line_end]).into_owned();
    let next = at + line_end + 2;
    match buf[at] {
        b'+' | b':' => {
            out.push(line);
            Parsed::Done(next)
        }
        b'-' => {
            out.push(format!("-{line}"));
            Parsed::Done(next)
        }
        b'$' => match line.parse::<i64>() {
            Ok(len) if len < 0 => Parsed::Done(next),
            Ok(len) => {
                let Some(end) = usize::try_from(len)
                    .ok()
                    .and_then(|len| next.checked_add(len))
                else {
                    return Parsed::Invalid;
                };
                if buf.len() < end.saturating_add(2) {
                    return Parsed::Incomplete;
                }
                out.push(String::from_utf8_lossy(&buf[next..end]).into_owned());
                Parsed::Done(end + 2)
            }
            Err(_) => Parsed::Invalid,
        },
        b'*' => match line.parse::<i64>() {
            Ok(count) => {
                let mut at = next;
                for _ in 0..count.max(0) {
                    match parse(buf, at, out) {
                        Parsed::Done(after) => at = after,
                        other => return other,
                    }
                }
                Parsed::Done(at)
            }
            Err(_) => Parsed::Invalid,
        },
        _ => Parsed::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        match parse(text.as_bytes(), 0, &mut out) {
            Parsed::Done(end) if end == text.len() => Some(out),
            _ => None,
        }
    }

    #[test]
    fn replies_flatten_in_order() {
        assert_eq!(
            values("*2\r\n$9\r\n10.64.0.3\r\n$4\r\n6379\r\n").unwrap(),
            ["10.64.0.3", "6379"]
        );
        assert_eq!(values("+OK\r\n").unwrap(), ["OK"]);
        assert_eq!(values("-ERR no\r\n").unwrap(), ["-ERR no"]);
        assert!(values("*-1\r\n").unwrap().is_empty());
        assert_eq!(values("$5\r\na\r\nbc\r\n").unwrap(), ["a\r\nbc"]);
    }

    #[test]
    fn partial_and_garbage_replies_are_told_apart() {
        let mut out = Vec::new();
        assert!(matches!(
            parse(b"*2\r\n$3\r\nab", 0, &mut out),
            Parsed::Incomplete
        ));
        assert!(matches!(parse(b"?what\r\n", 0, &mut out), Parsed::Invalid));
        assert!(matches!(parse(b"$x\r\n", 0, &mut out), Parsed::Invalid));
    }
}
