//! The hasher of every map keyed by ids: foldhash, seeded at random per process and per
//! map. It is much cheaper than SipHash, std's default, on short ids
//! (`docs/benchmarks.md#foldhash`), and seeded because an unkeyed hash (Fx) would let
//! clients, who choose the ids, choose collisions.
//!
//! Determinism: a map's order depends on its seed, so no map of this kind is iterated
//! where the order can show (the simulator replays a seed exactly): callers iterate in id
//! order, fold in ways order cannot change (counts, sums), or encode for a reader that
//! ignores the order (an account's intents in the checkpoint tables).
//!
//! Flooding: foldhash claims only minimal resistance to chosen collisions. A client who
//! could find ids colliding under an unknown per-map seed would slow one account's or one
//! shard's lookups, never change a result.

use std::collections::{HashMap, HashSet};

/// foldhash, seeded at random per process and per map (module docs).
pub type FastState = foldhash::fast::RandomState;

/// A hash map with [`FastState`].
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A hash set with [`FastState`].
pub type FastSet<K> = HashSet<K, FastState>;
