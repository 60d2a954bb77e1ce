//! [`DoneFilter`]: which transfer ids a shard's `done` table may hold, in memory.
//!
//! Every new transfer's insert must know whether its id is already taken (the idempotency
//! check), and a finished transfer may have left memory for the `done` table. Asking fjall
//! for every new id would go through its memtables and every table's own filter, under the
//! shard's lock (`docs/benchmarks.md#done-filter`). This filter answers "not there" for
//! almost every new id at the cost of one cache line.
//!
//! It never answers "not there" for an id the table holds:
//! - every id the checkpointer writes to `done` is added, under the shard's lock, before
//!   the record leaves memory (`Checkpointer::checkpoint`);
//! - what the table held at open is added by a scan on a background thread; until the scan
//!   is over the filter is incomplete and answers "maybe" for every id, so the caller asks
//!   fjall as before.
//!
//! The layout is a split-block Bloom filter (as Parquet's): a 64-byte block chosen by the
//! hash's high bits, one bit set in each of its eight words by the low bits, about
//! [`BITS_PER_ID`] bits per id (about 0.1 % false "maybe"s each). It grows by adding a filter
//! twice the size of the last when the last is full; a lookup asks each (a handful: the
//! first is sized at open for twice what the table held).

use xfer_core::hash::FastState;
use xfer_core::TransferId;

/// Bits per id a filter is sized for. Each false "maybe" is a read of `done`, which asks
/// the filter of every table in its level 0 ([`crate::tables::DONE_L0_TABLES`] of them
/// before a merge), under the shard's lock: 16 bits keep false "maybe"s near 0.1 % per
/// filter, worth their 2 bytes per finished transfer (`docs/benchmarks.md#done-l0-48`).
pub const BITS_PER_ID: usize = 16;

/// The smallest filter's capacity, in ids.
pub const CAPACITY_MIN: usize = 1 << 18;

const BLOCK_BITS: usize = 512;

/// Parquet's split-block salts: one odd multiplier per word of a block.
const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// One fixed-size split-block Bloom filter.
struct Bloom {
    blocks: Vec<[u64; 8]>,
    held: usize,
    capacity: usize,
}

impl Bloom {
    fn new(capacity: usize) -> Bloom {
        let blocks = (capacity * BITS_PER_ID).div_ceil(BLOCK_BITS).max(1);
        Bloom {
            blocks: vec![[0; 8]; blocks],
            held: 0,
            capacity,
        }
    }

    #[inline]
    fn block(&self, h: u64) -> usize {
        ((u128::from(h) * self.blocks.len() as u128) >> 64) as usize
    }

    #[inline]
    fn bit(h: u64, word: usize) -> u64 {
        1 << ((h as u32).wrapping_mul(SALT[word]) >> 26)
    }

    fn insert(&mut self, h: u64) {
        let b = self.block(h);
        let block = &mut self.blocks[b];
        for (w, word) in block.iter_mut().enumerate() {
            *word |= Bloom::bit(h, w);
        }
        self.held += 1;
    }

    /// Reads the block of each of `hashes`, and throws it away (see
    /// [`DoneFilter::insert_all`] and [`DoneFilter::prefetch`]).
    fn prefetch(&self, hashes: &[u64]) {
        for &h in hashes {
            std::hint::black_box(self.blocks[self.block(h)][0]);
        }
    }

    #[inline]
    fn may_hold(&self, h: u64) -> bool {
        let block = &self.blocks[self.block(h)];
        block
            .iter()
            .enumerate()
            .all(|(w, word)| word & Bloom::bit(h, w) != 0)
    }
}

/// See the module docs.
pub struct DoneFilter {
    hasher: FastState,
    blooms: Vec<Bloom>,
    complete: bool,
}

impl DoneFilter {
    /// An incomplete filter (every answer "maybe") sized for `expected` ids.
    pub fn new(expected: usize) -> DoneFilter {
        DoneFilter {
            hasher: FastState::default(),
            blooms: vec![Bloom::new(expected.saturating_mul(2).max(CAPACITY_MIN))],
            complete: false,
        }
    }

    /// The hash of the id `id` (its bytes), as [`DoneFilter::insert_hash`] takes it: the
    /// hasher is the filter's own, so a scan on another thread hashes with a clone.
    pub fn hasher(&self) -> FastState {
        self.hasher.clone()
    }

    /// Hashes an id's bytes with `hasher` (see [`DoneFilter::hasher`]).
    pub fn hash_with(hasher: &FastState, id: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        hasher.hash_one(id)
    }

    /// Adds `id`.
    pub fn insert(&mut self, id: &TransferId) {
        self.insert_hash(DoneFilter::hash_with(&self.hasher, id.as_bytes()));
    }

    /// Adds every id of `ids`: their blocks read first, in a loop of their own, so that
    /// the cache misses of a filter of millions of ids overlap instead of being waited for
    /// one by one.
    pub fn insert_all(&mut self, ids: &[&TransferId]) {
        let hashes = self.hash_all(ids);
        self.blooms.last().expect("never empty").prefetch(&hashes);
        for h in hashes {
            self.insert_hash(h);
        }
    }

    /// Adds the id whose hash (by [`DoneFilter::hash_with`]) is `h`.
    pub fn insert_hash(&mut self, h: u64) {
        let last = self.blooms.last().expect("never empty");
        if last.held >= last.capacity {
            let grown = Bloom::new(last.capacity.saturating_mul(2));
            self.blooms.push(grown);
        }
        self.blooms.last_mut().expect("never empty").insert(h);
    }

