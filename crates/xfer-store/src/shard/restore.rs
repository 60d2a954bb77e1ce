//! A shard's state restored from what was saved elsewhere (the embedded store's
//! checkpoint): records with their index entries, tombstones, the history counter (none of
//! it a change); and a logged one-phase commit replayed over it.

use crate::op::Reply;
use crate::record::one_phase_done;
use crate::shard::apply::MemoryShard;
use crate::shard::id_map::IdMap;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, Intent, IntentState, Timestamp, TransferId, TransferRecord, TransferState,
};

impl MemoryShard {
    /// Restores a shard's state saved elsewhere (the embedded store's checkpoint): the
    /// history counter.
    pub fn restore_sequence(&mut self, sequence: u64) {
        self.sequence = sequence;
    }

    /// Restores accounts saved elsewhere, with their index entries (bulk-building the map,
    /// much faster than one insert at a time, when the shard is empty). Not a change.
    pub fn restore_accounts(&mut self, accounts: Vec<Account>) {
        for a in &accounts {
            // Into an ordered set: the intents' order does not matter.
            for (t, i) in a.intents.unordered() {
                if i.state != IntentState::Open {
                    self.tombstones.insert(i.horizon, &a.id, t);
                }
            }
        }
        let fresh = accounts.into_iter().map(|a| (a.id.clone(), Arc::new(a)));
        if self.accounts.is_empty() {
            self.accounts = IdMap::from_pairs(fresh);
        } else {
            for (id, a) in fresh {
                self.accounts.insert(id, a);
            }
        }
    }

    /// Replays a one-phase commit
    /// ([`TransferOp::OnePhase`](crate::op::TransferOp::OnePhase)) that committed when it
    /// was first applied, as a log that keeps only those replays it; answers whether it
    /// committed again. A record of it found here can only be that commit's own result,
    /// brought back from a table written ahead of the shard's checkpoint (the embedded
    /// store's `done`): dropped first, or the step would find its own result and move
    /// nothing. Any other record is kept, and the step then does not commit.
    pub fn replay_one_phase(
        &mut self,
        id: &TransferId,
        rec: &Arc<TransferRecord>,
        now: Timestamp,
    ) -> bool {
        self.transfers
            .remove_if(id, |found, _| **found == one_phase_done(rec));
        matches!(self.one_phase(id, rec, now), Some(Reply::Transfer(r)) if r.state == TransferState::Done)
    }

    /// Restores a transfer saved elsewhere, with its index entry. Not a change.
    pub fn restore_transfer(&mut self, record: TransferRecord) {
        let id = record.spec.id.clone();
        let wake = record.wake_at();
        // The old entry out before the new one in: the two may be the same.
        if let Some(old) = self.transfers.insert(id.clone(), Arc::new(record)) {
            if let Some(w) = old.wake_at() {
                self.wake.remove(w, &id);
            }
        }
        if let Some(w) = wake {
            self.wake.insert(w, &id);
        }
    }

    /// Restores tombstones saved apart from their accounts (the embedded store's
    /// checkpoint), with their index entries. A tombstone whose account is not there is
    /// skipped: an account leaves a shard only when a prune took its last intent, so that
    /// tombstone was pruned. Not a change.
    pub fn restore_tombstones(
        &mut self,
        tombstones: impl IntoIterator<Item = (AccountId, TransferId, Intent)>,
    ) {
        for (account, transfer, intent) in tombstones {
            debug_assert_ne!(intent.state, IntentState::Open, "a tombstone");
            let Some(a) = self.accounts.get_mut_unmarked(&account) else {
                continue;
            };
            self.tombstones.insert(intent.horizon, &account, &transfer);
            Arc::make_mut(a).intents.insert(transfer, intent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::testing::spec;
    use xfer_core::Timestamp;

    /// The sweeper's index follows each record: restored over itself (the same wake time)
    /// or over an older copy (another), a transfer is due once, at its record's wake time.
    #[test]
    fn a_restored_transfer_is_due_once_at_its_wake_time() {
        let mut shard = MemoryShard::default();
        let (a, b) = (AccountId::new("a").unwrap(), AccountId::new("b").unwrap());
        let t = |s: &str| TransferId::new(s).unwrap();
        // Accepted at 0 (claimable after 5,000) and at 3,000 (after 8,000).
        let first = TransferRecord::accept(spec(t("x"), &a, &b, 5), Timestamp(0), 5_000);
        let later = TransferRecord::accept(spec(t("y"), &a, &b, 5), Timestamp(3_000), 5_000);
        shard.restore_transfer(later.clone());
        shard.restore_transfer(first.clone());
        shard.restore_transfer(first.clone());
        let due = |shard: &MemoryShard, now: u64| -> Vec<String> {
            let due = shard.scan_due(Timestamp(now), 10);
            due.iter().map(|r| r.id().to_string()).collect()
        };
        assert_eq!(due(&shard, 4_999), Vec::<String>::new());
        assert_eq!(due(&shard, 5_000), ["x"], "restored twice, due once");
        assert_eq!(due(&shard, 20_000), ["x", "y"], "earliest first");
        // A newer copy of `x` moves it.
        let mut moved = first;
        moved.lease_until = Timestamp(9_000);
        shard.restore_transfer(moved);
        assert_eq!(due(&shard, 8_999), ["y"]);
        assert_eq!(due(&shard, 9_000), ["y", "x"]);
        assert_eq!(shard.scan_due(Timestamp(9_000), 1).len(), 1, "limit");
    }
}
