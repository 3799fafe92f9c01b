//! SQL identifiers (table and column names): the only text a SQL adapter ever
//! splices into a statement, so nothing but a plain identifier may pass.

/// The longest identifier MySQL and MariaDB accept (PostgreSQL's is 63).
pub const SQL_IDENTIFIER_MAX: usize = 64;

/// Why `name` is not a plain SQL identifier (1 to [`SQL_IDENTIFIER_MAX`] ASCII
/// letters, digits, `_` or `$`, not starting with a digit), naming it as
/// `what` and suggesting `example`; `None` when it is one.
///
/// ```
/// use distlock_core::toolkit::sql_identifier_problem;
/// assert!(sql_identifier_problem("distlock_locks", "table name", "locks").is_none());
/// let why = sql_identifier_problem("locks; DROP TABLE x", "table name", "locks").unwrap();
/// assert!(why.contains("not a plain identifier"));
/// ```
pub fn sql_identifier_problem(name: &str, what: &str, example: &str) -> Option<String> {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$');
    let rest_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if first_ok && rest_ok && name.len() <= SQL_IDENTIFIER_MAX {
        return None;
    }
    let shown: String = name
        .chars()
        .take(80)
        .flat_map(char::escape_default)
        .collect();
    Some(format!(
        "{what} `{shown}` is not a plain identifier; use 1 to {SQL_IDENTIFIER_MAX} ASCII \
         letters, digits, `_` or `$`, not starting with a digit (for example `{example}`)"
    ))
}
