//! The in-memory shard: [`MemoryShard`], one shard's records and indexes, applying ops
//! synchronously (the simulator drives it directly, with its own clock; the embedded store
//! keeps its shards' records in it), and [`MemoryStore`], which puts it behind the async
//! [`Store`](crate::Store) trait with a [`Clock`](xfer_core::Clock).
//!
//! What only a store that keeps the shard's state elsewhere too needs (the checkpoint's
//! [`Cut`], [`Changes`], [`Room`], [`RoomSizes`], [`HistoryEntry`]; the pruner's order,
//! [`prune_at`], [`sort_bucket`]; the read-ahead of [`transfer_lines`]; [`room_for`]) is
//! re-exported here, not at the crate root.
//!
//! One concept per module; a module uses only those listed before it (unit tests may use
//! any, and `testing`).
//!
//! - [`list_room`]: lists built in their room ([`push_made`]) and started as long as the
//!   last one ([`room_for`], [`room_like`]).
//! - `id_map`: `IdMap`, records by id: found by hash, iterated in id order, each with a
//!   change mark; the cut of the marked ones (`CutCopy`).
//! - [`wake_index`]: [`WakeIndex`], unfinished transfers by wake time (the sweeper's).
//! - [`prune_index`]: [`PruneIndex`], tombstones in the order the pruner takes them
//!   ([`prune_at`], [`sort_bucket`]).
//! - [`history`]: the history entries held in memory ([`HistoryEntry`]): by account, or as
//!   lists in sequence order until saved.
//! - `feed`: the change feed's events held in memory: all of them, or until saved
//!   ([`EVENTS_PER_STEP`]).
//! - [`changes`]: [`Changes`], what a tracked shard changed since it was last taken.
//! - [`apply`]: [`MemoryShard`], the records and indexes, [`MemoryShard::apply`], and the
//!   reads and scans.
//! - [`prefetch`]: read-ahead: what the steps ([`MemoryShard::prefetch`]), evictions and the pruner
//!   will read first, read so that cache misses overlap ([`transfer_lines`]).
//! - [`cut`]: the checkpoint's side: changes taken, the [`Cut`] handed over in slices, the
//!   [`Room`] of the lists that follow, what was saved let go.
//! - `prune`: the pruner's side: [`MemoryShard::prune`], the index's first entry and due
//!   bucket.
//! - `restore`: state saved elsewhere restored ([`MemoryShard::restore_accounts`], …).
//! - [`memory_store`]: [`MemoryStore`], a `MemoryShard` behind the `Store` trait, for tests.
//! - `testing` (unit tests only): what the unit tests share.

pub mod apply;
pub mod changes;
pub mod cut;
mod feed;
pub mod history;
mod id_map;
pub mod list_room;
pub mod memory_store;
pub mod prefetch;
mod prune;
pub mod prune_index;
mod restore;
#[cfg(test)]
mod testing;
pub mod wake_index;

pub use apply::MemoryShard;
pub use changes::Changes;
pub use cut::{Cut, Room, RoomSizes};
pub use feed::EVENTS_PER_STEP;
pub use history::HistoryEntry;
pub use list_room::{push_made, room_for, room_like};
pub use memory_store::MemoryStore;
pub use prefetch::transfer_lines;
pub use prune_index::{prune_at, sort_bucket, PruneIndex, PRUNE_BUCKET_MS};
pub use wake_index::WakeIndex;
