//! What the database backends (PostgreSQL, MySQL, MongoDB, Redis) share when they open a
//! shard: why it could not be opened, and which names they take for the schema, database
//! or prefix a shard lives in.

use std::fmt;

/// Why a database shard could not be opened.
#[derive(Debug)]
pub struct OpenError {
    /// The backend: `postgres`, `mysql`, `mongodb` or `redis`.
    pub store: &'static str,
    /// What went wrong.
    pub failure: OpenFailure,
}

/// What went wrong opening a shard.
#[derive(Debug)]
pub enum OpenFailure {
    /// A setting is wrong: which one, and why.
    Config {
        /// The setting.
        field: &'static str,
        /// Why it is refused.
        why: String,
    },
    /// The server could not be reached or refused the connection.
    Unreachable(String),
    /// The server answered, but the shard could not be made ready on it (migrations,
    /// functions, indexes).
    Setup(String),
}

impl OpenError {
    /// A setting of `store` is refused.
    pub fn config(store: &'static str, field: &'static str, why: impl Into<String>) -> OpenError {
        let why = why.into();
        OpenError {
            store,
            failure: OpenFailure::Config { field, why },
        }
    }

    /// `store`'s server could not be reached.
    pub fn unreachable(store: &'static str, why: impl Into<String>) -> OpenError {
        OpenError {
            store,
            failure: OpenFailure::Unreachable(why.into()),
        }
    }

    /// The shard could not be made ready on `store`'s server.
    pub fn setup(store: &'static str, why: impl Into<String>) -> OpenError {
        OpenError {
            store,
            failure: OpenFailure::Setup(why.into()),
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store;
        match &self.failure {
            OpenFailure::Config { field, why } => write!(f, "{store} store: {field}: {why}"),
            OpenFailure::Unreachable(m) => write!(f, "{store} store: cannot connect: {m}"),
            OpenFailure::Setup(m) => write!(f, "{store} store: cannot prepare the shard: {m}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// Refuses `name` for `field` unless it is a plain lower-case identifier
/// (`[a-z_][a-z0-9_]*`) of at most `max` bytes: it is written into statements and names as
/// it is.
pub fn plain_name(
    store: &'static str,
    field: &'static str,
    name: &str,
    max: usize,
) -> Result<(), OpenError> {
    let mut chars = name.chars();
    let plain = name.len() <= max
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        return Ok(());
    }
    Err(OpenError::config(
        store,
        field,
        format!(
            "{name:?} is not a plain lower-case identifier ([a-z_][a-z0-9_]*, at most {max} bytes)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lower_case_names_are_taken() {
        assert!(plain_name("mysql", "database", "xfer_shard_0", 64).is_ok());
        for bad in ["", "Xfer", "0x", "a-b", "a`b", "a.b", &"a".repeat(65)] {
            let e = plain_name("mysql", "database", bad, 64)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("mysql store: database: "), "{e}");
        }
    }
}
