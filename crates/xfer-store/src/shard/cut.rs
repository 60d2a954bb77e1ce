//! A checkpoint's side of a shard: what changed taken ([`MemoryShard::take_changes`]), the
//! cut that keeps the records it names as they were and hands them over a slice at a time
//! ([`MemoryShard::begin_cut`], [`Cut`]), the room for the lists that follow ([`Room`],
//! [`RoomSizes`]), and what was saved let go ([`MemoryShard::evict_transfer`],
//! [`MemoryShard::history_saved`]).

use crate::event::Event;
use crate::shard::apply::MemoryShard;
use crate::shard::changes::Changes;
use crate::shard::history::{History, HistoryEntry};
use crate::shard::id_map::CutCopy;
use crate::shard::list_room::{room_like, room_or_like};
use std::sync::Arc;
use xfer_core::{Account, AccountId, FastMap, FastSet, Intent, TransferId, TransferRecord};

/// Empty lists for the changes between two checkpoints, made before the cut that hands
/// them to the shard ([`MemoryShard::begin_cut_with`]), with every page of their room
/// written once. A list's room is untouched memory until the shard's steps fill it, and
/// the first write to a page faults: the kernel zeroes it (a 2 MiB page with transparent
/// huge pages), every step on the shard waiting behind its lock meanwhile. A checkpointer
/// makes the room in its own thread instead, before it takes the lock
/// (`docs/benchmarks.md#change-lists-pretouched`).
#[derive(Debug, Default)]
pub struct Room {
    accounts: Vec<AccountId>,
    transfers: Vec<TransferId>,
    tombstones: Vec<(AccountId, TransferId, Intent)>,
    history: Vec<HistoryEntry>,
}

/// The sizes of a [`Room`]: [`room_like`] the lists a cut took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoomSizes {
    accounts: usize,
    transfers: usize,
    tombstones: usize,
    history: usize,
}

impl RoomSizes {
    /// Room for as many entries as `taken` (what a cut answered) holds, and some: what the
    /// lists that follow the next cut start with, unless they need more.
    pub fn after(taken: &Changes) -> RoomSizes {
        RoomSizes {
            accounts: room_like(&taken.accounts),
            transfers: room_like(&taken.transfers),
            tombstones: room_like(&taken.tombstones),
            history: room_like(&*taken.history),
        }
    }
}

impl Room {
    /// Lists with `sizes`' room, every page of it written once: each of `spent`'s lists
    /// where it has that much room, else a new one. A checkpointer that keeps the lists of
    /// a cut it is done with ([`Room::spent`]) and makes the next room from them takes no
    /// new memory for them from one cut to the next, where new lists for every cut touch
    /// fresh pages, each a fault zeroed by the kernel
    /// (`docs/benchmarks.md#lists-kept-for-memory`).
    pub fn touched_from(spent: Room, sizes: RoomSizes) -> Room {
        Room {
            accounts: reused_or_touched(spent.accounts, sizes.accounts),
            transfers: reused_or_touched(spent.transfers, sizes.transfers),
            tombstones: reused_or_touched(spent.tombstones, sizes.tombstones),
            history: reused_or_touched(spent.history, sizes.history),
        }
    }

    /// The lists of a cut (what [`MemoryShard::begin_cut_with`] answered) that their
    /// checkpoint is done with, emptied (what they held let go of now, not at the next
    /// cut), kept for their room ([`Room::touched_from`]).
    pub fn spent(
        mut accounts: Vec<AccountId>,
        mut transfers: Vec<TransferId>,
        mut tombstones: Vec<(AccountId, TransferId, Intent)>,
        mut history: Vec<HistoryEntry>,
    ) -> Room {
        accounts.clear();
        transfers.clear();
        tombstones.clear();
        history.clear();
        Room {
            accounts,
            transfers,
            tombstones,
            history,
        }
    }

    /// The room of each list.
    pub fn sizes(&self) -> RoomSizes {
        RoomSizes {
            accounts: self.accounts.capacity(),
            transfers: self.transfers.capacity(),
            tombstones: self.tombstones.capacity(),
            history: self.history.capacity(),
        }
    }
}

