//! The Memory store: the reference implementation of [`Store`]. [`MemoryShard`] is the
//! synchronous heart (the simulator drives it directly, with its own clock); [`MemoryStore`]
//! puts it behind the async trait with a [`Clock`].
//!
//! Iteration is deterministic, always in key order: a simulator seed must replay exactly.
//! Records are found by hash (`IdMap`: a hash map never iterated, plus the ordered ids);
//! the sweeper's and pruner's indexes are ordered sets; the history index is only looked
//! up by account, never iterated, or (a tracked shard's) a list in sequence order.

use crate::id_map::{CutCopy, FastMap, FastSet, IdMap};
use crate::op::{AccountOp, Op, Reply, TransferOp};
use crate::prune_index::PruneIndex;
use crate::record::{
    apply_account_absent, apply_account_to, apply_transfer_absent, apply_transfer_to,
    get_account_shared, IndexEffect,
};
use crate::store::{BoxFuture, HistoryPage, Store, StoreError};
use crate::wake_index::WakeIndex;
use crate::{push_made, room_like};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use xfer_core::mutant::{self, Mutant};
use xfer_core::{
    Account, AccountId, AccountStatus, Clock, Intent, IntentState, Timestamp, TransferId,
    TransferRecord,
};

/// One shard's records and indexes, in memory.
#[derive(Debug, Default)]
pub struct MemoryShard {
    /// Records are shared (`Arc`) and copied on write (`Arc::make_mut`): a checkpointer
    /// takes a consistent cut of transfers by counting references under the shard's lock
    /// instead of copying every changed one there, and only a transfer written again while
    /// the cut is still held is copied, by that write. Accounts it takes as copies without
    /// their tombstones (`CutCopy for Arc<Account>`).
    accounts: IdMap<AccountId, Arc<Account>>,
    /// Without an ordered set of ids (one added and removed per transfer): sorted when
    /// scanned (`id_map.rs`).
    transfers: IdMap<TransferId, Arc<TransferRecord>, false>,
    /// (wake_at, id) of every non-terminal transfer: the sweeper's index.
    wake: WakeIndex,
    /// Every tombstone, in the order the pruner takes them (`prune_index.rs`).
    tombstones: PruneIndex,
    /// The history index.
    history: History,
    sequence: u64,
    /// What changed since the last [`MemoryShard::take_changes`], when tracked.
    changes: Option<Changes>,
}

/// A history entry: `(sequence, account, transfer)`.
pub type HistoryEntry = (u64, AccountId, TransferId);

/// A shard's history entries held in memory.
#[derive(Debug)]
enum History {
    /// An untracked shard keeps every entry, by account: account -> (sequence, transfer),
    /// sequence increasing. Only looked up by account, never iterated (a hash map's order
    /// is not deterministic).
    ByAccount(FastMap<AccountId, BTreeMap<u64, TransferId>>),
    /// A tracked shard holds only the entries not saved elsewhere yet, in sequence order:
    /// the lists handed out as [`Changes::history`] and not yet said saved
    /// ([`MemoryShard::history_saved`]), then the entries since. Adding an entry is a push;
    /// a read scans them, newest first. (Indexed by account, the adding and the evicting
    /// after a checkpoint were about 6 % of `xfer bench`'s samples: `docs/benchmarks.md`.)
    Unsaved {
        taken: VecDeque<Arc<Vec<HistoryEntry>>>,
        since: Vec<HistoryEntry>,
    },
}

impl Default for History {
    fn default() -> History {
        History::ByAccount(FastMap::default())
    }
}

impl History {
    fn add(&mut self, sequence: u64, account: &AccountId, transfer: &TransferId) {
        match self {
            History::ByAccount(by) => {
                by.entry(account.clone())
                    .or_default()
                    .insert(sequence, transfer.clone());
            }
            History::Unsaved { since, .. } => {
                push_made(since, || (sequence, account.clone(), transfer.clone()))
            }
        }
    }

