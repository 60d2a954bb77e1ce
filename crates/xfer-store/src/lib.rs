//! Where records live. A store is one shard offering single-record atomic operations; the
//! protocol needs nothing more (SPEC §4).
//!
//! One concept per module; a module uses only those listed before it (unit tests may use
//! any).
//!
//! - [`op`]: the operations ([`Op`]) and their answers ([`Reply`]).
//! - [`timeline`]: which steps a transfer record's timeline keeps ([`timeline::step_of`]).
//! - [`record`]: what each operation means, as pure functions of one record.
//! - [`event`]: the change feed's [`Event`]s, which a step makes ([`event::events_of`]).
//! - [`error`]: [`StoreError`], why a call failed, and [`BoxFuture`], how calls answer.
//! - [`log`]: [`SharedLog`], the one log several shards append to ahead of its sync.
//! - [`store`]: the async, batchable [`Store`] trait.
//! - [`shard`]: the in-memory shard, [`MemoryShard`] (the simulator's and the embedded
//!   store's memory), and [`MemoryStore`], the reference implementation of [`Store`] over
//!   it. What only a checkpointing store needs (the cut, its lists' room, the pruner's order)
//!   is reached through [`shard`], not from here.
//! - [`faulty`]: [`Faulty`], a wrapper that injects unavailability and lost replies.
//! - [`intercept`]: [`Intercept`], a wrapper that changes only how batches are executed.
//! - [`coalesce`]: [`Coalesce`], concurrent calls merged into one batch.
//! - [`conformance`]: the suite every backend must pass.
//! - [`database`]: what database backends share when they open a shard.
//! - [`contention`]: many batches at once on a hot account, for database backends.
//! - [`differential`]: random account steps, and random refund links, near 2^53 and 2^63,
//!   a backend against the Memory store.
//! - `reply_json` (feature `json`): the JSON in which SQL stores' server-side steps answer.

pub mod coalesce;
pub mod conformance;
pub mod contention;
pub mod database;
pub mod differential;
pub mod error;
pub mod event;
pub mod faulty;
pub mod intercept;
pub mod log;
pub mod op;
pub mod record;
#[cfg(feature = "json")]
pub mod reply_json;
pub mod shard;
pub mod store;
pub mod timeline;

pub use coalesce::Coalesce;
pub use event::{Event, EventKind, EventPage, FeedPosition};
pub use faulty::{FaultPlan, Faulty};
pub use intercept::{AheadHook, ExecuteHook, Intercept};
pub use log::{same_log, SharedLog};
pub use op::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
pub use shard::{MemoryShard, MemoryStore};
pub use store::{
    answered_durable, metadata_in_order, BoxFuture, HistoryPage, Metadata, Store, StoreError,
};
