//! [`IdMap`]: records by id, found by hash, iterated in id order.
//!
//! A shard looks records up by id several times per transfer (every step names one), and
//! lists them in id order only for scans (pages of accounts and transfers, audits, the
//! simulator's checks). A `BTreeMap` keyed by the id string pays a dozen or more string
//! comparisons per lookup (`docs/benchmarks.md#shard-indexes-by-hash`); here a lookup is
//! one hash, and the ordered set of ids is touched only when a record is added or removed.
//!
//! A map whose keys come and go all the time (a shard's transfers: one added per transfer,
//! removed once saved) keeps no ordered set (`ORDERED = false`): adding and removing a key
//! there costs more than it saves the scans, which are rare
//! (`docs/benchmarks.md#transfers-unordered`). Such a map sorts its keys when scanned (a
//! page of `limit` after a key takes the `limit` smallest first).
//!
//! Determinism: the hash map's order depends on its random seed, so it is never iterated
//! for its order; every iteration goes through ids in order, kept or sorted.
//!
//! The hash is [`FastState`] (xfer-core's: foldhash with random seeds, per process and
//! per map).

use std::collections::hash_map::Entry;
use std::collections::BTreeSet;
use std::hash::Hash;
use std::ops::Bound::{Excluded, Unbounded};
use xfer_core::{FastMap, FastState};

/// Values by key: hash lookups, iteration in key order. See the module docs.
///
/// Each value carries a mark: the value changed (was inserted or taken to change through
/// the `_marking` calls) since the last [`IdMap::next_mark`]. A shard tracks what a
/// checkpoint must write with it, in the lookup it makes anyway, where a set of changed
/// ids would cost a second hash probe and key comparison per step
/// (`docs/benchmarks.md#change-marks`).
///
/// A cut ([`IdMap::start_cut`]) is the set of values marked when it starts, as they are
/// then, collected a few at a time ([`IdMap::take_cut`]) while the map goes on changing: a
/// value of the cut written, replaced or removed before it is collected is first copied
/// aside as it was, and [`IdMap::end_cut`] hands those over. So a checkpoint holds its
/// shard's lock for the start and for each small slice, not for one lookup per changed
/// record at once. What the cut gets of a value, collected or copied aside before a write,
/// is its [`CutCopy`]; a value replaced or removed is moved aside as it was.
#[derive(Debug)]
pub(crate) struct IdMap<K, V, const ORDERED: bool = true> {
    by_id: FastMap<K, (V, u64)>,
    /// The keys in order (empty unless `ORDERED`).
    order: BTreeSet<K>,
    /// The current mark (never 0: values inserted unmarked carry 0). A u64 never wraps.
    mark: u64,
    /// The mark of the cut being collected, 0 if none (a value collected is marked 0).
    cut: u64,
    /// Values of the cut changed or removed before they were collected, as at the cut.
    kept: Vec<(K, V)>,
}

/// What a cut takes of a value (see [`IdMap`]): what the cut needs of it, made so that
/// the map's next write to the value is not slowed by the cut holding it.
pub(crate) trait CutCopy {
    /// The copy the cut takes.
    fn cut_copy(&self) -> Self;
}

impl<K, V, const ORDERED: bool> Default for IdMap<K, V, ORDERED> {
    fn default() -> Self {
        IdMap {
            by_id: FastMap::default(),
            order: BTreeSet::new(),
            mark: FIRST_MARK,
            cut: 0,
            kept: Vec::new(),
        }
    }
}

/// The mark a new map starts with (values inserted unmarked carry 0).
const FIRST_MARK: u64 = 1;

/// Whether a value carrying mark `m` is marked in a map whose current mark is `mark` and
/// whose cut being collected is `cut` (see [`IdMap::is_marked`]).
fn counts_as_marked(m: u64, mark: u64, cut: u64) -> bool {
    m == mark || (cut != 0 && m == cut)
}

