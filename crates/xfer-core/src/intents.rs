//! [`Intents`]: an account's intents by transfer id, found by hash, listed in id order.
//!
//! Every step on an account looks one intent up (prepare, post, release, prune), and an
//! account holds one intent per transfer in flight plus a tombstone per transfer until its
//! horizon: dozens on an ordinary account, tens of thousands on a hot one. So a lookup is
//! one hash and, usually, one comparison, of bytes held in the ids themselves when they are
//! short (`id.rs`), not a dozen ids each behind a pointer to follow, as in a B-tree
//! (`docs/benchmarks.md#intents-by-hash`).
//!
//! The map also counts its open intents (every change goes through the methods here, which
//! keep the count), since nearly all of an account's intents are tombstones: what
//! concerns only open intents — an account written without its tombstones (every
//! checkpoint writes every account it changed), the count of transfers in flight — skips
//! the walk over the tombstones when none is open, which is most accounts most of the
//! time (`docs/benchmarks.md#open-intents-counted`). Open intents and tombstones in two
//! maps instead would cost more than they save: a second map to search on every prepare,
//! and an insert into the other map on every post.
//!
//! Listing (`iter`, `keys`, `values`, `Debug`) is in id order: it sorts, O(n log n), so the
//! hot paths never list. [`Intents::unordered`] skips the sort for folds where order cannot
//! matter, and so does the encoding, so that a checkpoint sorts none of the accounts it
//! writes: a map (postcard: the count, then the pairs) in no particular order, since
//! decoding builds the map again whatever the order (`docs/benchmarks.md#change-marks`).

use crate::account::{Intent, IntentState};
use crate::hash::FastMap;
use crate::id::TransferId;
use std::collections::hash_map::Entry;
use std::fmt;

/// An account's intents by transfer id. See the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Intents {
    map: FastMap<TransferId, Intent>,
    /// How many of them are open.
    open: usize,
}

impl Intents {
    /// No intents.
    pub fn new() -> Intents {
        Intents::default()
    }

    /// How many, open and tombstones.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// How many are open.
    pub fn open_len(&self) -> usize {
        self.open
    }

    /// The intent of `transfer`, open or a tombstone.
    #[inline]
    pub fn get(&self, transfer: &TransferId) -> Option<&Intent> {
        self.map.get(transfer)
    }

    /// Sets the intent of `transfer`, answering the one it replaces.
    pub fn insert(&mut self, transfer: TransferId, intent: Intent) -> Option<Intent> {
        let replaced = self.map.insert(transfer, intent);
        self.open += usize::from(intent.state == IntentState::Open);
        self.open -= usize::from(replaced.is_some_and(|r| r.state == IntentState::Open));
        replaced
    }

    /// Ends the open intent of `transfer` as the tombstone `state` (posted or released):
    /// answers the tombstone, or `None` if no intent of `transfer` is open (nothing
    /// changes then).
    pub fn close(&mut self, transfer: &TransferId, state: IntentState) -> Option<Intent> {
        debug_assert_ne!(state, IntentState::Open, "a tombstone's state");
        let intent = self
            .map
            .get_mut(transfer)
            .filter(|i| i.state == IntentState::Open)?;
        intent.state = state;
        self.open -= 1;
        Some(*intent)
    }

    /// Drops the tombstone of `transfer` if its horizon is at or before `now`; answers
    /// whether it did. An open intent is never dropped.
    pub fn drop_due_tombstone(&mut self, transfer: &TransferId, now: crate::Timestamp) -> bool {
        match self.map.entry(transfer.clone()) {
            Entry::Occupied(i) if i.get().state != IntentState::Open && i.get().horizon <= now => {
                i.remove();
                true
            }
            _ => false,
        }
    }

    /// Every intent, in transfer id order (sorts).
    pub fn iter(&self) -> std::vec::IntoIter<(&TransferId, &Intent)> {
        let mut all: Vec<(&TransferId, &Intent)> = self.unordered().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }

    /// The transfer ids, in order (sorts).
    pub fn keys(&self) -> impl Iterator<Item = &TransferId> {
        self.iter().map(|(t, _)| t)
    }

    /// The intents, in transfer id order (sorts).
    pub fn values(&self) -> impl Iterator<Item = &Intent> {
        self.iter().map(|(_, i)| i)
    }

