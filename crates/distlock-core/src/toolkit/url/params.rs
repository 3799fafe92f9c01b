//! The typed parameter getters of [`LockUrl`] and the check that every
//! parameter was taken: apart from the grammar because this is what each adapter
//! calls, and what turns a typo into an error naming the known parameters.

use super::redact::{MASK, is_secret_param, shorten};
use super::{LockError, LockUrl};
use crate::toolkit::duration::parse_duration;
use std::time::Duration;

impl LockUrl {
    /// Takes parameter `name` as text.
    pub fn string(&mut self, name: &'static str) -> Option<String> {
        self.known.push(name);
        self.params
            .iter_mut()
            .find(|p| p.name == name && !p.taken)
            .map(|p| {
                p.taken = true;
                p.value.clone()
            })
    }

    /// Takes parameter `name` as a duration written `250ms`, `30s`, `5m` or `1h`.
    /// Zero is refused: no timeout or ttl here means "never".
    pub fn duration(&mut self, name: &'static str) -> Result<Option<Duration>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match parse_duration(&value) {
            Ok(d) if d.is_zero() => Err(self.param_error(name, &value, "must be more than zero")),
            Ok(d) => Ok(Some(d)),
            Err(why) => Err(self.param_error(name, &value, &why)),
        }
    }

    /// Takes parameter `name` as a boolean: `true`/`false`, `1`/`0`, `yes`/`no`.
    pub fn bool(&mut self, name: &'static str) -> Result<Option<bool>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match value.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(self.param_error(name, &value, "is not true or false")),
        }
    }

    /// Takes parameter `name` and parses it with `FromStr`; `form` says what is
    /// accepted ("a replica count", "a database number 0-15").
    pub fn parse_param<T: std::str::FromStr>(
        &mut self,
        name: &'static str,
        form: &str,
    ) -> Result<Option<T>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        value
            .parse()
            .map(Some)
            .map_err(|_| self.param_error(name, &value, &format!("is not {form}")))
    }

    /// Takes parameter `name`, which must be one of `choices`.
    pub fn choice(
        &mut self,
        name: &'static str,
        choices: &[&'static str],
    ) -> Result<Option<&'static str>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match choices.iter().find(|c| **c == value) {
            Some(choice) => Ok(Some(choice)),
            None => Err(self.param_error(
                name,
                &value,
                &format!("is not one of {}", choices.join(", ")),
            )),
        }
    }

    /// Refuses a parameter that was renamed, naming its new spelling.
    pub fn renamed(&mut self, old: &'static str, new: &'static str) -> Result<(), LockError> {
        if self.params.iter().any(|p| p.name == old) {
            return Err(self.error(format_args!(
                "URL parameter `{old}` is now called `{new}`; write {new}=…"
            )));
        }
        Ok(())
    }

    /// Ends parameter reading: any parameter nobody took is an error that lists
    /// the known names (and the closest one, for a typo).
    pub fn finish(&self) -> Result<(), LockError> {
        let Some(unknown) = self.params.iter().find(|p| !p.taken) else {
            return Ok(());
        };
        let mut known = self.known.clone();
        known.sort_unstable();
        known.dedup();
        let shown = shorten(&unknown.name);
        let hint = known
            .iter()
            .filter(|k| edit_distance(k, &unknown.name) <= 2)
            .min_by_key(|k| edit_distance(k, &unknown.name))
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        let known = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        Err(self.error(format_args!(
            "unknown URL parameter `{shown}`{hint}; known parameters: {known}"
        )))
    }

    /// The error for parameter `name` whose `value` is refused `why` (a secret
    /// parameter's value is masked).
    pub fn param_error(&self, name: &str, value: &str, why: &str) -> LockError {
        let value = if is_secret_param(name) {
            MASK.to_owned()
        } else {
            shorten(value)
        };
        self.error(format_args!("URL parameter {name}={value} {why}"))
    }
}

/// Levenshtein distance, for "did you mean" on misspelled parameters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let above = row[j + 1];
            row[j + 1] = (prev + cost).min(row[j] + 1).min(above + 1);
            prev = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::super::tests::reason;
    use super::*;

    #[test]
    fn typed_getters_name_the_parameter_and_the_form() {
        let mut url =
            LockUrl::parse("x", "redis://h?ttl=soon&n=x&on=maybe&mode=b&zero=0s").unwrap();
        let r = reason(url.duration("ttl"));
        assert!(r.contains("ttl=soon") && r.contains("250ms"), "{r}");
        assert!(reason(url.parse_param::<u32>("n", "a count")).contains("n=x is not a count"));
        assert!(reason(url.bool("on")).contains("on=maybe is not true or false"));
        assert!(reason(url.choice("mode", &["a", "c"])).contains("one of a, c"));
        assert!(reason(url.duration("zero")).contains("more than zero"));
        assert_eq!(url.duration("absent").unwrap(), None);
    }

    #[test]
    fn unknown_parameters_are_refused_with_the_known_ones() {
        let mut url = LockUrl::parse("mysql", "mysql://h/db?stratgy=for_update").unwrap();
        let _ = url.string("strategy");
        let _ = url.duration("ttl");
        let r = reason(url.finish());
        assert!(r.contains("unknown URL parameter `stratgy`"), "{r}");
        assert!(r.contains("did you mean `strategy`"), "{r}");
        assert!(r.contains("known parameters: strategy, ttl"), "{r}");
        let mut url = LockUrl::parse("x", "x://h?timeout=1s").unwrap();
        assert_eq!(
            url.duration("timeout").unwrap(),
            Some(Duration::from_secs(1))
        );
        url.finish().unwrap();
    }

    #[test]
    fn renamed_parameters_name_the_new_spelling() {
        let mut url = LockUrl::parse("x", "x://h?node_timeout=1s").unwrap();
        let r = reason(url.renamed("node_timeout", "timeout"));
        assert!(r.contains("now called `timeout`"), "{r}");
    }

    #[test]
    fn long_values_are_named_by_length() {
        let long = "x".repeat(100_000);
        let mut url = LockUrl::parse("x", &format!("x://h?ttl={long}")).unwrap();
        let r = reason(url.duration("ttl"));
        assert!(r.len() < 1_000 && r.contains("100000 bytes"), "{r}");
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("strategy", "stratgy"), 1);
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
