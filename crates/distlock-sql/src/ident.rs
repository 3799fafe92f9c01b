//! SQL identifiers (table and column names) checked before they are placed into
//! SQL text: the only text this crate ever splices into a statement.

use crate::error::ANY_SQL;
use distlock_core::LockError;
use distlock_core::toolkit::sql_identifier_problem;

/// A table or column name that passed [`Ident::new`] (the toolkit's
/// [`sql_identifier_problem`]): 1 to 64 ASCII letters,
/// digits, `_` or `$`, not starting with a digit. It is always quoted when
/// spliced, so reserved words work too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ident(String);

impl Ident {
    /// Validates `name`, naming `what` (for example "table name") in the
    /// [`LockError::Config`] that refuses it.
    pub fn new(name: &str, what: &str) -> Result<Self, LockError> {
        match sql_identifier_problem(name, what, "distlock_fences") {
            None => Ok(Ident(name.to_owned())),
            Some(reason) => Err(LockError::config(ANY_SQL, reason)),
        }
    }

    /// A name this crate knows to be valid (its constants, checked in tests).
    pub fn known(name: &'static str) -> Self {
        Ident(name.to_owned())
    }

    /// The name as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_name_is_valid() {
        let name = crate::SqlFence::DEFAULT_TABLE;
        assert_eq!(Ident::new(name, "table name").unwrap(), Ident::known(name));
    }

    #[test]
    fn only_plain_identifiers_pass() {
        for good in ["t", "_x", "Fences_2", "a$b", "$t", &"a".repeat(64)] {
            assert!(Ident::new(good, "table name").is_ok(), "{good}");
        }
        for bad in [
            "",
            "1t",
            "t; DROP TABLE x",
            "a`b",
            "a.b",
            "a-b",
            "é",
            "a b",
            "a\0",
            "a'b",
            &"a".repeat(65),
        ] {
            match Ident::new(bad, "table name") {
                Err(LockError::Config { reason, .. }) => {
                    assert!(reason.starts_with("table name `"), "{reason}");
                }
                other => panic!("{bad:?} should be refused, got {other:?}"),
            }
        }
    }
}