/// `list` (empty, as a [`Room`]'s lists are) if it has room for `n`, else a new list with
/// room for `n`; one slot in each 4 KiB of its room written either way (with zeros, as
/// uninitialised slots: nothing is pushed, nothing to drop): a kept list's room past what
/// it held may never have been written (the shard grew it, or made it without a [`Room`]),
/// and those writes cost nothing where the pages are there already.
fn reused_or_touched<T>(list: Vec<T>, n: usize) -> Vec<T> {
    debug_assert!(list.is_empty(), "a room's lists are empty");
    let mut list = if list.capacity() >= n {
        list
    } else {
        Vec::with_capacity(n)
    };
    let every = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for slot in list.spare_capacity_mut().iter_mut().step_by(every) {
        *slot = std::mem::MaybeUninit::zeroed();
    }
    // The writes go to memory nothing reads: keep the compiler from leaving them out.
    std::hint::black_box(list.spare_capacity_mut());
    list
}

/// The records of a checkpoint's cut, as they were when it began (see
/// [`MemoryShard::begin_cut`]): transfers shared with the shard, accounts copied without
/// their tombstones (see `CutCopy for Arc<Account>`; one replaced or dropped before its
/// slice is handed over as it was, shared).
#[derive(Debug, Default)]
pub struct Cut {
    /// Accounts listed as changed (`None`: absent at the cut, that is dropped).
    pub accounts: Vec<(AccountId, Option<Arc<Account>>)>,
    /// Transfers listed as changed.
    pub transfers: Vec<Arc<TransferRecord>>,
    /// Accounts not handed over by a slice: settled by `end_cut`.
    later: Vec<AccountId>,
}

/// A cut takes an account as a copy without its tombstones, which is all a checkpoint
/// writes of it (they are written apart, once each), rather than shared. Shared, the
/// shard's next write to it would copy the whole account, every tombstone (a hot account
/// holds hundreds of thousands), under the shard's lock, because the cut still holds it; an
/// ordinary account, with no open intent most of the time, is copied without walking its
/// tombstones at all (`Intents::open_only`) (`docs/benchmarks.md#cut-without-tombstones`).
impl CutCopy for Arc<Account> {
    fn cut_copy(&self) -> Arc<Account> {
        Arc::new(self.without_tombstones())
    }
}

impl CutCopy for Arc<TransferRecord> {
    fn cut_copy(&self) -> Arc<TransferRecord> {
        Arc::clone(self)
    }
}

impl MemoryShard {
    /// What changed since the last call (empty if the shard does not track changes).
    pub fn take_changes(&mut self) -> Changes {
        self.take(false, Room::default())
    }

    fn take(&mut self, cut: bool, room: Room) -> Changes {
        let Some(c) = &mut self.changes else {
            return Changes::default();
        };
        // The next lists start as long as these: grown from empty by doubling, they would be
        // copied over and over (`docs/benchmarks.md#list-room`).
        let Room {
            accounts,
            transfers,
            tombstones,
            history,
        } = room;
        let next = Changes {
            accounts: room_or_like(accounts, &c.accounts),
            transfers: room_or_like(transfers, &c.transfers),
            history: Arc::default(),
            events: Arc::default(),
            tombstones: room_or_like(tombstones, &c.tombstones),
            dropped_account: false,
        };
        let mut taken = std::mem::replace(c, next);
        taken.history = self.history.take(history);
        taken.events = self.feed.take();
        if cut {
            self.accounts.start_cut();
            self.transfers.start_cut();
        } else {
            self.accounts.next_mark();
            self.transfers.next_mark();
        }
        if taken.dropped_account {
            let mut seen = FastSet::default();
            taken.accounts.retain(|id| seen.insert(id.clone()));
        }
        taken
    }

    /// Starts a checkpoint's cut: answers what changed since the last cut (as
    /// [`MemoryShard::take_changes`] does), and keeps, as they are now, the records it
    /// names, for [`MemoryShard::cut_slice`] and [`MemoryShard::end_cut`] to hand over a
    /// few at a time while the shard goes on (a record written or dropped before it is
    /// handed over is first set aside as it was).
    /// A cut taken whole at once would hold the shard's lock for one lookup per changed
    /// record, stalling every step on the shard (`docs/benchmarks.md#cut-in-slices`).
    pub fn begin_cut(&mut self) -> Changes {
        self.take(true, Room::default())
    }

