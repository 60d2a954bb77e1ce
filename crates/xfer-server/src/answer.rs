//! [`Answer`]: how the service answered one transfer request, the record as it stands.

use crate::wire::TransferOut;
use xfer_core::TransferRecord;

/// How a transfer request was answered.
#[derive(Clone, Debug)]
pub enum Answer {
    /// Terminal, held, or run by another executor now: the record.
    Record(Box<TransferRecord>),
    /// Inserted (or already there) and left to run in the background.
    Accepted(Box<TransferRecord>),
}

impl Answer {
    /// The record.
    pub fn record(&self) -> &TransferRecord {
        match self {
            Answer::Record(r) | Answer::Accepted(r) => r,
        }
    }

    /// The JSON answer.
    pub fn out(&self) -> TransferOut {
        TransferOut::from(self.record())
    }
}