    /// The entries added since the last take, to be saved elsewhere; still held until said
    /// saved. (Empty for an untracked shard, which keeps its entries.)
    fn take(&mut self, room: Vec<HistoryEntry>) -> Arc<Vec<HistoryEntry>> {
        match self {
            History::ByAccount(_) => Arc::default(),
            History::Unsaved { taken, since } => {
                let room = room_or_like(room, since);
                let list = Arc::new(std::mem::replace(since, room));
                taken.push_back(Arc::clone(&list));
                list
            }
        }
    }

    /// At most `limit` entries of `account`, newest first, strictly older than `before`.
    fn entries(&self, account: &AccountId, before: u64, limit: usize) -> Vec<(u64, TransferId)> {
        match self {
            History::ByAccount(by) => by.get(account).map_or_else(Vec::new, |h| {
                h.range(..before)
                    .rev()
                    .take(limit)
                    .map(|(s, t)| (*s, t.clone()))
                    .collect()
            }),
            History::Unsaved { taken, since } => since
                .iter()
                .rev()
                .chain(taken.iter().rev().flat_map(|l| l.iter().rev()))
                .filter(|(s, a, _)| a == account && *s < before)
                .take(limit)
                .map(|(s, _, t)| (*s, t.clone()))
                .collect(),
        }
    }
}

/// How many due tombstones [`MemoryShard::prune`] looks up ahead at a time.
const PRUNE_CHUNK: usize = 128;

/// [`MemoryShard::warm`] for a chunk of the pruner's entries: their accounts, then their
/// tombstones, read and thrown away, so that the lookups' cache misses overlap.
fn warm_prune(accounts: &IdMap<AccountId, Arc<Account>>, chunk: &[(AccountId, TransferId)]) {
    let mut last: Option<(&AccountId, Option<&Arc<Account>>)> = None;
    let mut found: Vec<(&Arc<Account>, &TransferId)> = Vec::with_capacity(chunk.len());
    for (account, transfer) in chunk {
        if last.is_none_or(|(id, _)| id != account) {
            last = Some((account, accounts.get(account)));
        }
        if let Some((_, Some(a))) = last {
            found.push((a, transfer));
        }
    }
    warm_intents(&found);
}

/// The second and third stages of [`MemoryShard::warm`]: each account (a field on every
/// cache line of it, its shared count first, which the write's `Arc::make_mut` reads:
/// reading only an account's table of intents and a transfer's state left that line a
/// miss in `apply`, whose `make_mut` loads held 2.3 % of `xfer bench`'s samples,
/// `docs/benchmarks.md`), then the intent of each transfer in it, read and thrown away.
/// (The fields read are less than a cache line apart in the layout rustc 1.95 gives,
/// `offset_of!`; another layout only warms less.)
fn warm_intents(found: &[(&Arc<Account>, &TransferId)]) {
    use std::hint::black_box;
    for (a, _) in found {
        black_box((
            Arc::strong_count(a),
            a.id.as_bytes().len(),
            a.intents.len(),
            a.balance,
            a.status,
        ));
    }
    for (a, transfer) in found {
        black_box(a.intents.get(transfer).map(|i| i.state));
    }
}

/// A field on every cache line of transfer record `r`, its shared count first (what a
/// write's `Arc::make_mut` reads), for read-ahead loops to throw away (`black_box`): the
/// shard's steps ([`MemoryShard::warm`]) and a checkpoint's passes over its cut. The fields
/// are less than a cache line apart in the layout rustc 1.95 gives (`offset_of!`); another
/// layout only warms less.
#[inline(always)]
pub fn transfer_lines(r: &Arc<TransferRecord>) -> impl Sized {
    (
        Arc::strong_count(r),
        r.owner.is_some(),
        r.reason.is_some(),
        r.deadline,
        r.state,
    )
}

/// The id of the account the pruner leaves, if it is a placeholder it emptied (to drop).
fn emptied_placeholder(left: Option<(AccountId, Option<&mut Account>)>) -> Option<AccountId> {
    match left? {
        (id, Some(a)) if a.status == AccountStatus::Unopened && a.intents.is_empty() => Some(id),
        _ => None,
    }
}

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
    /// they are saved ([`MemoryShard::history_saved`]).
    pub history: Arc<Vec<HistoryEntry>>,
    /// Tombstones written, each as it was written (it never changes after: a tombstone is
    /// only ever dropped, past its horizon). An account listed as changed is still the
    /// whole record, tombstones included; a store that writes tombstones apart from their
    /// accounts writes these (and a tombstone pruned since is harmless to keep: its horizon
    /// has passed, so a prune drops it again, and nothing else can find it).
    pub tombstones: Vec<(AccountId, TransferId, Intent)>,
    /// An account was dropped (and may have been created again, so named twice).
    dropped_account: bool,
}

