//! [`MemoryShard`]: one shard's records and indexes in memory, [`MemoryShard::apply`] of an
//! op to them, and the reads and scans that answer from them.
//!
//! Iteration is deterministic, always in key order: a simulator seed must replay exactly.
//! Records are found by hash (`IdMap`: a hash map never iterated, plus the ordered ids);
//! the sweeper's and pruner's indexes are ordered sets; the history index is only looked
//! up by account, never iterated, or (a tracked shard's) a list in sequence order.

use crate::event::{Event, FeedPosition};
use crate::op::{AccountOp, Op, Reply, TransferOp};
use crate::record::{
    apply_account_absent, apply_account_to, apply_transfer_absent, apply_transfer_to,
    get_account_shared, one_phase_allows, one_phase_done, one_phase_move, IndexEffect,
};
use crate::shard::changes::Changes;
use crate::shard::feed::Feed;
use crate::shard::history::History;
use crate::shard::id_map::IdMap;
use crate::shard::list_room::push_made;
use crate::shard::prune_index::PruneIndex;
use crate::shard::wake_index::WakeIndex;
use crate::store::HistoryPage;
use std::collections::VecDeque;
use std::sync::Arc;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Account, AccountId, Timestamp, TransferId, TransferRecord};

/// One shard's records and indexes, in memory.
#[derive(Debug, Default)]
pub struct MemoryShard {
    /// Records are shared (`Arc`) and copied on write (`Arc::make_mut`): a checkpointer
    /// takes a consistent cut of transfers by counting references under the shard's lock
    /// instead of copying every changed one there, and only a transfer written again while
    /// the cut is still held is copied, by that write. Accounts it takes as copies without
    /// their tombstones (`CutCopy for Arc<Account>`).
    pub(super) accounts: IdMap<AccountId, Arc<Account>>,
    /// Without an ordered set of ids (one added and removed per transfer): sorted when
    /// scanned (`id_map.rs`).
    pub(super) transfers: IdMap<TransferId, Arc<TransferRecord>, false>,
    /// (wake_at, id) of every non-terminal transfer: the sweeper's index.
    pub(super) wake: WakeIndex,
    /// Every tombstone, in the order the pruner takes them (`prune_index.rs`).
    pub(super) tombstones: PruneIndex,
    /// The history index.
    pub(super) history: History,
    pub(super) sequence: u64,
    /// The change feed's events (`feed.rs`).
    pub(super) feed: Feed,
    /// What changed since the last [`MemoryShard::take_changes`], when tracked.
    pub(super) changes: Option<Changes>,
}

impl MemoryShard {
    /// An empty shard.
    pub fn new() -> MemoryShard {
        MemoryShard::default()
    }

    /// An empty shard that records what changes (see [`MemoryShard::take_changes`]).
    pub fn tracking() -> MemoryShard {
        MemoryShard {
            changes: Some(Changes::default()),
            history: History::Unsaved {
                taken: VecDeque::new(),
                since: Vec::new(),
            },
            ..MemoryShard::default()
        }
    }

    /// Lists account `id` as changed (on its first change since the last take, or when it
    /// is made again after being dropped).
    fn note_account(&mut self, id: &AccountId) {
        if let Some(c) = &mut self.changes {
            push_made(&mut c.accounts, || id.clone());
        }
    }

    /// Lists transfer `id` as changed (on its first change since the last take).
    fn note_transfer(&mut self, id: &TransferId) {
        if let Some(c) = &mut self.changes {
            push_made(&mut c.transfers, || id.clone());
        }
    }

