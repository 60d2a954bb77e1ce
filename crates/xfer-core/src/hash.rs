//! The hasher of every map keyed by ids: foldhash, seeded at random per process and per
//! map. SipHash, std's default, was 1–2 % of `xfer bench`'s CPU; an unkeyed hash (Fx)
//! would let clients, who choose the ids, choose collisions.
//!
//! Determinism: a map's order depends on its seed, so no map of this kind is iterated
//! where the order can show (the simulator replays a seed exactly): callers iterate in id
//! order, or only fold in ways order cannot change (counts, sums).

use std::collections::{HashMap, HashSet};

/// foldhash, seeded at random per process and per map (module docs).
pub type FastState = foldhash::fast::RandomState;

/// A hash map with [`FastState`].
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A hash set with [`FastState`].
pub type FastSet<K> = HashSet<K, FastState>;
