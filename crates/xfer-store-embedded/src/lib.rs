//! xfer's embedded durable store, the default that needs nothing installed (SPEC §4):
//! several shards in one data directory, each a [`Store`](xfer_store::Store) whose records
//! live in memory under `MemoryShard`'s rules, every write logged and synced (group commit)
//! before it is answered, checkpoints into tables, recovery by replaying the log over the
//! last checkpoint. The byte layout and the crash analysis are in `docs/storage-format.md`.
//!
//! One concept per module; a module uses only those listed before it.
//!
//! - [`fs`]: the file system as a trait, with [`RealFs`] and [`SimFs`], a simulated disk
//!   that keeps written and synced bytes apart so tests can cut the power at any sync.
//! - [`frame`]: the record framing: length, checksum, sequence number.
//! - [`log`]: [`Log`], the write-ahead log: append, group commit, segment rotation,
//!   recovery that drops a torn tail and reports corruption anywhere else by file and
//!   offset, and a handle poisoned by a failed sync.
//! - [`codec`]: log entries and table keys and values.
//! - [`tables`]: [`Tables`](tables::Tables), the checkpoint tables in fjall: accounts and
//!   live transfers loaded at start, finished transfers (`done`), history and tombstones
//!   each in a module of its own.
//! - [`done_filter`]: [`DoneFilter`](done_filter::DoneFilter), per shard, the ids the
//!   `done` table may hold, so that a new id's insert does not ask fjall.
//! - `config`: [`EmbeddedConfig`], a store's settings.
//! - `shard_state`: `ShardState`, one shard's state under its lock, and `fetch_finished`,
//!   which brings back from `done` the finished transfers a batch names.
//! - `shard_lock`: `ShardLock`, a shard's lock, unlocked fairly so that a waiting call gets
//!   in between the checkpointer's slices, with std's poisoning kept.
//! - `shared`: `Shared`, what the shards and the background threads all use (log, tables,
//!   shard locks, clock) and whether the store failed or is closing.
//! - `committer`: `Committer`, group commit: callers wait for their LSN, one thread syncs
//!   for all of them; `sync_here` syncs in the caller's thread instead.
//! - `checkpointer`: `Checkpointer`, each shard's changes cut a slice per hold of its lock
//!   and written in one batch, then finished transfers evicted and old log segments freed.
//! - `inner`: `Inner`, one store behind the `Arc` its handle, shards and threads hold:
//!   `Shared`, `Committer`, `Checkpointer`.
//! - `open`: opening a data directory: shards loaded, the log replayed, what that found
//!   ([`OpenReport`]) or why it failed ([`OpenError`]), and the background scan that fills
//!   the done filters.
//! - `shard`: [`EmbeddedShard`], one shard, a `Store`: its calls, reads and pruner.
//! - `embedded`: [`Embedded`], the handle on a data directory: open, the shards,
//!   checkpoint, close.
//! - `testing` (unit tests only): what the unit tests share, a transfer to write and a
//!   store of one shard.

mod checkpointer;
pub mod codec;
mod committer;
mod config;
pub mod done_filter;
mod embedded;
pub mod frame;
pub mod fs;
mod inner;
pub mod log;
mod open;
mod shard;
mod shard_lock;
mod shard_state;
mod shared;
pub mod tables;
#[cfg(test)]
mod testing;

pub use config::EmbeddedConfig;
pub use embedded::Embedded;
pub use fs::{Fs, LogFile, RealFs, SimFs};
pub use log::{Log, LogConfig, LogError, Recovered, SyncCount};
pub use open::{OpenError, OpenReport};
pub use shard::EmbeddedShard;