/// The list that takes over from `last` ([`room_like`] its room): `room` if it has that
/// much, else a new one.
fn room_or_like<T>(room: Vec<T>, last: &Vec<T>) -> Vec<T> {
    let wanted = room_like(last);
    if room.capacity() >= wanted {
        debug_assert!(room.is_empty(), "room is empty");
        room
    } else {
        Vec::with_capacity(wanted)
    }
}

/// Empty lists for the changes between two checkpoints, made before the cut that hands
/// them to the shard ([`MemoryShard::begin_cut_with`]), with every page of their room
/// written once. A list's room is untouched memory until the shard's steps fill it, and
/// the first write to a page faults: the kernel zeroes it (a 2 MiB page with transparent
/// huge pages), which on a virtual machine took about 5 ms a page
/// (`docs/benchmarks.md`), every step on the shard waiting behind its lock meanwhile. A
/// checkpointer makes the room in its own thread instead, before it takes the lock.
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
    /// new memory for them from one cut to the next: new lists for every cut were the first
    /// to touch two fifths of the pages a uniform run took in its first half-minute (each a
    /// fault of 2 MiB zeroed), though other code touched as many new pages once they were
    /// kept (`docs/benchmarks.md`).
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
/// shard's next write to it copied the whole account, every tombstone, under the shard's
/// lock, because the cut still held it: for the hot account of `xfer bench --workload
/// hot` (hundreds of thousands of tombstones) that copy and its fresh pages were a fifth
/// of the CPU and the stalls behind the latency tail; an ordinary account, with no open
/// intent most of the time, is copied without walking its tombstones at all
/// (`Intents::open_only`), for less than its copy on write cost (`docs/benchmarks.md`).
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

    /// What changed since the last call (empty if the shard does not track changes).
    pub fn take_changes(&mut self) -> Changes {
        self.take(false, Room::default())
    }

    fn take(&mut self, cut: bool, room: Room) -> Changes {
        let Some(c) = &mut self.changes else {
            return Changes::default();
        };
        // The next lists start as long as these: grown from empty by doubling, they were
        // copied over and over (1.7 % of `xfer bench`'s samples under `apply`,
        // `docs/benchmarks.md`).
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
            tombstones: room_or_like(tombstones, &c.tombstones),
            dropped_account: false,
        };
        let mut taken = std::mem::replace(c, next);
        taken.history = self.history.take(history);
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
    /// A cut taken whole at once held the shard's lock for one lookup per changed record,
    /// 2.7 ms on average and up to 13 ms at 32,000 transfers/s, stalling every step on the
    /// shard (the latency tail; `docs/benchmarks.md`).
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
                    let step = apply_transfer_to(r, op, now);
                    let after = r.wake_at();
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
                        self.transfers.insert_marking(id.clone(), r);
                        self.note_transfer(id);
                    }
                    reply
                }
            },
        }
    }

    /// See [`Store::scan_due`].
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

    /// See [`Store::history`].
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

    /// Reads, and throws away, what [`MemoryShard::evict_transfer`] of each of `ids` reads
    /// first (the record's slot and its state), in a short loop of its own so that their
    /// cache misses overlap, as [`MemoryShard::warm`] does for a batch's steps: the records
    /// a checkpoint evicts were last touched long before, and looked up one after the
    /// other inside the eviction each miss was waited for in turn.
    pub fn warm_evictions(&self, ids: &[&TransferId]) {
        for id in ids {
            std::hint::black_box(self.transfers.get(id).map(|r| r.state));
        }
    }

    /// Drops from memory the history entries of `list`, handed out as
    /// [`Changes::history`] and now saved elsewhere.
    pub fn history_saved(&mut self, list: &Arc<Vec<HistoryEntry>>) {
        if let History::Unsaved { taken, .. } = &mut self.history {
            taken.retain(|l| !Arc::ptr_eq(l, list));
        }
    }

    /// Reads, and throws away, what [`MemoryShard::apply`] of each of `ops` will read
    /// first: its record and, for a step of a transfer on an account, the account's intent.
    /// It changes nothing. It is for the memory latency: a record is found by hash
    /// among hundreds of MiB, so each op's first reads miss the caches, and one after the
    /// other inside `apply` they are a chain of misses. Here the lookups of different ops
    /// do not depend on each other, so the processor has several in flight at once, and
    /// `apply` then finds the lines in cache. In stages (records, then their intents), so
    /// that a stage's loop is short enough for many of its misses to overlap.
    pub fn warm<O: std::borrow::Borrow<Op>>(&self, ops: &[O]) {
        let mut accounts: Vec<(&Arc<Account>, &TransferId)> = Vec::with_capacity(ops.len());
        for op in ops {
            match op.borrow() {
                Op::Account(id, op) => {
                    let transfer = match op {
                        AccountOp::Prepare { transfer, .. }
                        | AccountOp::Post { transfer, .. }
                        | AccountOp::Release { transfer, .. } => transfer,
                        _ => continue,
                    };
                    if let Some(a) = self.accounts.get(id) {
                        accounts.push((a, transfer));
                    }
                }
                Op::Transfer(id, _) => {
                    std::hint::black_box(self.transfers.get(id).map(transfer_lines));
                }
            }
        }
        warm_intents(&accounts);
    }

    /// True if the transfer is in memory.
    pub fn has_transfer(&self, id: &TransferId) -> bool {
        self.transfers.contains_key(id)
    }

    /// The first entry of the pruner's index, `(prune_at(horizon), account, transfer)`, if
    /// the shard holds any tombstone: the pruner takes entries from the front, so a
    /// tombstone saved elsewhere whose entry sorts before this one is not held any more.
    pub fn first_tombstone(&self) -> Option<(Timestamp, AccountId, TransferId)> {
        self.tombstones.first()
    }

    /// The entries of the pruner's first bucket, if it is due at `now`, unsorted and holds
    /// at least `at_least`: for a caller to sort ([`crate::prune_index::sort_bucket`])
    /// without holding the shard, then hand back with [`MemoryShard::sorted_tombstones`].
    /// Until then [`MemoryShard::prune`] takes nothing (see
    /// [`PruneIndex::take_to_sort`]).
    pub fn tombstones_to_sort(
        &mut self,
        now: Timestamp,
        at_least: usize,
    ) -> Option<(Timestamp, Vec<(AccountId, TransferId)>)> {
        self.tombstones.take_to_sort(now, at_least)
    }

    /// Hands back, sorted, the entries [`MemoryShard::tombstones_to_sort`] answered.
    pub fn sorted_tombstones(&mut self, at: Timestamp, sorted: Vec<(AccountId, TransferId)>) {
        self.tombstones.put_sorted(at, sorted);
    }

    /// How many entries the pruner's first bucket holds, if it is due at `now` and none of
    /// its entries are out being sorted (else 0): a [`MemoryShard::prune`] of at most
    /// that many takes from that bucket alone.
    pub fn first_due_tombstones(&self, now: Timestamp) -> usize {
        self.tombstones.first_due_len(now)
    }

    /// See [`Store::prune`]: drops tombstones with horizon `<= now`.
    pub fn prune(&mut self, now: Timestamp, limit: usize) -> usize {
        self.prune_counted(now, limit).0
    }

    /// [`MemoryShard::prune`], answering how many tombstones it dropped and how many
    /// entries of the pruner's index it took (at most `limit`): a `prune(now, taken)` on
    /// the same shard takes the same entries, which is what a log of prunes must replay.
    pub fn prune_counted(&mut self, now: Timestamp, limit: usize) -> (usize, usize) {
        if mutant::is(Mutant::TombstonesNeverPruned) {
            return (0, 0);
        }
        let now = if mutant::is(Mutant::PruneIgnoresHorizon) {
            Timestamp::NEVER
        } else {
            now
        };
        let mut dropped = 0;
        let mut emptied = Vec::new();
        let mut left = limit;
        {
            let (accounts, index) = (&mut self.accounts, &mut self.tombstones);
            // Due entries are the first ones: take them off the front (no key comparisons,
            // where looking each one up again to remove it compared ids all the way down),
            // a chunk at a time, whose tombstones are looked up once ahead (`warm_prune`).
            let mut chunk = Vec::with_capacity(limit.min(PRUNE_CHUNK));
            while left > 0 {
                chunk.extend(std::iter::from_fn(|| index.pop_due(now)).take(left.min(PRUNE_CHUNK)));
                if chunk.is_empty() {
                    break;
                }
                left -= chunk.len();
                warm_prune(accounts, &chunk);
                // The account the last entry named, taken once for all its entries in a row
                // (a bucket's entries are in account order: `prune_index.rs`).
                // (`None` for an account the shard no longer holds: its entries are stale.)
                let mut at: Option<(AccountId, Option<&mut Account>)> = None;
                for (account, transfer) in chunk.drain(..) {
                    if at.as_ref().is_none_or(|(id, _)| *id != account) {
                        emptied.extend(emptied_placeholder(at.take()));
                        // Not a change of the account's written form (tombstones are listed
                        // apart, see `Changes::tombstones`), unless a placeholder left empty
                        // and dropped.
                        let a = accounts.get_mut_unmarked(&account).map(Arc::make_mut);
                        at = Some((account, a));
                    }
                    let Some((_, Some(a))) = &mut at else {
                        continue;
                    };
                    // The index may be stale (a mutant, or a tombstone rewritten): re-check
                    // the record.
                    if a.intents.drop_due_tombstone(&transfer, now) {
                        dropped += 1;
                    }
                }
                emptied.extend(emptied_placeholder(at));
            }
        }
        for id in &emptied {
            self.drop_account(id);
        }
        (dropped, limit - left)
    }

    /// Drops an account from memory, as a change.
    fn drop_account(&mut self, id: &AccountId) {
        self.accounts.remove(id);
        if let Some(c) = &mut self.changes {
            // It may be listed already: `take_changes` removes the repeat.
            c.accounts.push(id.clone());
            c.dropped_account = true;
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

/// A [`MemoryShard`] behind the async [`Store`] trait, stamped by a [`Clock`].
pub struct MemoryStore {
    shard: Mutex<MemoryShard>,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore::with_shard(MemoryShard::new(), clock)
    }

    /// A store holding `shard`'s records (tests that start from a given state).
    pub fn with_shard(shard: MemoryShard, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shard: Mutex::new(shard),
            clock,
        }
    }

    fn shard(&self) -> std::sync::MutexGuard<'_, MemoryShard> {
        // A panic while holding the lock leaves a record half-written: refuse to go on.
        self.shard.lock().expect("memory shard poisoned by a panic")
    }
}

