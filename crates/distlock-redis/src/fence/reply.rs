//! The fence scripts' replies, read without trusting them: anything the
//! contract does not allow is a [`CommandError::Reply`], never a panic.

use crate::error::CommandError;
use distlock_core::FencingToken;
use redis::Value;
use std::collections::BTreeMap;

/// A fenced script's `{status, value}`.
#[derive(Debug)]
pub(super) enum Reply {
    /// `{'stale', highest}`: refused, nothing ran.
    Stale(FencingToken),
    /// `{'ok', value}`: written; a user script's value (nil when it returned none).
    Ok(Value),
    /// `{'added', before}`: the delta was added to `before`.
    Added(i64),
    /// `{'floor', current}`: the sum would be below the floor; nothing written.
    Floor(i64),
    /// `{'overflow', current}`: the sum would leave i64; nothing written.
    Overflow(i64),
    /// `{'notint', ''}`: the value is a string that is not an integer.
    NotInteger,
    /// `{'wrongtype', type}`: the key holds this other Redis type.
    WrongType(String),
    /// `{'failed', message}`: a user script's body returned an error.
    Failed(String),
}

/// The read script's answer.
#[derive(Debug)]
pub(super) enum Read {
    Missing,
    Text(String),
    Hash(BTreeMap<String, String>),
    /// What else the key holds: "a list", "bytes that are not UTF-8"...
    Other(String),
}

/// A reply's description for errors, cut short: a value may be a megabyte.
fn describe(value: &Value) -> String {
    let text = format!("{value:?}");
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

fn unexpected(what: &str, value: &Value) -> CommandError {
    CommandError::Reply(format!("{what} {}", describe(value)))
}

/// A string reply, if it is one and is UTF-8.
fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        Value::VerbatimString { text, .. } => Some(text),
        _ => None,
    }
}

fn integer(value: &Value) -> Result<i64, CommandError> {
    text(value)
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| unexpected("a fence script gave the count", value))
}

/// A token as the fence record holds it: canonical decimal.
pub(super) fn token(text: &str) -> Option<FencingToken> {
    let token = text.parse::<u64>().ok()?;
    (token.to_string() == text).then_some(FencingToken::new(token))
}

/// The items of an array reply, and its first item as text.
fn status(reply: Value) -> Result<(String, std::vec::IntoIter<Value>), CommandError> {
    let Value::Array(items) = reply else {
        return Err(unexpected("a fence script returned", &reply));
    };
    let mut items = items.into_iter();
    let first = items.next().unwrap_or(Value::Nil);
    match text(&first) {
        Some(status) => Ok((status.to_owned(), items)),
        None => Err(unexpected("a fence script returned the status", &first)),
    }
}

/// Reads a fenced write's reply.
pub(super) fn parse(reply: Value) -> Result<Reply, CommandError> {
    let (status, mut items) = status(reply)?;
    let value = items.next().unwrap_or(Value::Nil);
    Ok(match status.as_str() {
        "stale" => match text(&value).and_then(token) {
            Some(highest) => Reply::Stale(highest),
            None => return Err(unexpected("the fence check returned the token", &value)),
        },
        "ok" => Reply::Ok(value),
        "added" => Reply::Added(integer(&value)?),
        "floor" => Reply::Floor(integer(&value)?),
        "overflow" => Reply::Overflow(integer(&value)?),
        "notint" => Reply::NotInteger,
        "wrongtype" => Reply::WrongType(text(&value).unwrap_or("?").to_owned()),
        "failed" => Reply::Failed(text(&value).unwrap_or("?").to_owned()),
        other => {
            return Err(CommandError::Reply(format!(
                "fence script status {other:?}"
            )));
        }
    })
}

/// Reads the read script's reply.
pub(super) fn read(reply: Value) -> Result<Read, CommandError> {
    let (kind, items) = status(reply)?;
    let not_utf8 = || Read::Other("bytes that are not UTF-8".into());
    Ok(match kind.as_str() {
        "none" => Read::Missing,
        "string" => match items.as_slice() {
            [value] => text(value).map_or_else(not_utf8, |text| Read::Text(text.to_owned())),
            _ => return Err(CommandError::Reply("GET in the read script".into())),
        },
        "hash" => {
            let items: Vec<Value> = items.collect();
            let mut fields = BTreeMap::new();
            for pair in items.chunks(2) {
                match pair {
                    [field, value] => match (text(field), text(value)) {
                        (Some(field), Some(value)) => {
                            fields.insert(field.to_owned(), value.to_owned());
                        }
                        _ => return Ok(not_utf8()),
                    },
                    _ => return Err(CommandError::Reply("HGETALL in the read script".into())),
                }
            }
            Read::Hash(fields)
        }
        other => Read::Other(format!("a {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn replies_outside_the_contract_are_errors_not_panics() {
        for reply in [
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![bulk("stale")]),
            Value::Array(vec![bulk("stale"), bulk("-1")]),
            Value::Array(vec![bulk("stale"), bulk("007")]),
            Value::Array(vec![bulk("stale"), bulk("18446744073709551616")]),
            Value::Array(vec![bulk("added"), bulk("1.5")]),
            Value::Array(vec![bulk("floor")]),
            Value::Array(vec![bulk("what")]),
            Value::Array(vec![Value::BulkString(vec![0xff])]),
        ] {
            assert!(parse(reply.clone()).is_err(), "{reply:?}");
        }
        assert!(read(Value::Array(vec![bulk("string")])).is_err());
        assert!(read(Value::Array(vec![bulk("hash"), bulk("f")])).is_err());
    }

    #[test]
    fn tokens_and_counters_are_read_exactly() {
        let max = u64::MAX.to_string();
        match parse(Value::Array(vec![bulk("stale"), bulk(&max)])) {
            Ok(Reply::Stale(token)) => assert_eq!(token.get(), u64::MAX),
            other => panic!("{other:?}"),
        }
        let min = i64::MIN.to_string();
        match parse(Value::Array(vec![bulk("floor"), bulk(&min)])) {
            Ok(Reply::Floor(current)) => assert_eq!(current, i64::MIN),
            other => panic!("{other:?}"),
        }
        let long = describe(&bulk(&"x".repeat(10_000)));
        assert!(long.len() < 300, "{long}");
    }
}
