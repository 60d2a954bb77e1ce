//! Extending a hold: its expiry moved later before it passes (`TransferOp::Extend`), to an
//! instant or by a time from now.

use crate::service::Service;
use xfer_core::transfer::HOLD_TTL_MS_MAX;
use xfer_core::{Code, Rejection, Timestamp, TransferId, TransferRecord};
use xfer_engine::ExecError;

/// Where a hold's new expiry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewExpiry {
    /// At this instant (`expires_at_ms`).
    At(Timestamp),
    /// This long from the server's now (`ttl_ms`).
    In(u64),
}

impl NewExpiry {
    fn field(self) -> &'static str {
        match self {
            NewExpiry::At(_) => "expires_at_ms",
            NewExpiry::In(_) => "ttl_ms",
        }
    }
}

impl Service {
    /// Moves the hold `id`'s expiry later, to `to`, before it passes; answers the hold.
    /// Refused, changing nothing, when `to` is not after now or more than
    /// [`HOLD_TTL_MS_MAX`] after it, when the hold expires later already (an expiry is
    /// never brought forward; the same `expires_at_ms` again answers the hold), and when
    /// it is settled, expired or not held.
    pub async fn extend(&self, id: TransferId, to: NewExpiry) -> Result<TransferRecord, ExecError> {
        let now = self.now();
        let until = match to {
            NewExpiry::At(t) => t,
            NewExpiry::In(ms) => now.plus_ms(ms),
        };
        let out_of_range = |message: String| {
            Err(Rejection::new(Code::HoldExpiryOutOfRange, to.field(), message).into())
        };
        if until <= now {
            return out_of_range(format!(
                "{} is not after now ({})",
                until.as_ms(),
                now.as_ms()
            ));
        }
        if until > now.plus_ms(HOLD_TTL_MS_MAX) {
            return out_of_range(format!(
                "{} is more than {HOLD_TTL_MS_MAX} ms after now ({})",
                until.as_ms(),
                now.as_ms()
            ));
        }
        let r = self.executor().extend(id.clone(), until).await?;
        match r.hold_expires_at {
            Some(expiry) if expiry > until => out_of_range(format!(
                "{id} expires at {} already: an expiry only moves later",
                expiry.as_ms()
            )),
            _ => Ok(r),
        }
    }
}