    /// Every intent in no particular order, which differs from process to process and map
    /// to map: only for folds whose result cannot depend on it (counts, sums, maxima).
    pub fn unordered(&self) -> impl Iterator<Item = (&TransferId, &Intent)> {
        self.map.iter()
    }

    /// The open intents in no particular order (see [`Intents::unordered`]); [`open_len`]
    /// of them. The walk over the tombstones stops once they are all found, and does not
    /// start when none is open.
    ///
    /// [`open_len`]: Intents::open_len
    pub fn open_unordered(&self) -> impl Iterator<Item = (&TransferId, &Intent)> {
        self.map
            .iter()
            .filter(|(_, i)| i.state == IntentState::Open)
            .take(self.open)
    }

    /// A map of the open intents alone (a copy; the tombstones left out). Costs nothing
    /// beyond an empty map when none is open (see [`Intents::open_unordered`]).
    pub fn open_only(&self) -> Intents {
        let mut map = FastMap::with_capacity_and_hasher(self.open, Default::default());
        map.extend(self.open_unordered().map(|(t, i)| (t.clone(), *i)));
        Intents {
            map,
            open: self.open,
        }
    }
}

impl std::ops::Index<&TransferId> for Intents {
    type Output = Intent;

    fn index(&self, transfer: &TransferId) -> &Intent {
        match self.get(transfer) {
            Some(i) => i,
            None => panic!("no intent of transfer {transfer}"),
        }
    }
}

impl<'a> IntoIterator for &'a Intents {
    type Item = (&'a TransferId, &'a Intent);
    type IntoIter = std::vec::IntoIter<(&'a TransferId, &'a Intent)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl FromIterator<(TransferId, Intent)> for Intents {
    /// A repeated transfer keeps its last intent.
    fn from_iter<I: IntoIterator<Item = (TransferId, Intent)>>(pairs: I) -> Intents {
        let mut out = Intents::new();
        for (t, i) in pairs {
            out.insert(t, i);
        }
        out
    }
}

impl fmt::Debug for Intents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl serde::Serialize for Intents {
    /// A map, in no particular order (module docs): the encoding a `BTreeMap` had, but for
    /// the order of the pairs.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.unordered())
    }
}

