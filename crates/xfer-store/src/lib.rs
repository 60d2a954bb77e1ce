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
pub mod wake_index;

pub use coalesce::Coalesce;
pub use faulty::{FaultPlan, Faulty};
pub use id_map::{FastMap, FastSet, FastState};
pub use intercept::{ExecuteHook, Intercept, PendingHook};
pub use memory::{
    transfer_lines, Changes, Cut, HistoryEntry, MemoryShard, MemoryStore, Room, RoomSizes,
};
pub use op::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
pub use prune_index::{prune_at, sort_bucket, PruneIndex, PRUNE_BUCKET_MS};
pub use store::{answered_durable, BoxFuture, HistoryPage, LogDomain, Store, StoreError};

/// Appends what `make` builds to `list` (a `Vec`, a `VecDeque`), building it once `list`
/// has room for it.
///
/// `v.push(make())` builds the value first and keeps it across `push`'s call to grow the
/// list, so the compiler writes it to the stack and reads it back, at times in other
/// pieces than it wrote, which the CPU cannot forward from its store buffer: the read
/// waits until every older store has reached the cache, in a shard's step behind the
/// stores to records that missed it (`docs/benchmarks.md`). Built here, the value goes
/// straight into the list's room (`extend` of one item reserves before it asks for it).
#[inline(always)]
pub fn push_made<T>(list: &mut impl Extend<T>, make: impl FnOnce() -> T) {
    list.extend(std::iter::once_with(make));
}

/// The room to give a list that starts over each checkpoint (or bucket) and last held
/// `last` entries: that many and a quarter more. With exactly as many, a list that held
/// a few more than the last one was copied whole into one twice its size (`Vec` growth:
/// 3 % of `xfer bench`'s samples, with the page faults of the larger block).
pub fn room_for(last: usize) -> usize {
    last.saturating_add(last / 4)
}

/// The room to give the list that takes over from `last`: [`room_for`] its length, and
/// never less than its capacity, so that a list that had to grow once (the time between
/// two checkpoints varies: a checkpoint that waits for a flush of fjall's memtables lets
/// twice as many entries come before the next) starts that large from then on. Room a
/// list does not fill costs address space, not memory: pages are not touched.
pub fn room_like<T>(last: &Vec<T>) -> usize {
    room_for(last.len()).max(last.capacity())
}

#[cfg(test)]
mod tests {
    use super::{push_made, room_for, room_like};

    #[test]
    fn a_made_value_is_appended_once_and_grows_a_full_list() {
        let mut v: Vec<String> = Vec::new();
        for n in 0..100 {
            push_made(&mut v, || n.to_string());
        }
        assert_eq!(v.len(), 100);
        assert_eq!(v[0], "0");
        assert_eq!(v[99], "99");
    }

    #[test]
    fn a_new_list_has_a_quarter_more_room_and_never_less_than_the_last_had() {
        assert_eq!(room_for(0), 0);
        assert_eq!(room_for(8), 10);
        assert_eq!(room_for(usize::MAX), usize::MAX, "saturates");
        let mut grown: Vec<u8> = Vec::with_capacity(100);
        grown.extend([1, 2, 3]);
        assert_eq!(room_like(&grown), 100, "the capacity it had");
        let full: Vec<u8> = (0..=255).collect();
        assert!(room_like(&full) >= 320, "a quarter more than its length");
    }
}
