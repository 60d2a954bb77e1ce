//! xfer's embedded durable store, the default that needs nothing installed (SPEC §4).
//!
//! - [`store`]: [`Embedded`], several shards in one data directory, each a
//!   [`Store`](xfer_store::Store): records in memory under `MemoryShard`'s rules, every
//!   write logged and synced (group commit) before it is answered, checkpoints into the
//!   tables, recovery by replaying the log over the last checkpoint.
//! - [`log`]: [`Log`], the write-ahead log: append, group commit, segment rotation,
//!   recovery that drops a torn tail and reports corruption anywhere else by file and
//!   offset, and a handle poisoned by a failed sync.
//! - [`tables`]: the checkpoint tables in fjall: accounts and live transfers loaded at
//!   start, finished transfers and history read on demand.
//! - [`codec`]: log entries and table keys and values.
//! - [`frame`]: the record framing: length, checksum, sequence number.
//! - [`fs`]: the file system as a trait, with [`RealFs`] and [`SimFs`], a simulated disk
//!   that keeps written and synced bytes apart so tests can cut the power at any sync.
//!
//! The byte layout and the crash analysis are in `docs/storage-format.md`.

pub mod codec;
pub mod done_filter;
pub mod frame;
pub mod fs;
pub mod log;
pub mod store;
pub mod tables;

pub use fs::{Fs, LogFile, RealFs, SimFs};
pub use log::{Log, LogConfig, LogError, Recovered, SyncCount};
pub use store::{Embedded, EmbeddedConfig, EmbeddedShard, OpenError, OpenReport};

/// A transfer of one unit of USD from account `a` to account `b`, with id `id` (the
/// crate's unit tests).
#[cfg(test)]
pub(crate) fn one_usd_a_to_b(id: &str) -> xfer_core::TransferSpec {
    use xfer_core::{AccountId, Amount, AssetCode, Posting, TransferId, TransferKind};
    xfer_core::TransferSpec {
        id: TransferId::new(id).unwrap(),
        postings: vec![Posting {
            from: AccountId::new("a").unwrap(),
            to: AccountId::new("b").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: Amount::new(1, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 10_000,
    }
}
