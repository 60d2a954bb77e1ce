//! The bytes of the store: log entries, and the keys and values of the checkpoint tables.
//!
//! Values are [postcard](https://docs.rs/postcard) encodings of the domain types' serde
//! derives (varints, enums by variant index: variants may be appended, never reordered or
//! removed). Decoding goes through the types' validating constructors, so a decoded id or
//! amount is as valid as a constructed one; anything that does not decode is corruption.
//!
//! ```text
//! log entry   = Ops { shard: u16, now: u64, ops: [Op] }   the batch's writes, in order
//!             | Prune { shard: u16, now: u64, limit: u32 }
//! table key   = shard: u16 BE ‖ id bytes                  accounts, live, done
//! history key = shard: u16 BE ‖ account bytes ‖ 0x00 ‖ sequence: u64 BE  -> transfer id
//! ```
//!
//! Ids never contain a 0 byte, so the history key's separator keeps one account's entries
//! contiguous and ordered by sequence.

use serde::{Deserialize, Serialize};
use xfer_core::{AccountId, Timestamp, TransferId};
use xfer_store::Op;

/// What one log record says to do, as written.
#[derive(Serialize)]
pub enum EntryRef<'a> {
    /// Apply these ops to the shard with the store clock at `now`.
    Ops {
        /// The shard.
        shard: u16,
        /// The store clock when they were applied.
        now: Timestamp,
        /// The ops, in order (reads left out).
        ops: Vec<&'a Op>,
    },
    /// Prune the shard's tombstones with the store clock at `now`.
    Prune {
        /// The shard.
        shard: u16,
        /// The store clock.
        now: Timestamp,
        /// At most this many.
        limit: u32,
    },
}

/// What one log record says to do, as read back. Same layout as [`EntryRef`].
#[derive(Debug, Deserialize)]
pub enum Entry {
    /// See [`EntryRef::Ops`].
    Ops {
        /// The shard.
        shard: u16,
        /// The store clock.
        now: Timestamp,
        /// The ops.
        ops: Vec<Op>,
    },
    /// See [`EntryRef::Prune`].
    Prune {
        /// The shard.
        shard: u16,
        /// The store clock.
        now: Timestamp,
        /// At most this many.
        limit: u32,
    },
}

impl Entry {
    /// The shard the entry is for.
    pub fn shard(&self) -> u16 {
        match self {
            Entry::Ops { shard, .. } | Entry::Prune { shard, .. } => *shard,
        }
    }
}

/// Encodes `value` (infallible for the domain types: no maps with non-string keys, no
/// unsized sequences).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("domain types always encode")
}

/// Decodes a whole value; trailing bytes are an error.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    match postcard::take_from_bytes(bytes) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(format!("{} trailing bytes", rest.len())),
        Err(e) => Err(e.to_string()),
    }
}

/// The key of a record `id` of `shard` in the accounts, live and done tables.
pub fn record_key(shard: u16, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + id.len());
    k.extend_from_slice(&shard.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// The id part of a record key.
pub fn record_id(key: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(key.get(2..).ok_or("key shorter than its shard")?)
        .map_err(|e| e.to_string())
}

/// The prefix of `account`'s history entries in `shard`.
pub fn history_prefix(shard: u16, account: &AccountId) -> Vec<u8> {
    let mut k = record_key(shard, account.as_str());
    k.push(0);
    k
}

/// The key of one history entry.
pub fn history_key(shard: u16, account: &AccountId, sequence: u64) -> Vec<u8> {
    let mut k = history_prefix(shard, account);
    k.extend_from_slice(&sequence.to_be_bytes());
    k
}

/// The sequence and transfer of a history entry.
pub fn history_entry(key: &[u8], value: &[u8]) -> Result<(u64, TransferId), String> {
    let seq = key
        .len()
        .checked_sub(8)
        .map(|at| u64::from_be_bytes(key[at..].try_into().expect("8 bytes")))
        .ok_or("history key too short")?;
    let id = std::str::from_utf8(value).map_err(|e| e.to_string())?;
    Ok((seq, TransferId::new(id).map_err(|e| e.to_string())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_store::AccountOp;

    #[test]
    fn entries_round_trip_and_trailing_bytes_are_refused() {
        let a = AccountId::new("a").unwrap();
        let ops = [Op::Account(a.clone(), AccountOp::Close)];
        let bytes = encode(&EntryRef::Ops {
            shard: 3,
            now: Timestamp(7),
            ops: ops.iter().collect(),
        });
        match decode::<Entry>(&bytes).unwrap() {
            Entry::Ops { shard, now, ops } => {
                assert_eq!((shard, now), (3, Timestamp(7)));
                assert_eq!(ops, vec![Op::Account(a, AccountOp::Close)]);
            }
            other => panic!("{other:?}"),
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<Entry>(&longer).is_err());
        assert!(decode::<Entry>(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn invalid_ids_do_not_decode() {
        // A valid encoding of an account id "a b": postcard writes a string as varint
        // length then bytes.
        assert!(decode::<AccountId>(&[3, b'a', b' ', b'b']).is_err());
        assert_eq!(
            decode::<AccountId>(&[3, b'a', b':', b'b'])
                .unwrap()
                .as_str(),
            "a:b"
        );
    }

    #[test]
    fn history_keys_sort_by_account_then_sequence() {
        let a = AccountId::new("a").unwrap();
        let ab = AccountId::new("ab").unwrap();
        assert!(history_key(0, &a, 2) < history_key(0, &a, 10));
        assert!(history_key(0, &a, u64::MAX) < history_key(0, &ab, 0));
        assert!(history_key(0, &ab, 0) < history_key(1, &a, 0));
        let (seq, t) = history_entry(&history_key(1, &a, 42), b"t1").unwrap();
        assert_eq!((seq, t.as_str()), (42, "t1"));
    }
}
