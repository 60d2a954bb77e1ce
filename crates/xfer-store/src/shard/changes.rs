//! [`Changes`]: the records and history entries a tracked shard changed since they were
//! last taken.

use crate::event::Event;
use crate::shard::history::HistoryEntry;
use std::sync::Arc;
use xfer_core::{AccountId, Intent, TransferId};

/// The records and history entries a shard changed: what a store that keeps the shard's
/// state elsewhere too (the embedded store's checkpoints) must write out.
#[derive(Debug, Default)]
pub struct Changes {
    /// Accounts written, created or dropped, each once (look each up: absent means
    /// dropped).
    pub accounts: Vec<AccountId>,
    /// Transfers written or created, each once.
    pub transfers: Vec<TransferId>,
    /// History entries added, in sequence order. The shard still answers them until told
    /// they are saved ([`MemoryShard::history_saved`](crate::MemoryShard::history_saved)).
    pub history: Arc<Vec<HistoryEntry>>,
    /// The change feed's events made, in position order. The shard still answers them
    /// until told they are saved ([`MemoryShard::events_saved`](crate::MemoryShard::events_saved)).
    pub events: Arc<Vec<Event>>,
    /// Tombstones written, each as it was written (it never changes after: a tombstone is
    /// only ever dropped, past its horizon). An account listed as changed is still the
    /// whole record, tombstones included; a store that writes tombstones apart from their
    /// accounts writes these (and a tombstone pruned since is harmless to keep: its horizon
    /// has passed, so a prune drops it again, and nothing else can find it).
    pub tombstones: Vec<(AccountId, TransferId, Intent)>,
    /// An account was dropped (and may have been created again, so named twice).
    pub(super) dropped_account: bool,
}
