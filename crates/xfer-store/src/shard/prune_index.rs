//! [`PruneIndex`]: a shard's tombstones in the order the pruner takes them.
//!
//! The order is `(prune_at(horizon), account, transfer)`: tombstones are due a bucket of
//! [`PRUNE_BUCKET_MS`] of horizons at a time, and a bucket's are taken in account order, so
//! that the pruner takes each account once for all its tombstones in a row instead of once
//! per tombstone (a lookup and, while a checkpoint holds the account, a copy:
//! `docs/benchmarks.md#prune-buckets`). A tombstone stays up to one bucket past its
//! horizon; none goes before it.
//!
//! Held as a vector per bucket, appended to and sorted only when the bucket is first taken
//! from: a B-tree of the whole order would put every new tombstone at a random place in the
//! newest bucket, costing what the buckets save. When a bucket's entries name a few
//! accounts each, the sort counts: each entry is placed once by its account's rank and
//! only each account's run is sorted by transfer (`sort_descending`,
//! `docs/benchmarks.md#prune-counting-sort`). The first entry, which a checkpoint records,
//! is kept as entries are added (neither sorted nor scanned for); and a caller may take a
//! due bucket's entries out to sort them without holding the shard
//! ([`PruneIndex::take_to_sort`]): a big bucket's sort takes milliseconds, every step on
//! the shard waiting behind it (`docs/benchmarks.md#prune-sort-unlocked`).

use crate::shard::list_room::{push_made, room_for};
use std::collections::BTreeMap;
use xfer_core::{AccountId, FastMap, Timestamp, TransferId};

/// The width of a bucket of horizons, in milliseconds.
pub const PRUNE_BUCKET_MS: u64 = 1024;

/// When the pruner may take a tombstone whose horizon is `horizon`: the end of its bucket
/// (never before the horizon).
pub fn prune_at(horizon: Timestamp) -> Timestamp {
    Timestamp(
        horizon
            .0
            .div_ceil(PRUNE_BUCKET_MS)
            .saturating_mul(PRUNE_BUCKET_MS),
    )
}

/// The most entries a new bucket makes room for (3 MiB).
const ROOM_MAX: usize = 1 << 16;

/// How many times a new bucket's room the kept vector of an emptied one may hold and still
/// be taken ([`PruneIndex`]'s `spares`).
const SPARE_ROOMS: usize = 4;

/// One bucket's entries; when `sorted`, in descending order (the first is last, to pop).
#[derive(Debug)]
struct Bucket {
    entries: Vec<(AccountId, TransferId)>,
    sorted: bool,
    /// While the bucket's entries are out being sorted ([`PruneIndex::take_to_sort`]):
    /// the least of them. `entries` holds only those added since.
    out: Option<(AccountId, TransferId)>,
    /// While `entries` is not sorted: the least of them, kept as they are pushed: finding
    /// it by a scan would read the whole bucket at every checkpoint and every sort taken
    /// out (`docs/benchmarks.md#bucket-least-kept`).
    least_unsorted: Option<(AccountId, TransferId)>,
}

impl Bucket {
    /// Sorts the entries if they are not yet; answers how many it sorted (0 if none).
    fn sort(&mut self) -> usize {
        if self.sorted {
            return 0;
        }
        let n = self.entries.len();
        sort_bucket(&mut self.entries);
        self.sorted = true;
        self.least_unsorted = None;
        n
    }

    /// Adds an entry: the bucket is not sorted any more.
    fn push(&mut self, account: &AccountId, transfer: &TransferId) {
        if self.sorted {
            // A sorted bucket's least entry is its last.
            self.least_unsorted = self.entries.last().cloned();
            self.sorted = false;
        }
        if self
            .least_unsorted
            .as_ref()
            .is_none_or(|(a, t)| (account, transfer) < (a, t))
        {
            self.least_unsorted = Some((account.clone(), transfer.clone()));
        }
        push_made(&mut self.entries, || (account.clone(), transfer.clone()));
    }