    /// [`MemoryShard::begin_cut`], the lists that follow it taken from `room` where it has
    /// as much room as they would start with.
    pub fn begin_cut_with(&mut self, room: Room) -> Changes {
        self.take(true, room)
    }

    /// Hands over the records of the cut named in `accounts` and `transfers` (a slice of
    /// those [`MemoryShard::begin_cut`] listed) that the shard still holds unchanged since
    /// the cut began; the others come at [`MemoryShard::end_cut`].
    pub fn cut_slice(&mut self, accounts: &[AccountId], transfers: &[TransferId], into: &mut Cut) {
        for id in accounts {
            match self.accounts.take_cut(id) {
                Some(a) => into.accounts.push((id.clone(), Some(a))),
                None => into.later.push(id.clone()),
            }
        }
        into.transfers.extend(
            transfers
                .iter()
                .filter_map(|id| self.transfers.take_cut(id)),
        );
    }

    /// Ends the cut: adds the records of it written or dropped before they were handed
    /// over, as they were when it began, and names as dropped the accounts it listed that
    /// were absent then.
    pub fn end_cut(&mut self, into: &mut Cut) {
        let mut kept: FastMap<AccountId, Arc<Account>> =
            self.accounts.end_cut().into_iter().collect();
        for id in std::mem::take(&mut into.later) {
            let a = kept.remove(&id);
            into.accounts.push((id, a));
        }
        into.transfers
            .extend(self.transfers.end_cut().into_iter().map(|(_, r)| r));
    }

    /// True if `id` changed since the last [`MemoryShard::take_changes`] or is in the cut
    /// being handed over and not handed over yet (and the shard tracks changes).
    pub fn transfer_changed(&self, id: &TransferId) -> bool {
        self.changes.is_some() && self.transfers.is_marked(id)
    }

    /// Drops a terminal transfer from memory (it was saved elsewhere and has not changed
    /// since). Answers whether it was dropped.
    pub fn evict_transfer(&mut self, id: &TransferId) -> bool {
        let tracked = self.changes.is_some();
        self.transfers
            .remove_if(id, |r, marked| {
                !(tracked && marked) && r.state.is_terminal()
            })
            .is_some()
    }

    /// Drops from memory the events of `list`, handed out by a cut and now saved elsewhere.
    pub fn events_saved(&mut self, list: &Arc<Vec<Event>>) {
        self.feed.saved(list);
    }