    /// Applies one op with the store's clock at `now`.
    pub fn apply(&mut self, op: &Op, now: Timestamp) -> Reply {
        // Reads never take a record mutably: that would copy one a checkpoint's cut holds.
        match op {
            Op::Account(id, AccountOp::Get) => {
                if let Some(a) = self.accounts.get(id) {
                    return get_account_shared(a);
                }
            }
            Op::Transfer(id, TransferOp::Get) => {
                if let Some(r) = self.transfers.get(id) {
                    return Reply::Unchanged(Arc::clone(r));
                }
            }
            Op::Transfer(id, TransferOp::OnePhase(rec)) => {
                if let Some(reply) = self.one_phase(id, rec, now) {
                    return reply;
                }
            }
            _ => {}
        }
        match op {
            Op::Account(id, op) => {
                // In place when present (one lookup); the rules never remove a record.
                let (reply, effect) = match self.accounts.get_mut_marking(id) {
                    Some((a, first)) => {
                        let applied = apply_account_to(Arc::make_mut(a), id, op, now);
                        if first {
                            self.note_account(id);
                        }
                        applied
                    }
                    None => {
                        let (reply, created, effect) = apply_account_absent(id, op);
                        if let Some(a) = created {
                            self.accounts.insert_marking(id.clone(), Arc::new(a));
                            self.note_account(id);
                        }
                        (reply, effect)
                    }
                };
                if let Some(IndexEffect {
                    transfer: t,
                    history,
                    tombstone,
                }) = effect
                {
                    if history {
                        self.sequence += 1;
                        self.history.add(self.sequence, id, t);
                    }
                    if let Some(intent) = tombstone {
                        if let Some(c) = &mut self.changes {
                            push_made(&mut c.tombstones, || (id.clone(), t.clone(), intent));
                        }
                        self.tombstones.insert(intent.horizon, id, t);
                    }
                }
                reply
            }
            Op::Transfer(id, op) => match self.transfers.get_mut_marking(id) {
                Some((shared, first)) => {
                    let r = Arc::make_mut(shared);
                    let before = r.wake_at();
                    let (state, refunded_by) = (r.state, r.refunded_by.clone());
                    let step = apply_transfer_to(r, op, now);
                    let after = r.wake_at();
                    let was = Some((state, refunded_by.as_ref()));
                    self.feed.add_made(self.changes.is_some(), was, r);
                    let reply = step.reply(shared);
                    if before != after {
                        if let Some(w) = before {
                            self.wake.remove(w, id);
                        }
                        if let Some(w) = after {
                            self.wake.insert(w, id);
                        }
                    }
                    if first {
                        self.note_transfer(id);
                    }
                    reply
                }
                None => {
                    let (kept, reply) = apply_transfer_absent(op);
                    if let Some(r) = kept {
                        if let Some(w) = r.wake_at() {
                            self.wake.insert(w, id);
                        }
                        self.feed.add_made(self.changes.is_some(), None, &r);
                        self.transfers.insert_marking(id.clone(), r);
                        self.note_transfer(id);
                    }
                    reply
                }
            },
        }
    }

    /// The one-phase commit of [`TransferOp::OnePhase`] when the record is absent and every
    /// leg's account is here and allows it (`record::one_phase_allows`); `None` leaves the
    /// op to be applied as the insert it otherwise is.
    pub(super) fn one_phase(
        &mut self,
        id: &TransferId,
        rec: &Arc<TransferRecord>,
        now: Timestamp,
    ) -> Option<Reply> {
        let existing = self.transfers.get(id);
        if existing.is_some() && !mutant::is(Mutant::OnePhaseIgnoresRecord) {
            return None;
        }
        let existing = existing.map(Arc::clone);
        let legs = rec.spec.validate().ok()?;
        let allowed = legs.iter().all(|leg| {
            let account = self.accounts.get(&leg.account).map(|a| &**a);
            one_phase_allows(account, rec, leg, now)
        });
        if !allowed {
            return None;
        }
        for leg in &legs {
            let (a, first) = self
                .accounts
                .get_mut_marking(&leg.account)
                .expect("every leg's account was found above");
            one_phase_move(Arc::make_mut(a), leg);
            if first {
                self.note_account(&leg.account);
            }
            self.sequence += 1;
            self.history.add(self.sequence, &leg.account, id);
        }
        if let Some(existing) = existing {
            return Some(Reply::Unchanged(existing));
        }
        let done = Arc::new(one_phase_done(rec));
        self.feed.add_made(self.changes.is_some(), None, &done);
        self.transfers.insert_marking(id.clone(), Arc::clone(&done));
        self.note_transfer(id);
        Some(Reply::Transfer(done))
    }