    /// The least entry, without sorting.
    fn least(&self) -> Option<&(AccountId, TransferId)> {
        let held = if self.sorted {
            self.entries.last()
        } else {
            self.least_unsorted.as_ref()
        };
        match (held, &self.out) {
            (Some(h), Some(o)) => Some(h.min(o)),
            (h, o) => h.or(o.as_ref()),
        }
    }
}

/// How many emptied buckets' vectors [`PruneIndex`] keeps at most for new buckets.
const SPARES_MAX: usize = 3;

/// A vector for a new bucket: the largest of `spares` that holds as many entries as the
/// last bucket sorted (or at least a new vector's room) and at most [`SPARE_ROOMS`] times
/// `room`, else a new one. The spares that do not fit are let go (see [`PruneIndex`]'s
/// `spares`); those that fit stay for the next.
fn take_spare(
    spares: &mut Vec<Vec<(AccountId, TransferId)>>,
    room: usize,
) -> Vec<(AccountId, TransferId)> {
    let fresh = room.min(ROOM_MAX);
    // As many as the last bucket held (`room` less what `room_for` adds), or a new
    // vector's room if that is less.
    let fits = (room - room / 5).min(fresh)..=room.saturating_mul(SPARE_ROOMS);
    spares.retain(|v| fits.contains(&v.capacity()));
    spares.pop().unwrap_or_else(|| Vec::with_capacity(fresh))
}

/// Keeps an emptied bucket's vector for a new bucket, `spares` in order of capacity: the
/// largest [`SPARES_MAX`] are kept.
fn keep_spare(
    spares: &mut Vec<Vec<(AccountId, TransferId)>>,
    emptied: Vec<(AccountId, TransferId)>,
) {
    let at = spares.partition_point(|v| v.capacity() < emptied.capacity());
    spares.insert(at, emptied);
    if spares.len() > SPARES_MAX {
        spares.remove(0);
    }
}

/// Sorts a bucket's entries as the index pops them: in descending order, each once.
pub fn sort_bucket(entries: &mut Vec<(AccountId, TransferId)>) {
    sort_descending(entries);
    entries.dedup();
}

/// Sorts `entries` in descending order: by account, then by transfer. Sorting the pairs
/// whole compares and moves each 48-byte pair many times. When the entries name a few
/// accounts each, a counting sort on each account's rank places each entry once (a
/// permutation applied by swaps) and compares transfers only within an account's run.
/// With about one entry per account it costs more than it saves, so once a third as many
/// accounts as entries have turned up, the entries are sorted whole after all
/// (`docs/benchmarks.md#prune-counting-sort`).
fn sort_descending(entries: &mut [(AccountId, TransferId)]) {
    let Some((rank, accounts)) = account_ranks(entries) else {
        entries.sort_unstable_by(|x, y| y.cmp(x));
        return;
    };
    // Where each account's run starts, then where each entry goes.
    let mut next = vec![0usize; accounts + 1];
    for &r in &rank {
        next[r as usize + 1] += 1;
    }
    for r in 0..accounts {
        next[r + 1] += next[r];
    }
    let mut to: Vec<usize> = rank
        .iter()
        .map(|&r| {
            let slot = &mut next[r as usize];
            *slot += 1;
            *slot - 1
        })
        .collect();
    drop(rank);
    // Every entry put in its place, each cycle of the permutation followed by swaps.
    for i in 0..entries.len() {
        while to[i] != i {
            let j = to[i];
            entries.swap(i, j);
            to.swap(i, j);
        }
    }
    // `next[r]` is now where run `r` ends.
    let mut start = 0;
    for &end in &next[..accounts] {
        entries[start..end].sort_unstable_by(|x, y| y.1.cmp(&x.1));
        start = end;
    }
}