    /// Drops from memory the history entries of `list`, handed out as
    /// [`Changes::history`] and now saved elsewhere.
    pub fn history_saved(&mut self, list: &Arc<Vec<HistoryEntry>>) {
        if let History::Unsaved { taken, .. } = &mut self.history {
            taken.retain(|l| !Arc::ptr_eq(l, list));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{AccountOp, Op, TransferOp};
    use crate::shard::prune_index::prune_at;
    use crate::shard::testing::{create, spec};
    use xfer_core::{AssetCode, IntentState, LowerBound, Timestamp};

    /// A tracked shard holds its history as lists in sequence order, not by account: it
    /// answers as an untracked shard does (newest first, strictly older than `before`,
    /// across the lists taken and the entries since) until a list is said saved.
    #[test]
    fn a_tracked_shard_answers_its_history_until_told_it_is_saved() {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let prepare = |n: u32| AccountOp::Prepare {
            transfer: TransferId::new(&format!("t{n}")).unwrap(),
            asset: usd(),
            debit: 0,
            credit: 1,
            deadline: Timestamp(1_000),
            horizon: Timestamp(2_000),
        };
        let mut shards = [MemoryShard::tracking(), MemoryShard::new()];
        let (a, b) = (create(&mut shards[0], "a"), create(&mut shards[0], "b"));
        create(&mut shards[1], "a");
        create(&mut shards[1], "b");
        let step = |shards: &mut [MemoryShard; 2], n: u32, on: &AccountId| {
            let op = Op::Account(on.clone(), prepare(n));
            shards.iter_mut().for_each(|s| {
                s.apply(&op, Timestamp(2));
            });
        };
        for n in 0..5 {
            step(&mut shards, n, if n % 2 == 0 { &a } else { &b });
        }
        let first = shards[0].take_changes();
        assert_eq!(first.history.len(), 5);
        for n in 5..9 {
            step(&mut shards, n, if n % 3 == 0 { &b } else { &a });
        }
        let second = shards[0].take_changes();
        step(&mut shards, 9, &a);
        let [tracked, kept] = &mut shards;
        for account in [&a, &b] {
            for before in [None, Some(3), Some(6), Some(8), Some(11)] {
                for limit in [1, 2, 10] {
                    assert_eq!(
                        tracked.history_entries(account, before, limit),
                        kept.history_entries(account, before, limit),
                        "{account} before {before:?} limit {limit}"
                    );
                }
            }
        }
        let all = |s: &MemoryShard, id: &AccountId| -> Vec<u64> {
            s.history_entries(id, None, 100)
                .into_iter()
                .map(|(seq, _)| seq)
                .collect()
        };
        assert_eq!(all(tracked, &a), vec![10, 9, 8, 6, 5, 3, 1]);
        // Saved out of order: each list leaves alone.
        tracked.history_saved(&second.history);
        assert_eq!(all(tracked, &a), vec![10, 5, 3, 1]);
        tracked.history_saved(&first.history);
        assert_eq!(all(tracked, &a), vec![10]);
        assert_eq!(all(tracked, &b), Vec::<u64>::new());
        // An untracked shard keeps everything.
        assert_eq!(all(kept, &b), vec![7, 4, 2]);
    }

    #[test]
    fn changes_name_each_changed_record_once_per_take() {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let t = |s: &str| TransferId::new(s).unwrap();
        let mut shard = MemoryShard::tracking();
        let a = create(&mut shard, "a");
        let b = create(&mut shard, "b");
        let prepare = |transfer: &str| AccountOp::Prepare {
            transfer: t(transfer),
            asset: usd(),
            debit: 0,
            credit: 1,
            deadline: Timestamp(1_000),
            horizon: Timestamp(2_000),
        };
        for n in 0..3 {
            shard.apply(
                &Op::Account(a.clone(), prepare(&format!("t{n}"))),
                Timestamp(2),
            );
        }
        // A read, and a refused step on an account nobody created, change nothing.
        shard.apply(&Op::Account(b.clone(), AccountOp::Get), Timestamp(2));
        let ghost = AccountId::new("ghost").unwrap();
        shard.apply(&Op::Account(ghost.clone(), prepare("t9")), Timestamp(2));
        let c = shard.take_changes();
        assert_eq!(
            (c.accounts, c.history.len()),
            (vec![a.clone(), b.clone()], 3)
        );
        // A new take starts empty; a record changed again is named again, once.
        let c = shard.take_changes();
        assert!(c.accounts.is_empty() && c.transfers.is_empty() && c.history.is_empty());
        shard.apply(&Op::Account(b.clone(), prepare("t1")), Timestamp(3));
        shard.apply(&Op::Account(b.clone(), prepare("t2")), Timestamp(3));
        let c = shard.take_changes();
        assert_eq!(c.accounts, vec![b.clone()]);
        // A placeholder made by a release, dropped by prune, then made again: named once.
        let release = |transfer: &str| AccountOp::Release {
            transfer: t(transfer),
            asset: usd(),
            horizon: Timestamp(10),
        };
        shard.apply(&Op::Account(ghost.clone(), release("r1")), Timestamp(4));
        let c = shard.take_changes();
        assert_eq!(c.accounts, vec![ghost.clone()]);
        assert_eq!(
            c.tombstones,
            vec![(
                ghost.clone(),
                t("r1"),
                Intent {
                    debit: 0,
                    credit: 0,
                    state: IntentState::Released,
                    horizon: Timestamp(10),
                }
            )],
            "a tombstone is listed as it was written"
        );
        // Due at the end of its horizon's bucket, not before.
        assert_eq!(shard.prune(Timestamp(20), 100), 0);
        assert_eq!(shard.prune(prune_at(Timestamp(10)), 100), 1);
        assert!(
            shard.account(&ghost).is_none(),
            "the placeholder is dropped"
        );
        shard.apply(&Op::Account(ghost.clone(), release("r2")), Timestamp(21));
        let c = shard.take_changes();
        assert_eq!(c.accounts, vec![ghost.clone()]);
        // Pruning an open account's tombstone is no change of what a checkpoint writes of
        // it (tombstones are listed apart).
        shard.apply(
            &Op::Account(
                b.clone(),
                AccountOp::Post {
                    transfer: t("t1"),
                    asset: usd(),
                },
            ),
            Timestamp(22),
        );
        let c = shard.take_changes();
        assert_eq!((c.accounts, c.tombstones.len()), (vec![b.clone()], 1));
        assert_eq!(
            shard.prune(prune_at(Timestamp(2_000)), 100),
            2,
            "b's t1 and r2"
        );
        let c = shard.take_changes();
        assert_eq!(c.accounts, vec![ghost.clone()], "the placeholder, dropped");
        assert!(c.tombstones.is_empty());
        // Transfers: an insert and later steps in one take name it once, and it counts as
        // changed (not evictable) until the next take.
        let rec = TransferRecord::accept(spec(t("x1"), &a, &b, 5), Timestamp(30), 5_000);
        shard.apply(
            &Op::Transfer(t("x1"), TransferOp::Insert(Arc::new(rec))),
            Timestamp(30),
        );
        shard.apply(&Op::Transfer(t("x1"), TransferOp::Get), Timestamp(31));
        assert!(shard.transfer_changed(&t("x1")));
        let c = shard.take_changes();
        assert_eq!(c.transfers, vec![t("x1")]);
        assert!(!shard.transfer_changed(&t("x1")));
    }

    /// A cut handed over a slice at a time while steps, prunes and evictions go on: every
    /// record it lists comes out once, as it was when the cut began (an account as a
    /// checkpoint writes it: without its tombstones), or as dropped if it was absent then;
    /// and no transfer still in the cut is evicted.
    #[test]
    fn a_cut_handed_over_in_slices_is_the_shard_as_it_was_when_it_began() {
        cut_in_slices(6, 40, 20);
    }

    /// The lists of a cut saved make the next room where they have as much, emptied (the
    /// same memory, no new pages); a list too short is replaced by a new one.
    #[test]
    fn spent_lists_are_the_next_room_where_they_are_long_enough() {
        let accounts = vec![AccountId::new("a").unwrap(); 100];
        let transfers: Vec<TransferId> = Vec::with_capacity(10);
        let (a_at, t_at) = (accounts.as_ptr(), transfers.as_ptr());
        let spent = Room::spent(accounts, transfers, Vec::new(), Vec::new());
        let sizes = RoomSizes {
            accounts: 80,
            transfers: 20,
            tombstones: 0,
            history: 5,
        };
        let room = Room::touched_from(spent, sizes);
        assert_eq!(room.accounts.as_ptr(), a_at, "long enough: the same list");
        assert!(room.accounts.is_empty() && room.accounts.capacity() == 100);
        assert_ne!(room.transfers.as_ptr(), t_at, "too short: a new one");
        assert_eq!(room.transfers.capacity(), 20);
        assert_eq!(room.history.capacity(), 5);
        // Handed to a shard, each list is taken as its room.
        let mut shard = MemoryShard::tracking();
        shard.begin_cut_with(room);
        shard.end_cut(&mut Cut::default());
        let next = shard.take_changes();
        assert_eq!(next.accounts.as_ptr(), a_at);
    }

    /// A cut given room hands the shard those lists for what follows when they have as
    /// much room as the cut would give (and lists of its own otherwise); what the next take
    /// answers is the same either way.
    #[test]
    fn a_cut_hands_its_room_to_the_lists_that_follow() {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let run = |room: Option<RoomSizes>| {
            let mut shard = MemoryShard::tracking();
            let accounts: Vec<AccountId> = (0..8)
                .map(|i| create(&mut shard, &format!("a{i}")))
                .collect();
            let step = |shard: &mut MemoryShard, n: u64| {
                let a = &accounts[n as usize % accounts.len()];
                let transfer = TransferId::new(&format!("t{n}")).unwrap();
                let prepare = AccountOp::Prepare {
                    transfer: transfer.clone(),
                    asset: usd(),
                    debit: 0,
                    credit: 1,
                    deadline: Timestamp(1_000),
                    horizon: Timestamp(2_000),
                };
                shard.apply(&Op::Account(a.clone(), prepare), Timestamp(2));
                shard.apply(
                    &Op::Account(
                        a.clone(),
                        AccountOp::Post {
                            transfer,
                            asset: usd(),
                        },
                    ),
                    Timestamp(3),
                );
            };
            (0..40).for_each(|n| step(&mut shard, n));
            let first = match room {
                Some(sizes) => {
                    let room = Room::touched_from(Room::default(), sizes);
                    assert_eq!(room.sizes(), sizes, "as much room as asked");
                    shard.begin_cut_with(room)
                }
                None => shard.begin_cut(),
            };
            let mut cut = Cut::default();
            shard.end_cut(&mut cut);
            (40..60).for_each(|n| step(&mut shard, n));
            let next = shard.take_changes();
            let sizes = RoomSizes {
                accounts: next.accounts.capacity(),
                transfers: next.transfers.capacity(),
                tombstones: next.tombstones.capacity(),
                history: next.history.capacity(),
            };
            (first, next, sizes)
        };
        let (first, next, own) = run(None);
        assert_eq!((first.history.len(), first.tombstones.len()), (40, 40));
        // The cut's own lists: room for a quarter more than it took.
        assert_eq!(own, RoomSizes::after(&first));
        let big = RoomSizes {
            accounts: 64,
            transfers: 64,
            tombstones: 1_000,
            history: 1_000,
        };
        let (first_big, next_big, used) = run(Some(big));
        assert_eq!(used, big, "the room was handed on");
        let small = RoomSizes {
            tombstones: 3,
            ..big
        };
        let (_, next_small, mixed) = run(Some(small));
        assert_eq!(
            mixed,
            RoomSizes {
                tombstones: own.tombstones,
                ..big
            },
            "a list too short is not"
        );
        for (a, b) in [
            (&first, &first_big),
            (&next, &next_big),
            (&next, &next_small),
        ] {
            assert_eq!(
                (&a.accounts, &a.transfers, &*a.history, &a.tombstones),
                (&b.accounts, &b.transfers, &*b.history, &b.tombstones)
            );
        }
    }

    /// The same with accounts of thousands of intents, nearly all tombstones.
    #[test]
    fn a_cut_takes_big_accounts_as_they_were_without_their_tombstones() {
        cut_in_slices(2, 6_000, 1_000_000);
    }

    fn cut_in_slices(accounts: u64, transfers: u64, horizon: u64) {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let account = |i: u64| AccountId::new(&format!("a{i}")).unwrap();
        let transfer = |i: u64| TransferId::new(&format!("t{i}")).unwrap();
        let written = |a: &Account| {
            let mut a = a.clone();
            a.intents = a
                .intents
                .unordered()
                .filter(|(_, i)| i.state == IntentState::Open)
                .map(|(t, i)| (t.clone(), *i))
                .collect();
            a
        };
        let step = |shard: &mut MemoryShard, rng: &mut xfer_core::Rng, now: Timestamp| {
            let (a, t) = (account(rng.below(accounts)), transfer(rng.below(transfers)));
            let op = match rng.below(10) {
                0..=2 => Op::Account(
                    a,
                    AccountOp::Prepare {
                        transfer: t,
                        asset: usd(),
                        debit: rng.below(3),
                        credit: rng.below(3),
                        deadline: now.plus_ms(1_000),
                        horizon: now.plus_ms(rng.below(horizon)),
                    },
                ),
                3 => Op::Account(
                    a,
                    AccountOp::Post {
                        transfer: t,
                        asset: usd(),
                    },
                ),
                4 => Op::Account(
                    a,
                    AccountOp::Release {
                        transfer: t,
                        asset: usd(),
                        horizon: now.plus_ms(rng.below(horizon)),
                    },
                ),
                5 => {
                    shard.prune(now, rng.below(4) as usize);
                    return;
                }
                6 => {
                    shard.evict_transfer(&t);
                    return;
                }
                7 => Op::Account(
                    account(rng.below(accounts)),
                    AccountOp::Create {
                        asset: usd(),
                        lower_bound: LowerBound::Unbounded,
                    },
                ),
                _ => {
                    let spec = spec(t.clone(), &account(0), &account(1), 1);
                    let mut rec = TransferRecord::accept(spec, now, 5_000);
                    if rng.below(2) == 0 {
                        rec.state = xfer_core::TransferState::Done;
                    }
                    match shard.transfer(&t) {
                        Some(_) => Op::Transfer(t, TransferOp::Finish { now }),
                        None => Op::Transfer(t, TransferOp::Insert(Arc::new(rec))),
                    }
                }
            };
            shard.apply(&op, now);
        };
        let mut rng = xfer_core::Rng::new(5);
        let mut shard = MemoryShard::tracking();
        let mut now = Timestamp(10);
        let mut most = 0;
        for _ in 0..300 {
            for _ in 0..rng.below(60) {
                now = now.plus_ms(1);
                step(&mut shard, &mut rng, now);
            }
            let changes = shard.begin_cut();
            let mut want_accounts: Vec<(AccountId, Option<Account>)> = changes
                .accounts
                .iter()
                .map(|id| (id.clone(), shard.account(id).map(written)))
                .collect();
            let mut want_transfers: Vec<TransferRecord> = changes
                .transfers
                .iter()
                .map(|id| shard.transfer(id).expect("a changed transfer").clone())
                .collect();
            let mut cut = Cut::default();
            let (mut a, mut t) = (&changes.accounts[..], &changes.transfers[..]);
            while !a.is_empty() || !t.is_empty() {
                for _ in 0..rng.below(5) {
                    now = now.plus_ms(1);
                    step(&mut shard, &mut rng, now);
                    for id in t {
                        assert!(shard.transfer(id).is_some(), "{id}: evicted in the cut");
                    }
                }
                let na = (rng.below(3) as usize).min(a.len());
                let nt = (rng.below(3) as usize).min(t.len());
                shard.cut_slice(&a[..na], &t[..nt], &mut cut);
                (a, t) = (&a[na..], &t[nt..]);
            }
            shard.end_cut(&mut cut);
            // The cut's copy holds no tombstone and leaves the shard's own unshared (a
            // write to it copies nothing).
            for (id, a) in &cut.accounts {
                let (Some(a), Some(held)) = (a, shard.accounts.get(id)) else {
                    continue;
                };
                assert_eq!(
                    a.intents.len(),
                    a.intents.open_len(),
                    "{id}: tombstones cut"
                );
                assert_eq!(Arc::strong_count(held), 1, "{id}: the shard's copy shared");
                most = most.max(held.intents.len());
            }
            let mut got_accounts: Vec<(AccountId, Option<Account>)> = cut
                .accounts
                .iter()
                .map(|(id, a)| (id.clone(), a.as_deref().map(written)))
                .collect();
            let mut got_transfers: Vec<TransferRecord> =
                cut.transfers.iter().map(|r| (**r).clone()).collect();
            got_accounts.sort_by(|x, y| x.0.cmp(&y.0));
            want_accounts.sort_by(|x, y| x.0.cmp(&y.0));
            got_transfers.sort_by(|x, y| x.spec.id.cmp(&y.spec.id));
            want_transfers.sort_by(|x, y| x.spec.id.cmp(&y.spec.id));
            assert_eq!(got_accounts, want_accounts);
            assert_eq!(got_transfers, want_transfers);
        }
        assert!(
            most as u64 > transfers / 8,
            "at most {most} intents on an account cut"
        );
    }
}