    /// See [`Store::scan_due`](crate::Store::scan_due).
    pub fn scan_due(&self, now: Timestamp, limit: usize) -> Vec<TransferRecord> {
        self.wake
            .due(now, limit)
            .into_iter()
            .map(|id| {
                TransferRecord::clone(
                    self.transfers
                        .get(id)
                        .expect("every wake entry names a transfer in memory"),
                )
            })
            .collect()
    }

    /// At most `limit` of the events this shard holds in memory after `after`, oldest first
    /// (a tracked shard: those not yet saved elsewhere).
    pub fn events_after(&self, after: FeedPosition, limit: usize) -> Vec<Event> {
        self.feed.after(after, limit)
    }

    /// At most `limit` of the events this shard holds in memory before `before`, newest
    /// first.
    pub fn events_before(&self, before: FeedPosition, limit: usize) -> Vec<Event> {
        self.feed.before(before, limit)
    }

    /// Retention on an untracked shard (see [`Store::trim_events`](crate::Store::trim_events));
    /// a tracked one keeps what it has not handed out, its owner trims the rest.
    pub fn trim_events(&mut self, before: Timestamp, limit: usize) -> usize {
        self.feed.trim(self.changes.is_some(), before, limit)
    }

    /// The last position an untracked shard no longer keeps (`START`: none).
    pub fn events_dropped_through(&self) -> FeedPosition {
        self.feed.dropped_through()
    }

    /// How many events a tracked shard made since its last take: marks around a step, to
    /// pass to [`MemoryShard::stamp_events`].
    pub fn events_added(&self) -> usize {
        self.feed.added()
    }

    /// Positions the events a tracked shard made between two marks (see
    /// [`MemoryShard::events_added`]): made by the step at `step` of log entry `lsn`.
    pub fn stamp_events(&mut self, made: std::ops::Range<usize>, lsn: u64, step: u64) {
        self.feed.stamp(made, lsn, step);
    }

    /// See [`Store::history`](crate::Store::history).
    pub fn history(&self, account: &AccountId, before: Option<u64>, limit: usize) -> HistoryPage {
        let mut entries = self.history_entries(account, before, limit.saturating_add(1));
        HistoryPage::from_one_extra(&mut entries, limit)
    }