    /// Every id the table held at open has been added: from now on "no" means no.
    pub fn set_complete(&mut self) {
        self.complete = true;
    }

    /// Whether every id the table held at open has been added.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// False only if `id` is certainly not in the table.
    #[inline]
    pub fn may_hold(&self, id: &TransferId) -> bool {
        self.may_hold_hash(DoneFilter::hash_with(&self.hasher, id.as_bytes()))
    }

    /// [`DoneFilter::may_hold`] of the id whose hash (by [`DoneFilter::hash_with`] with
    /// this filter's hasher) is `h`.
    #[inline]
    pub fn may_hold_hash(&self, h: u64) -> bool {
        !self.complete || self.blooms.iter().rev().any(|b| b.may_hold(h))
    }

    /// The hashes of `ids`, in order, each id's block read in every filter (and thrown
    /// away) in a loop of their own: a new id is asked of every grown filter, each a
    /// cache miss in a few MiB, and one id after the other inside the lookups they would be
    /// a chain of misses under the shard's lock. Here they overlap
    /// (`docs/benchmarks.md#done-filter-readahead`); [`DoneFilter::may_hold_hash`] then
    /// finds the lines in cache. Reads nothing while the filter is incomplete (every
    /// answer is "maybe" then).
    pub fn prefetch(&self, ids: &[&TransferId]) -> Vec<u64> {
        let hashes = self.hash_all(ids);
        if self.complete {
            self.blooms.iter().for_each(|b| b.prefetch(&hashes));
        }
        hashes
    }

    /// The hashes of `ids` (by [`DoneFilter::hash_with`] with this filter's hasher), in
    /// order.
    fn hash_all(&self, ids: &[&TransferId]) -> Vec<u64> {
        ids.iter()
            .map(|id| DoneFilter::hash_with(&self.hasher, id.as_bytes()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: usize) -> TransferId {
        TransferId::new(&format!("t-{i}")).unwrap()
    }

    #[test]
    fn an_incomplete_filter_answers_maybe_for_everything() {
        let mut f = DoneFilter::new(0);
        f.insert(&id(1));
        assert!(f.may_hold(&id(2)));
        let h = f.prefetch(&[&id(2)]);
        assert!(f.may_hold_hash(h[0]));
        f.set_complete();
        assert!(f.may_hold(&id(1)));
        assert!(!f.may_hold(&id(2)));
    }

    /// The hashes `prefetch` answers are the ids' own, in order: asked by hash, each id gets
    /// the answer it gets by id, across grown filters.
    #[test]
    fn prefetch_answers_each_ids_hash_in_order() {
        let mut f = DoneFilter::new(0);
        for i in (0..CAPACITY_MIN * 3).step_by(2) {
            f.insert(&id(i));
        }
        f.set_complete();
        assert!(f.blooms.len() >= 2, "{} filters", f.blooms.len());
        let ids: Vec<TransferId> = (0..2_000).map(id).collect();
        let refs: Vec<&TransferId> = ids.iter().collect();
        let hashes = f.prefetch(&refs);
        assert_eq!(hashes.len(), ids.len());
        for (i, (t, h)) in ids.iter().zip(&hashes).enumerate() {
            assert_eq!(f.may_hold_hash(*h), f.may_hold(t), "{t}");
            if i % 2 == 0 {
                assert!(f.may_hold_hash(*h), "{t} was added");
            }
        }
        let absent = (0..2_000)
            .filter(|i| i % 2 == 1 && !f.may_hold(&id(*i)))
            .count();
        // About 0.2 % answer "maybe" (`BITS_PER_ID`); 2 % leaves room for a bad seed.
        assert!(absent >= 980, "{absent} of 1,000 absent ids answered no");
    }

    #[test]
    fn every_id_added_is_found_across_growth_and_few_others_are() {
        // Grown three times over the smallest capacity, half the ids hashed on "another
        // thread" with a clone of the hasher (as the scan at open does).
        let n = CAPACITY_MIN * 4;
        let mut f = DoneFilter::new(0);
        let hasher = f.hasher();
        // A third in slices by `insert_all` (as the checkpointer's evictions add them),
        // across the growths too.
        let sliced: Vec<TransferId> = (0..n).filter(|i| i % 3 == 2).map(id).collect();
        let mut slices = sliced.chunks(CAPACITY_MIN / 3 + 7);
        for i in 0..n {
            if i % 3 == 2 {
                if i % (3 * (CAPACITY_MIN / 3 + 7)) == 2 {
                    let slice: Vec<&TransferId> = slices.next().unwrap().iter().collect();
                    f.insert_all(&slice);
                }
            } else if i % 2 == 0 {
                f.insert(&id(i));
            } else {
                let key = format!("t-{i}");
                f.insert_hash(DoneFilter::hash_with(&hasher, key.as_bytes()));
            }
        }
        f.set_complete();
        assert!(f.blooms.len() >= 3, "{} filters", f.blooms.len());
        assert!((0..n).all(|i| f.may_hold(&id(i))), "no id added is missed");
        let tries = 200_000;
        let maybe = (n..n + tries).filter(|i| f.may_hold(&id(*i))).count();
        // About 0.1 % per filter at full load (16 bits per id); a few filters asked.
        assert!(
            maybe < tries * 4 / 1000,
            "{maybe} of {tries} absent ids answered maybe"
        );
    }
}