impl<'de> serde::Deserialize<'de> for Intents {
    /// A map; a transfer named twice is an error (a record holds one intent per transfer).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Intents, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Intents;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of transfer ids to intents")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Intents, M::Error> {
                let mut out = Intents::new();
                while let Some((t, i)) = m.next_entry::<TransferId, Intent>()? {
                    if out.get(&t).is_some() {
                        return Err(serde::de::Error::custom(format!(
                            "transfer {t} has two intents"
                        )));
                    }
                    out.insert(t, i);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::IntentState;
    use crate::time::Timestamp;

    fn intent(n: u64) -> Intent {
        Intent {
            debit: n,
            credit: 0,
            state: IntentState::Open,
            horizon: Timestamp(n),
        }
    }

    fn tid(s: &str) -> TransferId {
        TransferId::new(s).expect("valid")
    }

    #[test]
    fn open_only_copies_the_open_intents_and_no_tombstone() {
        let mut intents = Intents::new();
        for n in 0..300u64 {
            intents.insert(tid(&format!("t{n}")), intent(n));
        }
        for n in (0..300u64).filter(|n| n % 3 != 0) {
            let state = if n % 2 == 0 {
                IntentState::Posted
            } else {
                IntentState::Released
            };
            intents.close(&tid(&format!("t{n}")), state);
        }
        let open = intents.open_only();
        assert_eq!((open.len(), open.open_len()), (100, 100));
        let want: Vec<_> = intents
            .iter()
            .filter(|(_, i)| i.state == IntentState::Open)
            .map(|(t, i)| (t.clone(), *i))
            .collect();
        let got: Vec<_> = open.iter().map(|(t, i)| (t.clone(), *i)).collect();
        assert_eq!(got, want);
        let none = Intents::new().open_only();
        assert!(none.is_empty() && none.open_len() == 0);
    }

    #[test]
    fn listed_in_id_order_and_encoded_as_a_map() {
        let ids = ["m", "b3-10", "b3-9", "a", "zz", "b3-100", "B", "b3-1"];
        let mut intents = Intents::new();
        let mut tree = std::collections::BTreeMap::new();
        for (n, id) in ids.iter().enumerate() {
            intents.insert(tid(id), intent(n as u64));
            tree.insert(tid(id), intent(n as u64));
        }
        let listed: Vec<_> = intents.iter().map(|(t, i)| (t.clone(), *i)).collect();
        let want: Vec<_> = tree.iter().map(|(t, i)| (t.clone(), *i)).collect();
        assert_eq!(listed, want);
        assert_eq!(format!("{intents:?}"), format!("{tree:?}"));
        // Encoded as a map: what a BTreeMap's encoding decodes to, in whichever order.
        let json = serde_json::to_string(&intents).expect("encodes");
        let as_tree: std::collections::BTreeMap<TransferId, Intent> =
            serde_json::from_str(&json).expect("decodes as a map");
        assert_eq!(as_tree, tree);
        let back: Intents = serde_json::from_str(&json).expect("decodes");
        assert_eq!(back, intents);
        assert_eq!(back[&tid("b3-9")], intent(2));
        let from_tree: Intents =
            serde_json::from_str(&serde_json::to_string(&tree).expect("encodes")).expect("decodes");
        assert_eq!(from_tree, intents);
    }

    /// Every way an intent enters, changes or leaves keeps the count of open intents, and
    /// the open ones listed are exactly those whose state is open (a count that drifted
    /// would leave open intents out of a checkpoint).
    #[test]
    fn the_open_count_follows_every_change() {
        let mark = |state, horizon| Intent {
            debit: 0,
            credit: 0,
            state,
            horizon: Timestamp(horizon),
        };
        let check = |is: &Intents| {
            let open: Vec<_> = is.open_unordered().map(|(t, _)| t.clone()).collect();
            let mut want: Vec<_> = is
                .iter()
                .filter(|(_, i)| i.state == IntentState::Open)
                .map(|(t, _)| t.clone())
                .collect();
            let mut open_sorted = open.clone();
            open_sorted.sort();
            want.sort();
            assert_eq!(open_sorted, want, "{is:?}");
            assert_eq!(is.open_len(), open.len());
        };
        let mut is = Intents::new();
        is.insert(tid("a"), intent(1));
        is.insert(tid("b"), intent(2));
        is.insert(tid("m"), mark(IntentState::Released, 3));
        check(&is);
        // Posting moves the intent to the tombstones, keeping its amounts.
        let posted = is.close(&tid("a"), IntentState::Posted).expect("open");
        assert_eq!((posted.debit, posted.state), (1, IntentState::Posted));
        assert_eq!(is[&tid("a")], posted);
        assert_eq!(is.close(&tid("a"), IntentState::Released), None, "not open");
        assert_eq!(is.close(&tid("zz"), IntentState::Posted), None, "absent");
        check(&is);
        // An insert over a tombstone (or an open intent) replaces it, whichever map.
        assert_eq!(
            is.insert(tid("m"), intent(4)).map(|i| i.state),
            Some(IntentState::Released)
        );
        assert_eq!(
            is.insert(tid("b"), mark(IntentState::Released, 5)),
            Some(intent(2))
        );
        check(&is);
        assert_eq!(is.len(), 3);
        // Only a tombstone past its horizon is dropped.
        assert!(!is.drop_due_tombstone(&tid("m"), Timestamp(100)), "open");
        assert!(
            !is.drop_due_tombstone(&tid("b"), Timestamp(4)),
            "before its horizon"
        );
        assert!(is.drop_due_tombstone(&tid("b"), Timestamp(5)));
        assert!(is.get(&tid("b")).is_none());
        check(&is);
        // Decoding sorts them out again.
        let back: Intents =
            serde_json::from_str(&serde_json::to_string(&is).expect("encodes")).expect("decodes");
        assert_eq!(back, is);
        check(&back);
    }

    #[test]
    fn a_transfer_named_twice_does_not_decode() {
        let err = serde_json::from_str::<Intents>(
            r#"{"t1":{"debit":1,"credit":0,"state":"open","horizon":5},
                "t1":{"debit":2,"credit":0,"state":"open","horizon":5}}"#,
        )
        .expect_err("two intents of t1");
        assert!(
            err.to_string().contains("transfer t1 has two intents"),
            "{err}"
        );
    }
}
