//! [`Intents`]: an account's intents by transfer id, found by hash, listed in id order.
//!
//! Every step on an account looks one intent up (prepare, post, release, prune), and an
//! account holds one intent per transfer in flight plus a tombstone per transfer until its
//! horizon: dozens on an ordinary account, tens of thousands on a hot one. In a B-tree
//! keyed by the id a lookup compared a dozen ids, each behind a pointer to follow (11 % of
//! `xfer bench`'s CPU, see `docs/benchmarks.md`); here it is one hash and, usually, one
//! comparison, of bytes held in the ids themselves when they are short (`id.rs`).
//!
//! Listing (`iter`, `keys`, `values`, `Debug`) is in id order, as before: it sorts,
//! O(n log n), so the hot paths never list. [`Intents::unordered`] skips the sort for folds
//! where order cannot matter, and so does the encoding: a map (postcard: the count, then
//! the pairs) in no particular order, since decoding builds the map again whatever the
//! order (sorting every account a checkpoint writes was 3 % of `xfer bench`'s CPU).

use crate::account::Intent;
use crate::hash::FastMap;
use crate::id::TransferId;
use std::collections::hash_map::Entry;
use std::fmt;

/// An account's intents by transfer id. See the module docs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Intents(FastMap<TransferId, Intent>);

impl Intents {
    /// No intents.
    pub fn new() -> Intents {
        Intents::default()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The intent of `transfer`.
    #[inline]
    pub fn get(&self, transfer: &TransferId) -> Option<&Intent> {
        self.0.get(transfer)
    }

    /// The intent of `transfer`, to change.
    #[inline]
    pub fn get_mut(&mut self, transfer: &TransferId) -> Option<&mut Intent> {
        self.0.get_mut(transfer)
    }

    /// Sets the intent of `transfer`, answering the one it replaces.
    pub fn insert(&mut self, transfer: TransferId, intent: Intent) -> Option<Intent> {
        self.0.insert(transfer, intent)
    }

    /// The slot of `transfer`, to read and then fill or empty with one lookup.
    #[inline]
    pub fn entry(&mut self, transfer: TransferId) -> Entry<'_, TransferId, Intent> {
        self.0.entry(transfer)
    }

    /// Every intent, in transfer id order (sorts).
    pub fn iter(&self) -> std::vec::IntoIter<(&TransferId, &Intent)> {
        let mut all: Vec<(&TransferId, &Intent)> = self.0.iter().collect();
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
        self.0.iter()
    }
}

impl std::ops::Index<&TransferId> for Intents {
    type Output = Intent;

    fn index(&self, transfer: &TransferId) -> &Intent {
        match self.0.get(transfer) {
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
        Intents(pairs.into_iter().collect())
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
                let mut out = FastMap::with_capacity_and_hasher(
                    m.size_hint().unwrap_or(0).min(4096),
                    Default::default(),
                );
                while let Some((t, i)) = m.next_entry::<TransferId, Intent>()? {
                    match out.entry(t) {
                        Entry::Occupied(e) => {
                            return Err(serde::de::Error::custom(format!(
                                "transfer {} has two intents",
                                e.key()
                            )));
                        }
                        Entry::Vacant(e) => {
                            e.insert(i);
                        }
                    }
                }
                Ok(Intents(out))
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