impl<K: Ord + Hash + Clone, V: Clone + CutCopy, const ORDERED: bool> IdMap<K, V, ORDERED> {
    /// Builds the map from key-value pairs (bulk: the ordered set is built sorted, much
    /// faster than one insert at a time). A repeated key keeps its last value. Pairs in key
    /// order (a table scan) cost one comparison each to sort: the keys are taken in the
    /// order given, not in the hash map's.
    pub(crate) fn from_pairs(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let pairs: Vec<(K, V)> = pairs.into_iter().collect();
        let order = if ORDERED {
            pairs.iter().map(|(k, _)| k.clone()).collect()
        } else {
            BTreeSet::new()
        };
        let mut by_id = FastMap::with_capacity_and_hasher(pairs.len(), FastState::default());
        by_id.extend(pairs.into_iter().map(|(k, v)| (k, (v, 0))));
        IdMap {
            by_id,
            order,
            mark: FIRST_MARK,
            cut: 0,
            kept: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        self.by_id.get(k).map(|(v, _)| v)
    }

    /// The value of `k`, to change without marking it: for changes a checkpoint need not
    /// write (the embedded store keeps tombstones apart from their accounts, so dropping
    /// one leaves the account's written form as it was).
    pub(crate) fn get_mut_unmarked(&mut self, k: &K) -> Option<&mut V> {
        self.by_id.get_mut(k).map(|(v, _)| v)
    }

    /// The value of `k`, to change: marks it, and answers whether it was unmarked (its
    /// first change since the last [`IdMap::next_mark`]).
    pub(crate) fn get_mut_marking(&mut self, k: &K) -> Option<(&mut V, bool)> {
        let (mark, cut) = (self.mark, self.cut);
        let kept = &mut self.kept;
        self.by_id.get_mut(k).map(|(v, m)| {
            if cut != 0 && *m == cut {
                kept.push((k.clone(), v.cut_copy()));
            }
            let first = *m != mark;
            *m = mark;
            (v, first)
        })
    }

    /// Whether `k` changed since the last [`IdMap::next_mark`] or is in the cut being
    /// collected and not collected yet.
    pub(crate) fn is_marked(&self, k: &K) -> bool {
        self.by_id
            .get(k)
            .is_some_and(|(_, m)| counts_as_marked(*m, self.mark, self.cut))
    }

    /// Starts a new mark: every value is unmarked.
    pub(crate) fn next_mark(&mut self) {
        debug_assert_eq!(self.cut, 0, "no cut is being collected");
        self.mark += 1;
    }

    /// Starts a cut of every value marked now, and a new mark (see the type's docs).
    pub(crate) fn start_cut(&mut self) {
        debug_assert_eq!(self.cut, 0, "one cut at a time");
        self.cut = self.mark;
        self.kept.clear();
        self.mark += 1;
    }

    /// The value of `k` as it was when the cut started, if it is in the cut, still here
    /// and not changed since (then it leaves the cut: a second call answers `None`).
    /// `None` otherwise: [`IdMap::end_cut`] has it if it was changed or removed since.
    pub(crate) fn take_cut(&mut self, k: &K) -> Option<V> {
        let cut = self.cut;
        match self.by_id.get_mut(k) {
            Some((v, m)) if cut != 0 && *m == cut => {
                *m = 0;
                Some(v.cut_copy())
            }
            _ => None,
        }
    }

    /// Ends the cut: the values of it changed or removed before they were collected, as
    /// they were when it started (each once).
    pub(crate) fn end_cut(&mut self) -> Vec<(K, V)> {
        self.cut = 0;
        std::mem::take(&mut self.kept)
    }

    pub(crate) fn contains_key(&self, k: &K) -> bool {
        self.by_id.contains_key(k)
    }

    /// Inserts or replaces, unmarked (a value restored, not a change; a value replaced that
    /// was marked stays marked); answers the value replaced.
    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.insert_with(k, v, 0)
    }

    /// Inserts or replaces, marked (a change); answers the value replaced.
    pub(crate) fn insert_marking(&mut self, k: K, v: V) -> Option<V> {
        self.insert_with(k, v, self.mark)
    }

