//! [`EventsTable`]: the `events` table, each shard's change feed by position, written by a
//! checkpoint before anything else it writes (`Tables::commit`): a transfer whose record
//! reaches `done` ahead of the checkpoint's batch is found there by a replay after a crash,
//! which then makes none of its events again, so they must be saved already.

use crate::codec::{self, decode};
use crate::tables::keyspace::{corrupted, unavailable};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use xfer_core::{Timestamp, TransferId};
use xfer_store::{Event, EventKind, FeedPosition, StoreError};

/// The `events` table. See the module docs.
pub(super) struct EventsTable {
    pub(super) keyspace: Keyspace,
}

/// An event's key: the shard, then its position, so that a shard's events sort by it.
fn key(shard: u16, p: FeedPosition) -> Vec<u8> {
    let mut k = Vec::with_capacity(18);
    k.extend_from_slice(&shard.to_be_bytes());
    k.extend_from_slice(&p.major.to_be_bytes());
    k.extend_from_slice(&p.minor.to_be_bytes());
    k
}

/// The keys of `shard`'s events from position `from` on.
fn from_on(shard: u16, from: FeedPosition) -> std::ops::RangeInclusive<Vec<u8>> {
    key(shard, from)..=key(shard, FeedPosition::END)
}

/// What an event's value holds: its transfer, kind, time and refund.
type Value<'a> = (&'a TransferId, &'a str, u64, Option<&'a TransferId>);

fn event_of(k: &[u8], v: &[u8]) -> Result<Event, String> {
    let word = |r: std::ops::Range<usize>| -> Result<u64, String> {
        let b = k.get(r).ok_or("event key too short")?;
        Ok(u64::from_be_bytes(b.try_into().expect("eight bytes")))
    };
    if k.len() != 18 {
        return Err("event key of the wrong length".into());
    }
    let (transfer, kind, at, refund): (TransferId, String, u64, Option<TransferId>) = decode(v)?;
    Ok(Event {
        position: FeedPosition {
            major: word(2..10)?,
            minor: word(10..18)?,
        },
        transfer,
        kind: EventKind::from_word(&kind).ok_or_else(|| format!("no event kind {kind:?}"))?,
        at: Timestamp(at),
        refund,
    })
}

impl EventsTable {
    /// Opens (creating if needed) `events` in `db`.
    pub(super) fn open(db: &Database) -> Result<EventsTable, StoreError> {
        let keyspace = db
            .keyspace("events", KeyspaceCreateOptions::default)
            .map_err(unavailable("events"))?;
        Ok(EventsTable { keyspace })
    }

    /// Writes `events` of each shard and syncs them.
    pub(super) fn write(
        &self,
        db: &Database,
        events: &[(u16, &[Event])],
    ) -> Result<(), StoreError> {
        let n = events.iter().map(|(_, e)| e.len()).sum();
        if n == 0 {
            return Ok(());
        }
        let mut batch =
            OwnedWriteBatch::with_capacity(db.clone(), n).durability(Some(PersistMode::SyncAll));
        for (shard, list) in events {
            for e in *list {
                let value: Value<'_> =
                    (&e.transfer, e.kind.word(), e.at.as_ms(), e.refund.as_ref());
                let value = codec::encode(&value);
                batch.insert(&self.keyspace, key(*shard, e.position), value);
            }
        }
        batch.commit().map_err(unavailable("events"))
    }

    /// Retention: removes at most `limit` of `shard`'s oldest events, while made before
    /// `before`, and notes the last one removed under `dropped_key` in `meta`, in one
    /// batch; answers how many.
    pub(super) fn trim(
        &self,
        db: &Database,
        meta: &Keyspace,
        dropped_key: Vec<u8>,
        shard: u16,
        before: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let mut old = Vec::new();
        let mut last = None;
        for item in self.keyspace.range(from_on(shard, FeedPosition::START)) {
            if old.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("events"))?;
            let e = event_of(&k, &v).map_err(|why| corrupted("events", &k, why))?;
            if e.at >= before {
                break;
            }
            last = Some(e.position);
            old.push(k);
        }
        let Some(last) = last else { return Ok(0) };
        let mut batch = OwnedWriteBatch::with_capacity(db.clone(), old.len() + 1)
            .durability(Some(PersistMode::SyncAll));
        batch.insert(meta, dropped_key, codec::encode(&(last.major, last.minor)));
        let n = old.len();
        for k in old {
            batch.remove(&self.keyspace, k);
        }
        batch.commit().map_err(unavailable("events"))?;
        Ok(n)
    }

    /// At most `limit` events of `shard` after `after`, oldest first.
    pub(super) fn read(
        &self,
        shard: u16,
        after: FeedPosition,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        for item in self.keyspace.range(from_on(shard, after)) {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("events"))?;
            let e = event_of(&k, &v).map_err(|why| corrupted("events", &k, why))?;
            if e.position > after {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// At most `limit` events of `shard` before `before`, newest first.
    pub(super) fn read_before(
        &self,
        shard: u16,
        before: FeedPosition,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        let range = key(shard, FeedPosition::START)..key(shard, before);
        for item in self.keyspace.range(range).rev() {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("events"))?;
            out.push(event_of(&k, &v).map_err(|why| corrupted("events", &k, why))?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_back_from_its_key_and_value() {
        let e = Event {
            position: FeedPosition { major: 7, minor: 9 },
            transfer: TransferId::new("t1").unwrap(),
            kind: EventKind::Refunded,
            at: Timestamp(42),
            refund: Some(TransferId::new("r1").unwrap()),
        };
        let value: Value<'_> = (&e.transfer, e.kind.word(), 42, e.refund.as_ref());
        let encoded = codec::encode(&value);
        assert_eq!(event_of(&key(3, e.position), &encoded), Ok(e.clone()));
        assert!(key(0, FeedPosition { major: 1, minor: 0 }) > key(0, FeedPosition::seq(u64::MAX)));
        let last_of_0 = FeedPosition {
            major: u64::MAX,
            minor: 0,
        };
        assert!(key(1, FeedPosition::START) > key(0, last_of_0));
        assert!(event_of(&key(3, e.position)[..17], &encoded).is_err());
    }
}
