//! xfer's embedded durable store, the default that needs nothing installed (SPEC §4).
//!
//! In progress (issue 3). What is here is the foundation every design of the store needs:
//!
//! - [`fs`]: the file system as a trait, with [`RealFs`] and [`SimFs`], a simulated disk
//!   that keeps written and synced bytes apart so tests can cut the power at any sync.
//! - [`frame`]: the record framing: length, checksum, sequence number.
//! - [`log`]: [`Log`], the write-ahead log: append, group commit, segment rotation,
//!   recovery that drops a torn tail and reports corruption anywhere else by file and
//!   offset, and a handle poisoned by a failed sync.
//!
//! The byte layout and the crash analysis are in `docs/storage-format.md`.

pub mod frame;
pub mod fs;
pub mod log;

pub use fs::{Fs, LogFile, RealFs, SimFs};
pub use log::{Log, LogConfig, LogError, Recovered};