/// Each entry's account's rank in descending account order, and how many accounts there
/// are; `None` if the entries name too many accounts for a counting sort to pay (more
/// than a third as many as there are entries).
fn account_ranks(entries: &[(AccountId, TransferId)]) -> Option<(Vec<u32>, usize)> {
    let most = entries.len() / 3;
    // Each entry's account as a dense index, the accounts in the order first seen.
    let mut dense: FastMap<&AccountId, u32> = FastMap::default();
    let mut accounts: Vec<&AccountId> = Vec::new();
    let mut of: Vec<u32> = Vec::with_capacity(entries.len());
    for (a, _) in entries {
        let fresh = u32::try_from(accounts.len()).ok()?;
        let d = *dense.entry(a).or_insert(fresh);
        if d == fresh {
            if accounts.len() == most {
                return None;
            }
            accounts.push(a);
        }
        of.push(d);
    }
    drop(dense);
    let mut by_rank: Vec<u32> = (0..u32::try_from(accounts.len()).ok()?).collect();
    by_rank.sort_unstable_by(|&x, &y| accounts[y as usize].cmp(accounts[x as usize]));
    let mut rank_of = vec![0u32; accounts.len()];
    for (r, &d) in (0..).zip(&by_rank) {
        rank_of[d as usize] = r;
    }
    for d in &mut of {
        *d = rank_of[*d as usize];
    }
    Some((of, accounts.len()))
}

/// See the module docs. Every bucket held is non-empty, or has its entries out.
#[derive(Debug, Default)]
pub struct PruneIndex {
    buckets: BTreeMap<Timestamp, Bucket>,
    /// How many entries the last bucket sorted held, and some ([`room_for`]): a new
    /// bucket starts with room for as many (at most [`ROOM_MAX`]), not grown from empty by
    /// doubling (copied over and over).
    room: usize,
    /// The vectors of buckets emptied since new buckets last took them, kept for their
    /// room (at most [`SPARES_MAX`], the largest, in order of capacity). A new bucket
    /// takes the largest that holds as many entries as the last bucket sorted (or at
    /// least a new vector's room) and not more than [`SPARE_ROOMS`] times `room` (the
    /// vector of a burst long past is let go, not kept for ever); those that do not fit
    /// are let go then too. A new vector's pages are fresh memory, zeroed by the kernel on
    /// first write (`docs/benchmarks.md#lists-kept-for-memory`).
    ///
    /// More than one, and tested against `room` uncapped, because buckets begin as
    /// transfers come and are emptied as the pruner's passes go, so two may begin between
    /// two emptied; and the buckets of a hot account's shard hold more than [`ROOM_MAX`]
    /// entries (`docs/benchmarks.md#pruner-spares`).
    spares: Vec<Vec<(AccountId, TransferId)>>,
}

impl PruneIndex {
    /// Adds the tombstone of `account` for `transfer` whose horizon is `horizon` (adding
    /// one already there changes nothing).
    pub fn insert(&mut self, horizon: Timestamp, account: &AccountId, transfer: &TransferId) {
        let (room, spares) = (self.room, &mut self.spares);
        let bucket = self
            .buckets
            .entry(prune_at(horizon))
            .or_insert_with(|| Bucket {
                entries: take_spare(spares, room),
                sorted: false,
                out: None,
                least_unsorted: None,
            });
        bucket.push(account, transfer);
    }

    /// Notes how many entries a bucket held when sorted (0: it was sorted already).
    fn note_room(&mut self, sorted: usize) {
        if sorted > 0 {
            self.room = room_for(sorted);
        }
    }

    /// The first entry, `(prune_at(horizon), account, transfer)`, found without sorting
    /// (the checkpointer asks under the shard's lock), even while its bucket's entries are
    /// out being sorted.
    pub fn first(&self) -> Option<(Timestamp, AccountId, TransferId)> {
        let (at, bucket) = self.buckets.first_key_value()?;
        let (account, transfer) = bucket.least().expect("buckets are never empty");
        Some((*at, account.clone(), transfer.clone()))
    }