impl Store for MemoryStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        let now = self.clock.now();
        let mut shard = self.shard();
        let replies = ops.iter().map(|op| shard.apply(op, now)).collect();
        Box::pin(std::future::ready(Ok(replies)))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.shard().scan_due(now, limit))))
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        Box::pin(std::future::ready(Ok(self
            .shard()
            .history(account, before, limit))))
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        let now = self.clock.now();
        Box::pin(std::future::ready(Ok(self.shard().prune(now, limit))))
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        let out = self
            .shard()
            .accounts_after(after)
            .filter(|a| a.status != xfer_core::AccountStatus::Unopened)
            .take(limit)
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        let out = self
            .shard()
            .transfers_after(after, limit)
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune_at;
    use xfer_core::{AssetCode, LowerBound};

    fn create(shard: &mut MemoryShard, id: &str) -> AccountId {
        let id = AccountId::new(id).unwrap();
        let op = AccountOp::Create {
            asset: AssetCode::new("USD", "asset").unwrap(),
            lower_bound: LowerBound::Unbounded,
        };
        shard.apply(&Op::Account(id.clone(), op), Timestamp(1));
        id
    }

    /// A one-posting USD transfer of `amount` from `from` to `to`, due in a second.
    fn spec(
        id: TransferId,
        from: &AccountId,
        to: &AccountId,
        amount: u64,
    ) -> xfer_core::TransferSpec {
        xfer_core::TransferSpec {
            id,
            postings: vec![xfer_core::Posting {
                from: from.clone(),
                to: to.clone(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: xfer_core::Amount::new(amount, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: xfer_core::TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        }
    }

    /// Prepares transfer `transfer` on account `a` (a debit of 1 with `horizon`), and posts
    /// it unless `open`: a tombstone, or an open intent.
    fn intent(shard: &mut MemoryShard, a: &AccountId, transfer: &str, horizon: u64, open: bool) {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let transfer = TransferId::new(transfer).unwrap();
        let mut step = |op: AccountOp| shard.apply(&Op::Account(a.clone(), op), Timestamp(2));
        step(AccountOp::Prepare {
            transfer: transfer.clone(),
            asset: usd(),
            debit: 1,
            credit: 0,
            deadline: Timestamp(5),
            horizon: Timestamp(horizon),
        });
        if !open {
            step(AccountOp::Post {
                transfer,
                asset: usd(),
            });
        }
    }

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

    /// The pruner drops exactly an account's due tombstones, few or most of its intents:
    /// open intents and tombstones of a later bucket stay (even past their horizon), and
    /// the count is right; a call cut by its limit leaves the rest to the next.
    #[test]
    fn prune_drops_exactly_the_due_tombstones() {
        // `due` tombstones with horizon 10, `later` with horizon 1,030 (past at 1,100 but
        // in the next bucket, due at 2,048), and one open intent.
        let run = |due: usize, later: usize| {
            let mut shard = MemoryShard::tracking();
            let a = create(&mut shard, "a");
            for i in 0..due + later {
                let horizon = if i < due { 10 } else { 1_030 };
                intent(&mut shard, &a, &format!("t{i}"), horizon, false);
            }
            intent(&mut shard, &a, "open", 10, true);
            let dropped = shard.prune(Timestamp(1_100), 10_000);
            let left = shard.account(&a).unwrap().intents.len();
            (
                dropped,
                left,
                shard.prune(Timestamp(1_100), 10_000),
                shard.prune(Timestamp(2_048), 10_000),
            )
        };
        // One due among 41, 40 due among 41.
        assert_eq!(run(1, 40), (1, 41, 0, 40));
        assert_eq!(run(40, 1), (40, 2, 0, 1));
        // Runs longer than the pruner's chunk of look-ahead, one account across chunks.
        let long = 2 * PRUNE_CHUNK + 3;
        assert_eq!(run(long, 5), (long, 6, 0, 5));
        assert_eq!(run(5, long), (5, long + 1, 0, long));
        // A placeholder's marks across chunks: emptied, the placeholder is dropped.
        let mut shard = MemoryShard::tracking();
        let p = AccountId::new("p").unwrap();
        for i in 0..PRUNE_CHUNK + 7 {
            let release = AccountOp::Release {
                transfer: TransferId::new(&format!("t{i}")).unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                horizon: Timestamp(10),
            };
            shard.apply(&Op::Account(p.clone(), release), Timestamp(2));
        }
        assert_eq!(shard.account(&p).unwrap().intents.len(), PRUNE_CHUNK + 7);
        assert_eq!(shard.prune(Timestamp(1_100), 10_000), PRUNE_CHUNK + 7);
        assert!(
            shard.account(&p).is_none(),
            "the emptied placeholder is gone"
        );
        // An account's due entries taken over three calls (the limit cuts its run).
        let mut shard = MemoryShard::tracking();
        let a = create(&mut shard, "a");
        for i in 0..10 {
            intent(&mut shard, &a, &format!("t{i}"), 10, false);
        }
        assert_eq!(shard.prune(Timestamp(1_100), 4), 4);
        assert_eq!(shard.prune(Timestamp(1_100), 4), 4);
        assert_eq!(shard.prune(Timestamp(1_100), 4), 2);
        assert!(shard.account(&a).unwrap().intents.is_empty());
        assert!(
            shard.first_due_tombstones(Timestamp(u64::MAX - 1)) == 0,
            "the index is empty"
        );
    }

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