    /// At most `limit` history entries of `account` held in memory, newest first, strictly
    /// older than `before`.
    pub fn history_entries(
        &self,
        account: &AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> Vec<(u64, TransferId)> {
        self.history
            .entries(account, before.unwrap_or(u64::MAX), limit)
    }

    /// The last history sequence number handed out.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// True if the transfer is in memory.
    pub fn has_transfer(&self, id: &TransferId) -> bool {
        self.transfers.contains_key(id)
    }

    /// Every account, in id order (including placeholders that hold tombstones).
    pub fn accounts(&self) -> impl Iterator<Item = &Account> {
        self.accounts.values().map(|a| &**a)
    }

    /// Every transfer, in id order.
    pub fn transfers(&self) -> impl Iterator<Item = &TransferRecord> {
        self.transfers.values().map(|r| &**r)
    }

    /// Accounts in id order strictly after `after` (including placeholders).
    pub fn accounts_after(&self, after: Option<&AccountId>) -> impl Iterator<Item = &Account> {
        self.accounts.values_after(after, usize::MAX).map(|a| &**a)
    }

    /// At most `limit` transfers in id order strictly after `after`.
    pub fn transfers_after(
        &self,
        after: Option<&TransferId>,
        limit: usize,
    ) -> impl Iterator<Item = &TransferRecord> {
        self.transfers.values_after(after, limit).map(|r| &**r)
    }

    /// One account, if present.
    pub fn account(&self, id: &AccountId) -> Option<&Account> {
        self.accounts.get(id).map(|a| &**a)
    }

    /// One transfer, if present.
    pub fn transfer(&self, id: &TransferId) -> Option<&TransferRecord> {
        self.transfers.get(id).map(|r| &**r)
    }

    /// One account, shared: the record as it is now, however it changes later (no copy is
    /// made unless the account is written while it is held).
    pub fn account_shared(&self, id: &AccountId) -> Option<Arc<Account>> {
        self.accounts.get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::testing::{create, spec};
    use xfer_core::AssetCode;

    #[test]
    fn a_shared_record_is_a_snapshot_later_writes_do_not_change() {
        let mut shard = MemoryShard::tracking();
        let a = create(&mut shard, "a");
        let cut = shard.account_shared(&a).unwrap();
        let prepare = AccountOp::Prepare {
            transfer: TransferId::new("t1").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            debit: 5,
            credit: 0,
            deadline: Timestamp(1_000),
            horizon: Timestamp(2_000),
        };
        shard.apply(&Op::Account(a.clone(), prepare), Timestamp(2));
        assert_eq!(
            (cut.reserved, cut.intents.len()),
            (0, 0),
            "the cut as it was"
        );
        let now = shard.account(&a).unwrap();
        assert_eq!(
            (now.reserved, now.intents.len()),
            (5, 1),
            "the shard moved on"
        );
        // A read takes nothing mutably: it does not copy a record a cut holds.
        let held = shard.account_shared(&a).unwrap();
        let read = shard.apply(&Op::Account(a.clone(), AccountOp::Get), Timestamp(3));
        assert!(Arc::ptr_eq(&held, &shard.account_shared(&a).unwrap()));
        // A read's answer shares the record, and is a snapshot too.
        let Reply::Account(read) = read else {
            panic!("{read}")
        };
        assert!(Arc::ptr_eq(&held, &read), "shared, not copied");
        let release = AccountOp::Release {
            transfer: TransferId::new("t1").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            horizon: Timestamp(2_000),
        };
        shard.apply(&Op::Account(a.clone(), release), Timestamp(4));
        assert_eq!(read.reserved, 5, "the answer as it was");
        assert_eq!(shard.account(&a).unwrap().reserved, 0, "the shard moved on");
    }

    /// A transfer step's answer shares the record the shard holds after the step (no copy
    /// under the lock), and stays as it was when a later step changes the record; once
    /// the answers are dropped, a step changes the record in place.
    #[test]
    fn a_transfer_answer_shares_the_record_and_later_steps_do_not_change_it() {
        let mut shard = MemoryShard::default();
        let (a, b) = (AccountId::new("a").unwrap(), AccountId::new("b").unwrap());
        let id = TransferId::new("x").unwrap();
        let rec = TransferRecord::accept(spec(id.clone(), &a, &b, 5), Timestamp(0), 5_000);
        let owner = xfer_core::OwnerId::new("e1").unwrap();
        let step = |shard: &mut MemoryShard, op: TransferOp| match shard
            .apply(&Op::Transfer(id.clone(), op), Timestamp(1))
        {
            Reply::Transfer(r) => r,
            other => panic!("{other}"),
        };
        let inserted = step(&mut shard, TransferOp::Insert(Arc::new(rec)));
        let held = |shard: &MemoryShard| Arc::clone(shard.transfers.get(&id).unwrap());
        assert!(Arc::ptr_eq(&inserted, &held(&shard)), "shared, not copied");
        let claimed = step(
            &mut shard,
            TransferOp::Claim {
                owner: owner.clone(),
                now: Timestamp(1),
                lease_until: Timestamp(9_000),
            },
        );
        assert_eq!(
            inserted.state,
            xfer_core::TransferState::Initial,
            "the answer as it was"
        );
        assert_eq!(claimed.state, xfer_core::TransferState::Pending);
        assert!(Arc::ptr_eq(&claimed, &held(&shard)));
        let before = Arc::as_ptr(&claimed);
        drop((inserted, claimed));
        let decided = step(
            &mut shard,
            TransferOp::Decide {
                epoch: 1,
                to: xfer_core::TransferState::Applied,
                reason: None,
                now: Timestamp(2),
            },
        );
        assert_eq!(decided.state, xfer_core::TransferState::Applied);
        assert_eq!(
            Arc::as_ptr(&decided),
            before,
            "changed in place, not copied"
        );
    }
}
