//! [`DoneTable`]: the `done` table, finished transfers by shard and id. A checkpoint
//! ingests its finished transfers, sorted, as tables of their own (fjall's ingestion: no
//! journal, no memtable inserts; synced); a transfer is read back only when asked for.

use crate::codec::{self, decode_record, record_key};
use crate::tables::keyspace::{corrupted, leveled, unavailable};
use fjall::{Database, Keyspace, KeyspaceCreateOptions};
use xfer_core::{TransferId, TransferRecord};
use xfer_store::StoreError;

/// `done`'s options: as [`growing`](crate::tables::keyspace::growing), but
/// [`DONE_L0_TABLES`] tables in level 0 before they are merged into level 1, not eight, and
/// each level four times the size of the one before, not ten.
///
/// Every checkpoint ingests its finished transfers as a table of its own, so level 0 fills
/// by one table per checkpoint, and each merge rewrites the level 1 the random ids overlap,
/// all of it. Level 1's size is the level-0 count times the table size, so a larger count
/// merges more new bytes per rewrite of level 1 and leaves fewer levels under it
/// (`docs/benchmarks.md`).
///
/// A point read asks each level-0 table's filter, so a read of `done` costs more with
/// more of them; `done` is read only for ids its filter of done ids may hold, and that
/// filter is sized for few false "maybe"s ([`crate::done_filter::BITS_PER_ID`]). fjall
/// slows a keyspace's writes from 20 tables in its level 0 and halts them from 30
/// (`Keyspace::local_backpressure`, on inserts and batches); `done` is only ever ingested
/// into, which neither does, so its level 0 may hold more.
///
/// `done` only grows, and its keys are random, so a byte moved into a level rewrites about
/// the ratio's worth of that level: a tree of ratio `r` rewrites each byte about `r` times
/// per level, over `log_r` of the table's size levels, least near `r = e`. Reads are rare
/// and filtered (one more level is one more filter probe), so writes decide
/// (`docs/benchmarks.md`).
///
/// fjall keeps a keyspace's options from its creation: a data directory made before keeps
/// what it was made with.
fn done_options() -> KeyspaceCreateOptions {
    leveled(DONE_L0_TABLES, 4.0)
}

/// Tables in `done`'s level 0 before they are merged into level 1 (`done_options` says why).
pub const DONE_L0_TABLES: u8 = 128;

/// The indices of `entries` in the order of their keys, a key given twice only once: its
/// last entry. Sorted by each key's first 16 bytes as one number, the whole keys compared
/// only where those are equal: a checkpoint sorts tens of thousands of keys, each its own
/// allocation, and comparing them byte by byte through their pointers would be most of
/// the sort (`docs/benchmarks.md`).
fn key_order<V>(entries: &[(Vec<u8>, V)]) -> impl Iterator<Item = usize> {
    fn prefix(key: &[u8]) -> u128 {
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        u128::from_be_bytes(b)
    }
    let mut order: Vec<(u128, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (prefix(k), i))
        .collect();
    // A repeated key's entries from the last to the first, so `dedup_by` keeps the last.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| entries[a.1].0.cmp(&entries[b.1].0))
            .then(b.1.cmp(&a.1))
    });
    order.dedup_by(|later, first| later.0 == first.0 && entries[later.1].0 == entries[first.1].0);
    order.into_iter().map(|(_, i)| i)
}

/// A finished transfer's key and encoded value for `done`.
pub(super) fn entry(key: Vec<u8>, record: &TransferRecord) -> (Vec<u8>, fjall::Slice) {
    (
        key,
        codec::with_encoded(&codec::StoredRecord(record), |b| fjall::Slice::from(b)),
    )
}

/// The `done` table. See the module docs.
pub(super) struct DoneTable {
    pub(super) keyspace: Keyspace,
}

impl DoneTable {
    /// Opens (creating if needed) `done` in `db`.
    pub(super) fn open(db: &Database) -> Result<DoneTable, StoreError> {
        let keyspace = db
            .keyspace("done", done_options)
            .map_err(unavailable("done"))?;
        Ok(DoneTable { keyspace })
    }

