//! How every store call answers: a [`BoxFuture`] of a result whose error, [`StoreError`],
//! says what the caller may do next.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the trait is used as `dyn Store` by the router.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a store call failed. Each variant says what the caller may do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Nothing was applied (the store said so, or the request never left). Retry later.
    Unavailable(String),
    /// Some prefix of the batch may have been applied (a timeout, a lost reply). Retry the
    /// same ops: every op is idempotent.
    Indeterminate(String),
    /// A record failed its checks (bad checksum, impossible value). Needs a human.
    Corrupted(String),
    /// This store does not offer the call (a read some backends lack); retrying cannot help.
    Unsupported(String),
}

impl StoreError {
    /// True when retrying the same ops later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, StoreError::Corrupted(_) | StoreError::Unsupported(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Indeterminate(m) => write!(f, "store outcome unknown: {m}"),
            StoreError::Corrupted(m) => write!(f, "store corrupted: {m}"),
            StoreError::Unsupported(m) => write!(f, "not offered by this store: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}
