//! [`ShardLock`]: a shard's lock, unlocked fairly, with std's poisoning kept.

use crate::shard_state::ShardState;
use std::sync::atomic::{AtomicBool, Ordering};

/// A shard's lock. parking_lot's, whose fair unlock hands the lock straight to a waiting
/// call: the checkpointer takes each shard's lock once per slice, and with std's lock it
/// retook it before the call it had woken could run, slice after slice, so that call waited
/// for the whole loop (the latency's tail, `docs/benchmarks.md`).
/// std's poisoning is kept by hand: a panic while applying leaves a record half-written,
/// so every later call refuses to go on.
pub(crate) struct ShardLock {
    state: parking_lot::Mutex<ShardState>,
    poisoned: AtomicBool,
}

/// A held [`ShardLock`].
pub(crate) struct ShardGuard<'a> {
    // Declared first, so dropped first: the shard is marked before it is unlocked.
    _poison: PoisonOnPanic<'a>,
    guard: parking_lot::MutexGuard<'a, ShardState>,
}

/// Marks its shard poisoned if dropped while the thread panics.
struct PoisonOnPanic<'a>(&'a AtomicBool);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

impl ShardLock {
    pub(crate) fn new(state: ShardState) -> ShardLock {
        ShardLock {
            state: parking_lot::Mutex::new(state),
            poisoned: AtomicBool::new(false),
        }
    }

    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        self.held(self.state.lock())
    }

    /// The lock if no one holds it, without waiting.
    pub(crate) fn try_lock(&self) -> Option<ShardGuard<'_>> {
        self.state.try_lock().map(|guard| self.held(guard))
    }

    fn held<'a>(&'a self, guard: parking_lot::MutexGuard<'a, ShardState>) -> ShardGuard<'a> {
        // A panic while applying leaves a record half-written: refuse to go on.
        assert!(
            !self.poisoned.load(Ordering::SeqCst),
            "shard poisoned by a panic"
        );
        ShardGuard {
            _poison: PoisonOnPanic(&self.poisoned),
            guard,
        }
    }
}

impl ShardGuard<'_> {
    /// Unlocks, handing the lock to the call waiting for it, if any (see [`ShardLock`]).
    pub(crate) fn unlock_fair(self) {
        parking_lot::MutexGuard::unlock_fair(self.guard);
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ShardState;
    fn deref(&self) -> &ShardState {
        &self.guard
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::done_filter::DoneFilter;
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;
    use xfer_store::MemoryShard;

    fn shard_lock() -> Arc<ShardLock> {
        Arc::new(ShardLock::new(ShardState {
            mem: MemoryShard::new(),
            fetched: Vec::new(),
            done: DoneFilter::new(0),
        }))
    }

    #[test]
    fn a_panic_while_a_shard_is_held_poisons_it_for_every_later_call() {
        let lock = shard_lock();
        let held = Arc::clone(&lock);
        let first = std::thread::spawn(move || {
            let _shard = held.lock();
            panic!("half-written");
        })
        .join();
        assert!(first.is_err());
        let again = Arc::clone(&lock);
        let later = std::thread::spawn(move || drop(again.lock())).join();
        let why = later.expect_err("a later call must refuse to go on");
        assert_eq!(
            why.downcast_ref::<&str>(),
            Some(&"shard poisoned by a panic")
        );
    }

    /// The checkpointer's slice loop: unlock, then take the lock again at once. A call that
    /// was waiting must get the shard in between. With std's `Mutex` the loop took it back
    /// first, slice after slice, never letting the call in first.
    #[test]
    fn a_fair_unlock_hands_the_shard_to_the_call_waiting_for_it() {
        let lock = shard_lock();
        let order = Arc::new(Mutex::new(Vec::new()));
        let guard = lock.lock();
        let (waiting, waits) = mpsc::channel();
        let call = {
            let (lock, order) = (Arc::clone(&lock), Arc::clone(&order));
            std::thread::spawn(move || {
                waiting.send(()).unwrap();
                let _shard = lock.lock();
                order.lock().unwrap().push("call");
            })
        };
        waits.recv().unwrap();
        // Long enough for the call to be parked on the lock.
        std::thread::sleep(Duration::from_millis(100));
        guard.unlock_fair();
        let _slice = lock.lock();
        order.lock().unwrap().push("next slice");
        drop(_slice);
        call.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["call", "next slice"]);
    }
}