    /// A finished transfer of `shard`, if the table holds it.
    pub(super) fn get(
        &self,
        shard: u16,
        id: &TransferId,
    ) -> Result<Option<TransferRecord>, StoreError> {
        let key = record_key(shard, id.as_bytes());
        match self.keyspace.get(&key).map_err(unavailable("done"))? {
            None => Ok(None),
            Some(v) => decode_record(&v)
                .map(Some)
                .map_err(|e| corrupted("done", &key, e)),
        }
    }

    /// About how many finished transfers the table holds (fjall's estimate).
    pub(super) fn len_estimate(&self) -> usize {
        self.keyspace.approximate_len()
    }

    /// Calls `f` with the id (its bytes) of every finished transfer of `shard` in the
    /// table, in id order, until `f` answers false.
    pub(super) fn scan_ids(
        &self,
        shard: u16,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let start = record_key(shard, b"");
        let end = record_key(shard + 1, b"");
        for item in self.keyspace.range(start..end) {
            let key = item.key().map_err(unavailable("done"))?;
            if !f(&key[2..]) {
                break;
            }
        }
        Ok(())
    }

    /// Finished transfers of `shard` in id order strictly after `after`, at most `limit`.
    pub(super) fn after(
        &self,
        shard: u16,
        after: Option<&TransferId>,
        limit: usize,
    ) -> Result<Vec<TransferRecord>, StoreError> {
        let start = record_key(shard, after.map_or(&[], |a| a.as_bytes()));
        let end = record_key(shard + 1, b"");
        let mut out = Vec::new();
        for item in self.keyspace.range(start..end) {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("done"))?;
            let r = decode_record(&v).map_err(|e| corrupted("done", &k, e))?;
            if Some(&r.spec.id) != after {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Writes finished transfers of shard `shard` as a checkpoint's commit does first.
    pub(super) fn write(&self, shard: u16, records: &[TransferRecord]) -> Result<(), StoreError> {
        let entries = records
            .iter()
            .map(|r| entry(record_key(shard, r.spec.id.as_bytes()), r))
            .collect();
        self.ingest(entries)
    }

    /// Writes `records` with fjall's ingestion, in key order (a key given twice keeps its
    /// last record).
    pub(super) fn ingest(
        &self,
        mut records: Vec<(Vec<u8>, fjall::Slice)>,
    ) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let order = key_order(&records);
        let mut ingestion = self
            .keyspace
            .start_ingestion()
            .map_err(unavailable("done ingestion"))?;
        for i in order {
            let (key, value) = &mut records[i];
            ingestion
                .write(
                    std::mem::take(key),
                    std::mem::replace(value, fjall::Slice::empty()),
                )
                .map_err(unavailable("done ingestion"))?;
        }
        ingestion.finish().map_err(unavailable("done ingestion"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `key_order` against the order it replaced: reversed, sorted stably, the first of
    /// each key kept. Keys that share their first 16 bytes, end in zero bytes, are
    /// prefixes of each other and repeat, many times over.
    #[test]
    fn key_order_is_the_keys_order_with_each_keys_last_entry() {
        let mut rng = xfer_core::Rng::new(7);
        for round in 0..200 {
            let n = 1 + rng.below(300) as usize;
            let stems: [&[u8]; 4] = [b"", b"\0\x01b0-", b"\0\x01b0-12345678901", b"\0\x02"];
            let entries: Vec<(Vec<u8>, usize)> = (0..n)
                .map(|i| {
                    let mut k = stems[rng.below(4) as usize].to_vec();
                    for _ in 0..rng.below(24) {
                        k.push([0u8, 1, b'0', b'9', 0xff][rng.below(5) as usize]);
                    }
                    (k, i)
                })
                .collect();
            let mut expected = entries.clone();
            expected.reverse();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            expected.dedup_by(|later, first| later.0 == first.0);
            let got: Vec<(Vec<u8>, usize)> =
                key_order(&entries).map(|i| entries[i].clone()).collect();
            assert_eq!(got, expected, "round {round}");
        }
    }
}
