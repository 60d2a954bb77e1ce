//! Where records live. A store is one shard offering single-record atomic operations; the
//! protocol needs nothing more (SPEC §4).
//!
//! - [`op`]: the operations ([`Op`]) and their answers ([`Reply`]).
//! - [`record`]: what each operation means, as pure functions of one record.
//! - [`store`]: the async, batchable [`Store`] trait and [`StoreError`].
//! - [`memory`]: [`MemoryStore`], the reference implementation, and [`MemoryShard`].
//! - [`faulty`]: [`Faulty`], a wrapper that injects unavailability and lost replies.
//! - [`intercept`]: [`Intercept`], a wrapper that changes only how batches are executed.
//! - [`conformance`]: the suite every backend must pass.

pub mod coalesce;
pub mod conformance;
pub mod faulty;
mod id_map;
pub mod intercept;
pub mod memory;
pub mod op;
pub mod prune_index;
pub mod record;
pub mod store;

pub use coalesce::Coalesce;
pub use faulty::{FaultPlan, Faulty};
pub use id_map::{FastMap, FastSet, FastState};
pub use intercept::{ExecuteHook, Intercept, PendingHook};
pub use memory::{Changes, Cut, HistoryEntry, MemoryShard, MemoryStore};
pub use op::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
pub use prune_index::{prune_at, PruneIndex, PRUNE_BUCKET_MS};
pub use store::{answered_durable, BoxFuture, HistoryPage, LogDomain, Store, StoreError};
