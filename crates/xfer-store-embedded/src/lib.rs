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