    /// Takes the first entry if it is due at `now`: `(account, transfer)`. `None` too while
    /// the first bucket's entries are out being sorted.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<(AccountId, TransferId)> {
        let mut first = self.buckets.first_entry()?;
        if *first.key() > now || first.get().out.is_some() {
            return None;
        }
        let bucket = first.get_mut();
        let sorted = bucket.sort();
        let entry = bucket.entries.pop().expect("buckets are never empty");
        if bucket.entries.is_empty() {
            let emptied = first.remove().entries;
            keep_spare(&mut self.spares, emptied);
        }
        self.note_room(sorted);
        Some(entry)
    }

    /// How many entries the first bucket holds if it is due at `now` and can be taken from
    /// (its entries are not out), else 0: what [`PruneIndex::pop_due`] takes at most before
    /// it reaches the next bucket (exactly that many once the bucket is sorted, which
    /// drops repeats).
    pub fn first_due_len(&self, now: Timestamp) -> usize {
        match self.buckets.first_key_value() {
            Some((at, b)) if *at <= now && b.out.is_none() => b.entries.len(),
            _ => 0,
        }
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Takes out the entries of the first bucket, if it is due at `now`, not sorted yet and
    /// holds at least `at_least` entries, to be sorted ([`sort_bucket`]) by a caller that
    /// does not hold what guards the index (sorting a big bucket takes milliseconds: under
    /// the shard's lock it stalled every step on the shard). Answers the bucket and its
    /// entries; until they are put back ([`PruneIndex::put_sorted`]) nothing is taken from
    /// it, [`PruneIndex::first`] still answers its least entry, and new entries wait apart.
    pub fn take_to_sort(
        &mut self,
        now: Timestamp,
        at_least: usize,
    ) -> Option<(Timestamp, Vec<(AccountId, TransferId)>)> {
        let mut first = self.buckets.first_entry()?;
        let at = *first.key();
        let bucket = first.get_mut();
        if at > now || bucket.sorted || bucket.out.is_some() || bucket.entries.len() < at_least {
            return None;
        }
        bucket.out = bucket.least_unsorted.take();
        Some((at, std::mem::take(&mut bucket.entries)))
    }

    /// Puts back the entries of bucket `at` that [`PruneIndex::take_to_sort`] took out,
    /// sorted by [`sort_bucket`]. Entries added meanwhile join them (the bucket is sorted
    /// again when next popped: they are rare, since an entry lands in a due bucket only if
    /// its horizon had passed when it was written).
    pub fn put_sorted(&mut self, at: Timestamp, sorted: Vec<(AccountId, TransferId)>) {
        let Some(bucket) = self.buckets.get_mut(&at).filter(|b| b.out.is_some()) else {
            debug_assert!(false, "bucket {at:?} was not taken out");
            return;
        };
        let n = sorted.len();
        let added = std::mem::replace(&mut bucket.entries, sorted);
        bucket.out = None;
        bucket.sorted = true;
        bucket.least_unsorted = None;
        for (account, transfer) in &added {
            bucket.push(account, transfer);
        }
        self.note_room(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use xfer_core::Rng;

    #[test]
    fn prune_at_is_the_end_of_the_bucket_never_before_the_horizon() {
        let b = PRUNE_BUCKET_MS;
        assert_eq!(prune_at(Timestamp(0)), Timestamp(0));
        assert_eq!(prune_at(Timestamp(1)), Timestamp(b));
        assert_eq!(prune_at(Timestamp(b)), Timestamp(b));
        assert_eq!(prune_at(Timestamp(b + 1)), Timestamp(2 * b));
        assert_eq!(prune_at(Timestamp::NEVER), Timestamp::NEVER);
    }

    #[test]
    fn the_counting_sort_sorts_as_a_comparison_sort_does() {
        // Few and many accounts, short and long runs, repeats: the same order as sorting
        // the pairs whole, counted or not.
        let mut rng = Rng::new(11);
        // (The last two: runs too short to count, found at the start or part way.)
        for (accounts, n) in [
            (1, 500),
            (40, 3_000),
            (1_500, 5_000),
            (0, 0),
            (3, 1),
            (2_000, 5_000),
        ] {
            let mut entries: Vec<(AccountId, TransferId)> = (0..n)
                .map(|_| {
                    let a = format!("acct-{}", rng.below(accounts));
                    let t = format!("b{}-{}", rng.below(8), rng.below(400));
                    (AccountId::new(&a).unwrap(), TransferId::new(&t).unwrap())
                })
                .collect();
            let mut want = entries.clone();
            want.sort_unstable_by(|x, y| y.cmp(x));
            sort_descending(&mut entries);
            assert_eq!(entries, want, "{accounts} accounts, {n} entries");
        }
    }

    #[test]
    fn the_first_entry_is_known_after_adding_to_a_bucket_already_sorted() {
        // A pop sorts the bucket; entries added to it after are unsorted again, and the
        // first entry is still the least of all, old or new.
        let id = |a: &str, t: &str| (AccountId::new(a).unwrap(), TransferId::new(t).unwrap());
        let h = Timestamp(10);
        let at = prune_at(h);
        let mut index = PruneIndex::default();
        for (a, t) in [("b", "1"), ("c", "1"), ("d", "1")] {
            index.insert(h, &id(a, t).0, &id(a, t).1);
        }
        assert_eq!(index.pop_due(at), Some(id("b", "1")));
        index.insert(h, &id("e", "1").0, &id("e", "1").1);
        assert_eq!(index.first(), Some((at, id("c", "1").0, id("c", "1").1)));
        index.insert(h, &id("a", "1").0, &id("a", "1").1);
        assert_eq!(index.first(), Some((at, id("a", "1").0, id("a", "1").1)));
        // Taken out to sort, with one added meanwhile, and put back.
        let (out_at, mut entries) = index.take_to_sort(at, 0).expect("due and unsorted");
        index.insert(h, &id("cc", "1").0, &id("cc", "1").1);
        assert_eq!(index.first(), Some((at, id("a", "1").0, id("a", "1").1)));
        sort_bucket(&mut entries);
        index.put_sorted(out_at, entries);
        let popped: Vec<_> = std::iter::from_fn(|| index.pop_due(at)).collect();
        let want: Vec<_> = ["a", "c", "cc", "d", "e"]
            .iter()
            .map(|a| id(a, "1"))
            .collect();
        assert_eq!(popped, want);
    }

    /// The `n`-th of a run of entries over seven accounts.
    fn id(n: usize) -> (AccountId, TransferId) {
        (
            AccountId::new(&format!("a{}", n % 7)).unwrap(),
            TransferId::new(&format!("t{n}")).unwrap(),
        )
    }

    /// Adds entries `ns` with horizon `at`.
    fn fill(index: &mut PruneIndex, at: Timestamp, ns: std::ops::Range<usize>) {
        for n in ns {
            let (a, t) = id(n);
            index.insert(at, &a, &t);
        }
    }

    #[test]
    fn a_bucket_begun_after_one_was_emptied_takes_its_memory() {
        // The second bucket writes into the first one's vector (pages already touched),
        // not into a new one: the same buffer, and no growth from empty.
        let mut index = PruneIndex::default();
        let first = Timestamp(10);
        fill(&mut index, first, 0..1_000);
        let buffer = index.buckets[&prune_at(first)].entries.as_ptr();
        let room = index.buckets[&prune_at(first)].entries.capacity();
        let popped = std::iter::from_fn(|| index.pop_due(prune_at(first))).count();
        assert_eq!(popped, 1_000);
        assert!(index.is_empty());
        let next = Timestamp(10 + 5 * PRUNE_BUCKET_MS);
        fill(&mut index, next, 0..1);
        let bucket = &index.buckets[&prune_at(next)];
        assert_eq!(bucket.entries.as_ptr(), buffer);
        assert_eq!(bucket.entries.capacity(), room);
        assert_eq!(index.pop_due(prune_at(next)), Some(id(0)));
    }

    #[test]
    fn a_bucket_larger_than_a_new_ones_room_takes_the_last_ones_memory() {
        // Buckets of a hot account's shard: more entries than a new vector's room
        // (ROOM_MAX), in a vector grown past SPARE_ROOMS times that room. The next bucket
        // of that size writes into it all the same, not into a new vector grown by copies.
        let n = 5 * ROOM_MAX;
        let mut index = PruneIndex::default();
        let first = Timestamp(10);
        fill(&mut index, first, 0..n);
        let grown = index.buckets[&prune_at(first)].entries.capacity();
        assert!(grown > ROOM_MAX * SPARE_ROOMS, "{grown}");
        let popped = std::iter::from_fn(|| index.pop_due(prune_at(first))).count();
        assert_eq!(popped, n);
        assert_eq!(index.spares.len(), 1);
        let buffer = index.spares[0].as_ptr();
        let next = Timestamp(10 + 5 * PRUNE_BUCKET_MS);
        fill(&mut index, next, 0..n);
        let bucket = &index.buckets[&prune_at(next)];
        assert_eq!(
            bucket.entries.as_ptr(),
            buffer,
            "the emptied bucket's vector"
        );
        assert_eq!(bucket.entries.capacity(), grown, "not grown again");
    }

    #[test]
    fn the_vector_of_a_burst_is_let_go_once_buckets_are_small_again() {
        // A big bucket and a small one, emptied in turn: the big one's vector is kept, but a
        // bucket begun after the small one was sorted does not take it (more than
        // SPARE_ROOMS times its room).
        let mut index = PruneIndex::default();
        let (big, small) = (Timestamp(10), Timestamp(10 + PRUNE_BUCKET_MS));
        fill(&mut index, big, 0..10_000);
        fill(&mut index, small, 0..10);
        let popped = std::iter::from_fn(|| index.pop_due(prune_at(small))).count();
        assert_eq!(popped, 10_010);
        assert!(
            index.spares.iter().any(|v| v.capacity() >= 10_000),
            "the big bucket's vector kept"
        );
        let next = Timestamp(10 + 5 * PRUNE_BUCKET_MS);
        fill(&mut index, next, 0..1);
        let room = index.buckets[&prune_at(next)].entries.capacity();
        assert!(
            (room_for(10)..=SPARE_ROOMS * room_for(10)).contains(&room),
            "a room like the last bucket's: {room}"
        );
        assert!(index.spares.is_empty(), "the burst's vector let go");
    }

    #[test]
    fn two_buckets_begun_between_two_emptied_both_take_memory_kept() {
        // Buckets begin as transfers come and are emptied as the pruner goes: two emptied,
        // then two begun. Each new one writes into one of the emptied ones' vectors.
        let n = 1_000;
        let mut index = PruneIndex::default();
        let (a, b) = (Timestamp(10), Timestamp(10 + PRUNE_BUCKET_MS));
        fill(&mut index, a, 0..n);
        fill(&mut index, b, n..2 * n);
        let buffers: Vec<_> = [a, b]
            .iter()
            .map(|at| index.buckets[&prune_at(*at)].entries.as_ptr())
            .collect();
        let popped = std::iter::from_fn(|| index.pop_due(prune_at(b))).count();
        assert_eq!(popped, 2 * n);
        let (c, d) = (
            Timestamp(10 + 5 * PRUNE_BUCKET_MS),
            Timestamp(10 + 6 * PRUNE_BUCKET_MS),
        );
        fill(&mut index, c, 0..n);
        fill(&mut index, d, n..2 * n);
        for at in [c, d] {
            let taken = index.buckets[&prune_at(at)].entries.as_ptr();
            assert!(buffers.contains(&taken), "bucket {at:?} in a new vector");
        }
        assert!(index.spares.is_empty());
    }

    #[test]
    fn entries_come_out_in_the_order_of_a_sorted_set_of_them() {
        // Random inserts (repeats included), first() and pops at random instants, against
        // a B-tree set of the same keys: the same first entry and the same pops.
        let mut rng = Rng::new(7);
        let mut index = PruneIndex::default();
        let mut model: BTreeSet<(Timestamp, AccountId, TransferId)> = BTreeSet::new();
        let mut now = 0;
        for step in 0..20_000 {
            match rng.below(10) {
                0..=5 => {
                    let horizon = Timestamp(now + rng.below(5_000));
                    let a = AccountId::new(&format!("a{}", rng.below(30))).unwrap();
                    let t = TransferId::new(&format!("t{}", rng.below(2_000))).unwrap();
                    index.insert(horizon, &a, &t);
                    model.insert((prune_at(horizon), a, t));
                }
                6 => assert_eq!(index.first(), model.first().cloned(), "step {step}"),
                // The first bucket's entries out to be sorted, with entries added and the
                // index asked meanwhile: nothing is taken, the first entry is still known,
                // and once put back the order is the model's.
                7 if rng.below(4) == 0 => {
                    let due = Timestamp(now + rng.below(2_000));
                    if let Some((at, mut entries)) = index.take_to_sort(due, 0) {
                        assert!(index.first_due_len(due) == 0 && index.pop_due(due).is_none());
                        // Into the bucket that is out, or into an earlier one.
                        for _ in 0..rng.below(4) {
                            let back = rng.below(3 * PRUNE_BUCKET_MS).min(at.0);
                            let horizon = Timestamp(at.0 - back);
                            let a = AccountId::new(&format!("a{}", rng.below(30))).unwrap();
                            let t = TransferId::new(&format!("t{}", rng.below(2_000))).unwrap();
                            index.insert(horizon, &a, &t);
                            model.insert((prune_at(horizon), a, t));
                        }
                        assert_eq!(index.first(), model.first().cloned(), "step {step}");
                        // What is due before the bucket that is out can be taken; nothing
                        // from it or after it.
                        loop {
                            let want = model
                                .first()
                                .filter(|(b, _, _)| *b <= due && *b < at)
                                .cloned();
                            let first_len = index.first_due_len(due);
                            let got = index.pop_due(due);
                            assert_eq!(got.is_some(), first_len > 0, "step {step}");
                            match want {
                                Some((_, a, t)) => {
                                    model.pop_first();
                                    assert_eq!(got, Some((a, t)), "step {step}");
                                }
                                None => {
                                    assert_eq!(got, None, "step {step}");
                                    break;
                                }
                            }
                        }
                        sort_bucket(&mut entries);
                        index.put_sorted(at, entries);
                    }
                }
                _ => {
                    now += rng.below(300);
                    let want = model.first().filter(|(at, _, _)| at.0 <= now).cloned();
                    if want.is_some() {
                        model.pop_first();
                    }
                    assert_eq!(
                        index.first_due_len(Timestamp(now)) > 0,
                        want.is_some(),
                        "step {step}"
                    );
                    let got = index.pop_due(Timestamp(now));
                    assert_eq!(got, want.map(|(_, a, t)| (a, t)), "step {step}");
                }
            }
        }
        while let Some(e) = index.pop_due(Timestamp::NEVER) {
            let (_, a, t) = model.pop_first().expect("as many");
            assert_eq!(e, (a, t));
        }
        assert!(model.is_empty() && index.is_empty());
    }
}