    fn insert_with(&mut self, k: K, v: V, mark: u64) -> Option<V> {
        match self.by_id.entry(k) {
            Entry::Occupied(mut e) => {
                let old = e.get().1;
                let in_cut = self.cut != 0 && old == self.cut;
                if in_cut {
                    self.kept.push((e.key().clone(), e.get().0.clone()));
                }
                // Marks only grow: a value marked now stays marked (one of the cut is
                // marked now, its value at the cut kept aside).
                let marked = if in_cut { self.mark } else { mark.max(old) };
                Some(e.insert((v, marked)).0)
            }
            Entry::Vacant(e) => {
                if ORDERED {
                    self.order.insert(e.key().clone());
                }
                e.insert((v, mark));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let (v, m) = self.by_id.remove(k)?;
        self.removed(k, &v, m);
        Some(v)
    }

    /// Removes `k` if `remove(value, marked)` says so, `marked` as [`IdMap::is_marked`]
    /// answers it: one lookup where asking, then removing, takes three.
    pub(crate) fn remove_if(&mut self, k: &K, remove: impl FnOnce(&V, bool) -> bool) -> Option<V> {
        let (mark, cut) = (self.mark, self.cut);
        let Entry::Occupied(e) = self.by_id.entry(k.clone()) else {
            return None;
        };
        let (v, m) = e.get();
        if !remove(v, counts_as_marked(*m, mark, cut)) {
            return None;
        }
        let (v, m) = e.remove();
        self.removed(k, &v, m);
        Some(v)
    }

    /// What removing `k` (its value `v`, carrying mark `m`) leaves to do: a value of the
    /// cut not yet collected is kept aside as it was, and the key leaves the ordered set.
    fn removed(&mut self, k: &K, v: &V, m: u64) {
        if self.cut != 0 && m == self.cut {
            self.kept.push((k.clone(), v.clone()));
        }
        if ORDERED {
            let was_ordered = self.order.remove(k);
            debug_assert!(was_ordered, "every key is in the ordered set");
        }
    }

    /// Every value, in key order.
    pub(crate) fn values(&self) -> Box<dyn Iterator<Item = &V> + '_> {
        self.values_after(None, usize::MAX)
    }

    /// At most `limit` values in key order, strictly after `after` (from the first if
    /// `None`).
    pub(crate) fn values_after(
        &self,
        after: Option<&K>,
        limit: usize,
    ) -> Box<dyn Iterator<Item = &V> + '_> {
        if ORDERED {
            let from = after.map_or(Unbounded, Excluded);
            return Box::new(
                self.order
                    .range::<K, _>((from, Unbounded))
                    .take(limit)
                    .map(|k| &self.by_id[k].0),
            );
        }
        let mut keys: Vec<&K> = self
            .by_id
            .keys()
            .filter(|k| after.is_none_or(|a| *k > a))
            .collect();
        if keys.len() > limit {
            // The `limit` smallest, without sorting the rest.
            keys.select_nth_unstable(limit);
            keys.truncate(limit);
        }
        keys.sort_unstable();
        Box::new(keys.into_iter().map(|k| &self.by_id[k].0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use xfer_core::Rng;

    impl CutCopy for u64 {
        fn cut_copy(&self) -> u64 {
            *self
        }
    }

    /// Random inserts, replacements and removals: the map answers what a `BTreeMap` answers,
    /// lookups and ordered scans alike, with and without the ordered set of keys.
    #[test]
    fn behaves_as_an_ordered_map() {
        behaves_as_an_ordered_map_when::<true>();
        behaves_as_an_ordered_map_when::<false>();
    }

    fn behaves_as_an_ordered_map_when<const ORDERED: bool>() {
        let mut rng = Rng::new(7);
        let mut ours: IdMap<String, u64, ORDERED> = IdMap::default();
        let mut reference: BTreeMap<String, u64> = BTreeMap::new();
        for step in 0..5_000u64 {
            let key = format!("k{}", rng.below(300));
            match rng.below(4) {
                0 | 1 => assert_eq!(ours.insert(key.clone(), step), reference.insert(key, step)),
                2 => assert_eq!(ours.remove(&key), reference.remove(&key)),
                _ => {
                    let even = reference.get(&key).copied().filter(|v| v % 2 == 0);
                    if even.is_some() {
                        reference.remove(&key);
                    }
                    assert_eq!(ours.remove_if(&key, |v, _| v % 2 == 0), even);
                }
            }
            let probe = format!("k{}", rng.below(300));
            assert_eq!(ours.get(&probe), reference.get(&probe));
            assert_eq!(ours.contains_key(&probe), reference.contains_key(&probe));
            if step % 97 == 0 {
                assert!(ours.values().eq(reference.values()));
                for limit in [0, 1, 7, usize::MAX] {
                    let after: Vec<_> = ours.values_after(Some(&probe), limit).collect();
                    let want: Vec<_> = reference
                        .range::<String, _>((Excluded(&probe), Unbounded))
                        .take(limit)
                        .map(|(_, v)| v)
                        .collect();
                    assert_eq!(after, want, "after {probe}, at most {limit}");
                }
            }
        }
        let rebuilt: IdMap<String, u64, ORDERED> = IdMap::from_pairs(reference.clone());
        assert!(rebuilt.values().eq(reference.values()));
        assert_eq!(rebuilt.is_empty(), reference.is_empty());
        // Out of order, with a key repeated (the last value wins): the same map.
        let mut shuffled: Vec<(String, u64)> = reference.clone().into_iter().rev().collect();
        let (k, v) = shuffled[0].clone();
        shuffled.insert(0, (k, v + 1));
        let rebuilt: IdMap<String, u64, ORDERED> = IdMap::from_pairs(shuffled);
        assert!(rebuilt.values().eq(reference.values()));
        assert!(rebuilt.order.iter().all(|k| rebuilt.by_id.contains_key(k)));
        let ordered = if ORDERED { rebuilt.by_id.len() } else { 0 };
        assert_eq!(rebuilt.order.len(), ordered);
    }

    #[test]
    fn marks_name_what_changed_since_the_last_next_mark() {
        let mut m: IdMap<String, u64> = IdMap::from_pairs([("a".to_string(), 1)]);
        m.insert("b".to_string(), 2);
        assert!(
            !m.is_marked(&"a".into()) && !m.is_marked(&"b".into()),
            "restored: unmarked"
        );
        let (v, first) = m.get_mut_marking(&"a".into()).expect("present");
        *v += 10;
        assert!(first);
        assert!(
            !m.get_mut_marking(&"a".into()).expect("present").1,
            "the second change"
        );
        assert!(m.is_marked(&"a".into()));
        // Replacing a marked value unmarked (a restore) keeps it marked.
        m.insert("a".to_string(), 5);
        assert!(m.is_marked(&"a".into()));
        m.insert_marking("c".to_string(), 3);
        assert!(m.is_marked(&"c".into()));
        m.next_mark();
        for k in ["a", "b", "c"] {
            assert!(!m.is_marked(&k.into()), "{k}: a new mark");
        }
        assert!(m.get_mut_marking(&"b".into()).expect("present").1);
        // Removed, then inserted marked again: marked, and listed once in order.
        m.remove(&"c".into());
        assert!(!m.is_marked(&"c".into()));
        m.insert_marking("c".to_string(), 4);
        assert!(m.is_marked(&"c".into()));
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![5, 2, 4]);
        assert_eq!(m.order.len(), m.by_id.len());
        // `remove_if` is told whether the value is marked, as `is_marked` answers.
        let mut told = Vec::new();
        for k in ["a", "b", "c"] {
            assert_eq!(
                m.remove_if(&k.into(), |_, marked| {
                    told.push(marked);
                    false
                }),
                None
            );
        }
        assert_eq!(told, [false, true, true]);
        assert_eq!(m.remove_if(&"b".into(), |_, marked| marked), Some(2));
        assert!(!m.contains_key(&"b".into()) && m.order.len() == m.by_id.len());
        assert_eq!(m.remove_if(&"z".into(), |_, _| true), None, "absent");
    }

    /// A cut collected a little at a time while the map changes: every value marked when it
    /// started comes out once, as it was then (from `take_cut` or from `end_cut`), and
    /// nothing else does, whatever happens to the keys in between.
    #[test]
    fn a_cut_is_the_marked_values_as_they_were_when_it_started() {
        let mut rng = Rng::new(11);
        for _ in 0..300 {
            let mut m: IdMap<String, u64> = IdMap::default();
            let key = |rng: &mut Rng| format!("k{}", rng.below(30));
            for step in 0..60u64 {
                let k = key(&mut rng);
                match rng.below(4) {
                    0 => drop(m.insert(k, step)),
                    1 => drop(m.insert_marking(k, step)),
                    2 => drop(m.get_mut_marking(&k).map(|(v, _)| *v += 1)),
                    _ => drop(m.remove(&k)),
                }
            }
            let at_cut: BTreeMap<String, u64> = (0..30)
                .map(|i| format!("k{i}"))
                .filter(|k| m.is_marked(k))
                .map(|k| {
                    let v = *m.get(&k).expect("marked: present");
                    (k, v)
                })
                .collect();
            m.start_cut();
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            let mut to_take: Vec<String> = at_cut.keys().cloned().collect();
            let mut step = 1_000u64;
            while !to_take.is_empty() {
                step += 1;
                let k = key(&mut rng);
                match rng.below(7) {
                    0 | 1 => {
                        let k = to_take.swap_remove(rng.below(to_take.len() as u64) as usize);
                        if let Some(v) = m.take_cut(&k) {
                            assert!(got.insert(k.clone(), v).is_none(), "{k} once");
                            assert_eq!(m.take_cut(&k), None, "{k}: taken already");
                        }
                    }
                    2 => drop(m.get_mut_marking(&k).map(|(v, _)| *v += 1)),
                    3 => drop(m.insert_marking(k, step)),
                    4 => drop(m.insert(k, step)),
                    5 => drop(m.remove(&k)),
                    _ => drop(m.remove_if(&k, |_, _| true)),
                }
            }
            for (k, v) in m.end_cut() {
                assert!(got.insert(k.clone(), v).is_none(), "{k} once");
            }
            assert_eq!(got, at_cut);
            // After the cut: marks as ever (the next cut takes what changed since it began).
            assert!((0..30)
                .map(|i| format!("k{i}"))
                .filter(|k| m.is_marked(k))
                .all(|k| m.by_id[&k].1 == m.mark));
        }
    }
}
