//! [`ExecError`]: why an executor call did not produce an outcome, each variant saying what
//! the caller may do next.
//!
//! | variant | applied? | caller's next step |
//! |---|---|---|
//! | `Rejected` | nothing | fix the request (or, for a conflict, try again later) |
//! | `Unavailable` | nothing | retry later |
//! | `Busy` | nothing | retry later: too much already waits to run |
//! | `Indeterminate` | maybe some steps | retry with the same id; a sweeper finishes it anyway |
//! | `Corrupted` | unknown | a human: a store returned damaged data |
//! | `Violation` | unknown | a human: a store answered what the protocol forbids |
//! | `Unroutable` | nothing | a human: the router cannot place a record (configuration) |

use crate::router::RouteError;
use std::fmt;
use xfer_core::{Code, Rejection};
use xfer_store::StoreError;

/// Why an executor call failed. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// Refused for a named reason; nothing changed.
    Rejected(Rejection),
    /// The stores could not be reached and nothing was applied. Retry later.
    Unavailable(String),
    /// Refused before anything was applied because a bound on what waits to run was
    /// reached (a queue, the transfers running in the background). Retry later.
    Busy(String),
    /// Gave up with some steps possibly applied. Retry with the same id (every step is
    /// idempotent); a transfer left unfinished is finished by a sweeper.
    Indeterminate(String),
    /// A store returned damaged data. Needs a human.
    Corrupted(String),
    /// A store answered something the protocol forbids (a broken invariant). Needs a human.
    Violation(String),
    /// The router cannot place a record: a configuration error. Nothing was sent.
    Unroutable(RouteError),
}

impl ExecError {
    /// The log could not be made durable up to what the answers rest on (`e`): whether
    /// they survive a crash is not known.
    pub fn unsynced(e: &StoreError) -> ExecError {
        ExecError::Indeterminate(format!("the log could not be synced: {e}"))
    }

    /// True when calling again (with the same id) may succeed: the stores were unreachable,
    /// the outcome is unknown, or an account was busy with transfers in flight.
    pub fn is_retryable(&self) -> bool {
        match self {
            ExecError::Unavailable(_) | ExecError::Busy(_) | ExecError::Indeterminate(_) => true,
            ExecError::Rejected(r) => r.code == Code::AccountHasTransfersInFlight,
            ExecError::Corrupted(_) | ExecError::Violation(_) | ExecError::Unroutable(_) => false,
        }
    }

    /// The rejection code, if this is a rejection.
    pub fn code(&self) -> Option<Code> {
        match self {
            ExecError::Rejected(r) => Some(r.code),
            _ => None,
        }
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Rejected(r) => write!(f, "rejected: {r}"),
            ExecError::Unavailable(m) => write!(f, "unavailable, nothing applied: {m}"),
            ExecError::Busy(m) => write!(f, "busy, nothing applied: {m}"),
            ExecError::Indeterminate(m) => {
                write!(f, "outcome unknown, retry with the same id: {m}")
            }
            ExecError::Corrupted(m) => write!(f, "store corrupted: {m}"),
            ExecError::Violation(m) => write!(f, "protocol violation: {m}"),
            ExecError::Unroutable(RouteError::AssetNeeded(id)) => {
                write!(
                    f,
                    "cannot place account {id}: an asset rule needs the op to name its asset"
                )
            }
        }
    }
}

impl std::error::Error for ExecError {}

impl From<Rejection> for ExecError {
    fn from(r: Rejection) -> Self {
        ExecError::Rejected(r)
    }
}

impl From<RouteError> for ExecError {
    fn from(e: RouteError) -> Self {
        ExecError::Unroutable(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retryable() {
        let busy = Rejection::new(Code::AccountHasTransfersInFlight, "account_id", "busy");
        let bad = Rejection::new(Code::ExceedsAvailable, "", "poor");
        assert!(ExecError::Unavailable("x".into()).is_retryable());
        assert!(ExecError::Indeterminate("x".into()).is_retryable());
        assert!(ExecError::Rejected(busy).is_retryable());
        assert!(!ExecError::Rejected(bad).is_retryable());
        assert!(!ExecError::Corrupted("x".into()).is_retryable());
        assert!(!ExecError::Violation("x".into()).is_retryable());
    }
}
