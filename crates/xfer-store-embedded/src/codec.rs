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
//! history key = shard: u16 BE ‖ account bytes ‖ 0x00 ‖ first sequence: u64 BE
//!            -> [(sequence, transfer id)]   one checkpoint's entries of the account
//! tombstone run key = shard: u16 BE ‖ checkpoint LSN: u64 BE ‖ number: u32 BE
//!            -> (latest horizon, [(account, transfer, intent)])
//! accounts value = the account without its tombstones (they are in the runs)
//! live, done value = record ‖ timeline: [step] ‖ refunds: [refund link], if any or if
//!            what follows is there ‖ captured: [amount], if captured in part or escalated
//!            ‖ escalation, if escalated
//!            (StoredRecord; no timeline: derived)
//! ```
//!
//! Ids never contain a 0 byte, so the history key's separator keeps one account's runs
//! contiguous and ordered by sequence. A run holds the entries one checkpoint wrote for one
//! account (at most `tables::HISTORY_RUN_MAX` of them), in increasing sequence; runs of one
//! account never overlap.

use serde::{Deserialize, Serialize};
use xfer_core::{
    Account, AccountId, Intent, IntentState, RefundLink, Timeline, Timestamp, TransferId,
    TransferRecord,
};
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

/// A transfer record as the `live` and `done` tables keep it: the record's own encoding
/// (which leaves its timeline and refunds out: the log's inserts carry none), then its
/// timeline, then its refund links if it has any, then what a hold captured in part
/// captured (the links, none perhaps, written before them then). Most records have neither,
/// and their values stay as they were before partial refunds.
pub struct StoredRecord<'a>(pub &'a TransferRecord);

impl Serialize for StoredRecord<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let escalation = self.0.escalation.is_some();
        let captured = escalation || !self.0.captured.is_empty();
        let refunds = captured || !self.0.refunds.is_empty();
        let len = 2 + usize::from(refunds) + usize::from(captured) + usize::from(escalation);
        let mut t = s.serialize_tuple(len)?;
        t.serialize_element(self.0)?;
        t.serialize_element(&self.0.timeline)?;
        if refunds {
            t.serialize_element(&self.0.refunds)?;
        }
        if captured {
            t.serialize_element(&self.0.captured)?;
        }
        if let Some(e) = &self.0.escalation {
            t.serialize_element(e)?;
        }
        t.end()
    }
}

/// Decodes a `live` or `done` value ([`StoredRecord`]). A value written before records kept
/// their timeline ends after the record: its timeline is derived, the record's one step as
/// it is now (`xfer_store::timeline::derived`). One written before partial refunds, or of a
/// record no refund links, ends after the timeline.
pub fn decode_record(bytes: &[u8]) -> Result<TransferRecord, String> {
    let (mut r, rest) =
        postcard::take_from_bytes::<TransferRecord>(bytes).map_err(|e| e.to_string())?;
    if rest.is_empty() {
        r.timeline = xfer_store::timeline::derived(&r);
        return Ok(r);
    }
    let (timeline, rest) =
        postcard::take_from_bytes::<Timeline>(rest).map_err(|e| e.to_string())?;
    r.timeline = timeline;
    if rest.is_empty() {
        return Ok(r);
    }
    let (refunds, rest) =
        postcard::take_from_bytes::<Vec<RefundLink>>(rest).map_err(|e| e.to_string())?;
    r.refunds = refunds;
    if rest.is_empty() {
        return Ok(r);
    }
    let (captured, rest) =
        postcard::take_from_bytes::<Vec<xfer_core::Amount>>(rest).map_err(|e| e.to_string())?;
    r.captured = captured;
    if !rest.is_empty() {
        r.escalation = Some(decode::<xfer_core::Escalation>(rest)?);
    }
    Ok(r)
}

/// Encodes `value` (infallible for the domain types: no maps with non-string keys, no
/// unsized sequences), in an allocation of its exact size.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    with_encoded(value, <[u8]>::to_vec)
}

/// A scratch buffer larger than this is let go after use rather than kept.
const SCRATCH_KEEP_MAX: usize = 1 << 20;

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = const { std::cell::RefCell::new(Scratch::new()) };
}

/// Encodes `value` into this thread's scratch buffer and hands `f` the bytes. The buffer
/// keeps its capacity from call to call, so that encoding the checkpoint's records and
/// every log entry does not grow a fresh `Vec` by doubling, copying what it held each time
/// (`docs/benchmarks.md#inline-ids`).
pub fn with_encoded<T: Serialize + ?Sized, R>(value: &T, f: impl FnOnce(&[u8]) -> R) -> R {
    SCRATCH.with(|cell| {
        // Taken, not borrowed: an `f` that encodes again finds an empty buffer of its own.
        let mut scratch = cell.take();
        scratch.at = 0;
        let scratch =
            postcard::serialize_with_flavor(value, scratch).expect("domain types always encode");
        let out = f(scratch.written());
        if scratch.bytes.len() <= SCRATCH_KEEP_MAX {
            cell.replace(scratch);
        }
        out
    })
}

/// postcard's output: bytes written up to `at` in a buffer kept zeroed beyond it (its
/// length is what it can hold). postcard writes a value as many small pieces (a varint of
/// one to ten bytes, an id of a few dozen), so a piece of up to 16 bytes is written as two
/// fixed-size copies that may overlap, which compile to moves rather than a call to
/// `memmove` per piece (`docs/benchmarks.md#postcard-scratch`).
#[derive(Default)]
struct Scratch {
    bytes: Vec<u8>,
    at: usize,
}

impl Scratch {
    /// The least room a scratch buffer has once it holds anything.
    const ROOM: usize = 1024;
    /// The most bytes a piece may have to be copied as two fixed-size moves.
    const SMALL: usize = 16;

    const fn new() -> Scratch {
        Scratch {
            bytes: Vec::new(),
            at: 0,
        }
    }

    fn written(&self) -> &[u8] {
        &self.bytes[..self.at]
    }

    /// Makes room for `n` more bytes, and at least [`Scratch::SMALL`].
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
        if self.bytes.len() - self.at < n.max(Self::SMALL) {
            self.grow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        let len = (self.at + n.max(Self::SMALL))
            .max(self.bytes.len() * 2)
            .max(Self::ROOM);
        self.bytes.resize(len, 0);
    }
}

impl postcard::ser_flavors::Flavor for Scratch {
    type Output = Scratch;

    #[inline(always)]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.reserve(1);
        self.bytes[self.at] = byte;
        self.at += 1;
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        let n = data.len();
        self.reserve(n);
        let to = &mut self.bytes[self.at..self.at + n.max(Self::SMALL)];
        // Each case copies its first and its last `k` bytes (`k` a constant, so each
        // copy is one move); where `n < 2k` the two overlap and write the same bytes.
        match n {
            0 => {}
            1 => to[0] = data[0],
            2..=3 => {
                to[..2].copy_from_slice(&data[..2]);
                to[n - 2..n].copy_from_slice(&data[n - 2..]);
            }
            4..=7 => {
                to[..4].copy_from_slice(&data[..4]);
                to[n - 4..n].copy_from_slice(&data[n - 4..]);
            }
            8..=Self::SMALL => {
                to[..8].copy_from_slice(&data[..8]);
                to[n - 8..n].copy_from_slice(&data[n - 8..]);
            }
            _ => to[..n].copy_from_slice(data),
        }
        self.at += n;
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Scratch> {
        Ok(self)
    }
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
pub fn record_key(shard: u16, id: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + id.len());
    k.extend_from_slice(&shard.to_be_bytes());
    k.extend_from_slice(id);
    k
}

/// The id part of a record key.
pub fn record_id(key: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(key.get(2..).ok_or("key shorter than its shard")?)
        .map_err(|e| e.to_string())
}

/// The prefix of `account`'s history entries in `shard`.
pub fn history_prefix(shard: u16, account: &AccountId) -> Vec<u8> {
    let mut k = record_key(shard, account.as_bytes());
    k.push(0);
    k
}

/// The key of one history entry.
pub fn history_key(shard: u16, account: &AccountId, sequence: u64) -> Vec<u8> {
    let mut k = history_prefix(shard, account);
    k.extend_from_slice(&sequence.to_be_bytes());
    k
}

/// The entries of a history run (see the module docs), checked against its key: not
/// empty, starting at the key's sequence, increasing.
pub fn history_run(key: &[u8], value: &[u8]) -> Result<Vec<(u64, TransferId)>, String> {
    let first = key
        .len()
        .checked_sub(8)
        .map(|at| u64::from_be_bytes(key[at..].try_into().expect("8 bytes")))
        .ok_or("history key too short")?;
    let run: Vec<(u64, TransferId)> = decode(value)?;
    if run.first().map(|(seq, _)| *seq) != Some(first) {
        return Err(format!(
            "the run does not start at its key's sequence {first}"
        ));
    }
    if !run.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err("the run's sequences do not increase".into());
    }
    Ok(run)
}

/// An account as the `accounts` table holds it: the record without its tombstones (they
/// are written once each, in tombstone runs, instead of with every later write of the
/// account until their horizon). Decodes as an [`Account`] holding only its open intents.
pub struct AccountWithoutTombstones<'a>(pub &'a Account);

impl Serialize for AccountWithoutTombstones<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // Account's fields, in its order (the test below holds the two together).
        let a = self.0;
        let mut st = s.serialize_struct("Account", 8)?;
        st.serialize_field("id", &a.id)?;
        st.serialize_field("asset", &a.asset)?;
        st.serialize_field("balance", &a.balance)?;
        st.serialize_field("reserved", &a.reserved)?;
        st.serialize_field("incoming", &a.incoming)?;
        st.serialize_field("lower_bound", &a.lower_bound)?;
        st.serialize_field("status", &a.status)?;
        st.serialize_field("intents", &OpenIntents(a))?;
        st.end()
    }
}

/// An account's open intents, as the map `Intents` encodes to.
struct OpenIntents<'a>(&'a Account);

impl Serialize for OpenIntents<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // The open intents only (a handful; none for most accounts, and then no walk over
        // the tombstones), counted by the intents themselves.
        let intents = &self.0.intents;
        let mut map = s.serialize_map(Some(intents.open_len()))?;
        for (t, i) in intents.open_unordered() {
            map.serialize_entry(t, i)?;
        }
        map.end()
    }
}

/// One tombstone as a run holds it: the account, the transfer, the intent.
pub type Tombstone = (AccountId, TransferId, Intent);

/// The key of a tombstone run: `shard ‖ the checkpoint's LSN ‖ its number in the
/// checkpoint`, all big-endian, so a shard's runs are contiguous and in the order written.
pub fn tombstone_run_key(shard: u16, lsn: u64, number: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(14);
    k.extend_from_slice(&shard.to_be_bytes());
    k.extend_from_slice(&lsn.to_be_bytes());
    k.extend_from_slice(&number.to_be_bytes());
    k
}

/// A tombstone run's value: the greatest horizon in it, then its tombstones.
#[derive(Serialize)]
pub struct TombstoneRunRef<'a> {
    /// The greatest horizon of the run's tombstones.
    pub latest_horizon: Timestamp,
    /// The tombstones.
    pub tombstones: &'a [Tombstone],
}

/// A tombstone run as read back (see [`TombstoneRunRef`]).
#[derive(Debug, Deserialize)]
pub struct TombstoneRun {
    /// See [`TombstoneRunRef::latest_horizon`].
    pub latest_horizon: Timestamp,
    /// See [`TombstoneRunRef::tombstones`].
    pub tombstones: Vec<Tombstone>,
}

/// Decodes a tombstone run, checked: not empty, no open intent, the greatest horizon as
/// stated.
pub fn tombstone_run(value: &[u8]) -> Result<TombstoneRun, String> {
    let run: TombstoneRun = decode(value)?;
    if run.tombstones.is_empty() {
        return Err("an empty tombstone run".into());
    }
    if run
        .tombstones
        .iter()
        .any(|(_, _, i)| i.state == IntentState::Open)
    {
        return Err("an open intent in a tombstone run".into());
    }
    let latest = run.tombstones.iter().map(|(_, _, i)| i.horizon).max();
    if latest != Some(run.latest_horizon) {
        return Err(format!(
            "the run's greatest horizon is {latest:?}, not {:?} as it says",
            run.latest_horizon
        ));
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::AssetCode;
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

    /// A data directory written before records kept their timeline still reads: its
    /// `live`/`done` values end after the record (the timeline is derived: one step as the
    /// record is), and a refund link in its log has no clock (its entry's is given at
    /// replay). New values carry the timeline; a link with a clock reads back with it.
    #[test]
    fn records_and_links_written_before_timelines_still_decode() {
        use xfer_core::{Posting, TransferKind, TransferSpec, TransferState};
        use xfer_store::TransferOp;
        let spec = TransferSpec {
            id: TransferId::new("t1").unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: xfer_core::Amount::new(5, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        };
        let mut r = TransferRecord::accept(spec, Timestamp(10), 0);
        r.state = TransferState::Done;
        r.updated_at = Timestamp(20);
        let old = postcard::to_allocvec(&r).unwrap();
        let back = decode_record(&old).unwrap();
        let steps = back.timeline.steps();
        assert_eq!(steps.len(), 1);
        assert_eq!(
            (steps[0].at, steps[0].state),
            (Timestamp(20), TransferState::Done)
        );
        r.timeline.push(r.step_at(Timestamp(20)));
        let new = encode(&StoredRecord(&r));
        assert_eq!(decode_record(&new).unwrap(), r);
        assert!(decode_record(&new[..new.len() - 1]).is_err());

        /// `TransferOp::LinkRefund` as it was encoded before it had a clock.
        #[derive(serde::Serialize)]
        enum OldOp {
            #[allow(dead_code)]
            Account,
            Transfer(TransferId, OldTransferOp),
        }
        #[derive(serde::Serialize)]
        #[allow(dead_code)]
        enum OldTransferOp {
            Insert,
            Claim,
            Decide,
            Capture,
            Void,
            Finish,
            LinkRefund {
                refund: TransferId,
                replacing: Option<TransferId>,
                postings: Vec<Posting>,
            },
        }
        for replacing in [None, Some(TransferId::new("r0").unwrap())] {
            let replacing_now: Vec<TransferId> = replacing.iter().cloned().collect();
            let old = OldOp::Transfer(
                TransferId::new("t1").unwrap(),
                OldTransferOp::LinkRefund {
                    refund: TransferId::new("r1").unwrap(),
                    replacing: replacing.clone(),
                    postings: r.spec.reversed_postings(),
                },
            );
            let link = |now| {
                Op::Transfer(
                    TransferId::new("t1").unwrap(),
                    TransferOp::LinkRefund {
                        refund: TransferId::new("r1").unwrap(),
                        replacing: replacing_now.clone(),
                        postings: r.spec.reversed_postings(),
                        now,
                    },
                )
            };
            let unknown = link(xfer_store::op::LINK_NOW_UNKNOWN);
            assert_eq!(decode::<Op>(&encode(&old)).unwrap(), unknown);
            assert_eq!(encode(&unknown), encode(&old), "encoded as before");
            let clocked = link(Timestamp(1_700_000_000_000));
            assert_eq!(decode::<Op>(&encode(&clocked)).unwrap(), clocked);
        }
    }

    /// A record with refund links keeps them after its timeline; one without ends after
    /// its timeline as before; a link replacing several refunds reads back whole.
    #[test]
    fn refund_links_and_links_replacing_several_round_trip() {
        use xfer_core::{Posting, RefundLink, TransferKind, TransferSpec, TransferState};
        use xfer_store::TransferOp;
        let amount = |n| xfer_core::Amount::new(n, "amount").unwrap();
        let spec = TransferSpec {
            id: TransferId::new("t1").unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: amount(5),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        };
        let mut r = TransferRecord::accept(spec, Timestamp(10), 0);
        r.state = TransferState::Done;
        let plain = encode(&StoredRecord(&r));
        let timeline_only = {
            let mut v = postcard::to_allocvec(&r).unwrap();
            v.extend(postcard::to_allocvec(&r.timeline).unwrap());
            v
        };
        assert_eq!(plain, timeline_only, "no links: as before partial refunds");
        for (id, n) in [("r1", 2), ("r2", 3)] {
            r.refunds.push(RefundLink {
                refund: TransferId::new(id).unwrap(),
                amounts: vec![amount(n)],
            });
        }
        r.refunded_by = Some(TransferId::new("r2").unwrap());
        let linked = encode(&StoredRecord(&r));
        assert_eq!(decode_record(&linked).unwrap(), r);
        assert!(decode_record(&linked[..linked.len() - 1]).is_err());
        // Captured in part, with links or none.
        r.captured = vec![amount(4)];
        let both = encode(&StoredRecord(&r));
        assert_eq!(decode_record(&both).unwrap(), r);
        assert!(decode_record(&both[..both.len() - 1]).is_err());
        let links = std::mem::take(&mut r.refunds);
        let captured_only = encode(&StoredRecord(&r));
        assert_eq!(decode_record(&captured_only).unwrap(), r);
        r.escalation = Some(xfer_core::Escalation::new(
            3,
            "store corrupted: é",
            Timestamp(9),
        ));
        let escalated = encode(&StoredRecord(&r));
        assert_eq!(decode_record(&escalated).unwrap(), r);
        assert!(decode_record(&escalated[..escalated.len() - 1]).is_err());
        r.escalation = None;
        r.refunds = links;
        r.captured.clear();
        for replacing in [vec![], vec!["r1"], vec!["r1", "r2"]] {
            let op = Op::Transfer(
                TransferId::new("t1").unwrap(),
                TransferOp::LinkRefund {
                    refund: TransferId::new("r3").unwrap(),
                    replacing: replacing
                        .iter()
                        .map(|r| TransferId::new(r).unwrap())
                        .collect(),
                    postings: r.spec.reversed_postings(),
                    now: Timestamp(30),
                },
            );
            assert_eq!(decode::<Op>(&encode(&op)).unwrap(), op, "{replacing:?}");
        }
    }

    /// The scratch buffer writes what postcard's own `Vec` output writes: pieces of every
    /// length from empty to past the small copies, values of every varint length, one
    /// after the other so that every copy starts at every offset and the buffer grows
    /// mid-value, and again into a buffer kept from an encoding longer than the next.
    #[test]
    fn the_scratch_buffer_writes_what_postcard_writes() {
        /// Bytes as one piece (a `Vec<u8>` is written byte by byte).
        struct Piece(Vec<u8>);
        impl Serialize for Piece {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
        let pieces: Vec<(Piece, u64, String)> = (0..=40u8)
            .map(|n| {
                let bytes = (0..n).map(|i| i.wrapping_mul(37) ^ n).collect();
                let text = "é".repeat(usize::from(n % 7));
                (Piece(bytes), 1u64 << (u32::from(n) * 3 % 64), text)
            })
            .collect();
        for k in [0, 1, 2, 3, 5, 17, 41] {
            let value = &pieces[..k];
            let want = postcard::to_allocvec(value).unwrap();
            assert_eq!(encode(value), want, "{k} pieces");
            with_encoded(&pieces, |all| {
                // Encoding inside `f`: a buffer of its own, the outer bytes unchanged.
                assert_eq!(encode(value), want);
                assert_eq!(all, postcard::to_allocvec(&pieces).unwrap());
            });
        }
        let big = vec![7u8; 3 * Scratch::ROOM];
        assert_eq!(encode(&big), postcard::to_allocvec(&big).unwrap());
        assert_eq!(
            encode(&pieces[1]),
            postcard::to_allocvec(&pieces[1]).unwrap()
        );
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
    fn ids_and_asset_codes_encode_exactly_as_their_text_did() {
        // They are written as bytes (no UTF-8 check) where they used to be written as
        // text: logs and tables written before must read the same.
        let short = AccountId::new("usd-1234").unwrap();
        let long = TransferId::new(&"x".repeat(40)).unwrap();
        let asset = AssetCode::new("USD", "asset").unwrap();
        assert_eq!(encode(&short), encode(short.as_str()));
        assert_eq!(encode(&long), encode(long.as_str()));
        assert_eq!(encode(&asset), encode(asset.as_str()));
        assert_eq!(decode::<TransferId>(&encode(long.as_str())).unwrap(), long);
    }

    #[test]
    fn history_keys_sort_by_account_then_sequence() {
        let a = AccountId::new("a").unwrap();
        let ab = AccountId::new("ab").unwrap();
        assert!(history_key(0, &a, 2) < history_key(0, &a, 10));
        assert!(history_key(0, &a, u64::MAX) < history_key(0, &ab, 0));
        assert!(history_key(0, &ab, 0) < history_key(1, &a, 0));
    }

    #[test]
    fn history_runs_round_trip_and_must_match_their_key() {
        let a = AccountId::new("a").unwrap();
        let t = |s: &str| TransferId::new(s).unwrap();
        let run = vec![(42, t("t1")), (45, t("t2"))];
        let key = history_key(1, &a, 42);
        assert_eq!(history_run(&key, &encode(&run)).unwrap(), run);
        // Another first sequence than the key's, an empty run, sequences not increasing.
        assert!(history_run(&history_key(1, &a, 41), &encode(&run)).is_err());
        assert!(history_run(&key, &encode(&Vec::<(u64, TransferId)>::new())).is_err());
        let back = vec![(42, t("t1")), (42, t("t2"))];
        assert!(history_run(&key, &encode(&back)).is_err());
        assert!(history_run(&key[..4], &encode(&run)).is_err());
    }

    #[test]
    fn an_account_is_written_without_its_tombstones_and_reads_back_as_an_account() {
        use xfer_core::{AccountStatus, AssetCode, LowerBound};
        let t = |s: &str| TransferId::new(s).unwrap();
        let intent = |state, horizon| Intent {
            debit: 7,
            credit: 3,
            state,
            horizon: Timestamp(horizon),
        };
        let mut a = Account::open(
            AccountId::new("a").unwrap(),
            AssetCode::new("USD", "asset").unwrap(),
            LowerBound::Bounded(-5),
        );
        a.balance = 100;
        a.reserved = 14;
        a.incoming = 6;
        a.status = AccountStatus::Closed;
        a.intents.insert(t("open1"), intent(IntentState::Open, 10));
        a.intents.insert(t("open2"), intent(IntentState::Open, 11));
        a.intents
            .insert(t("posted"), intent(IntentState::Posted, 12));
        a.intents
            .insert(t("released"), intent(IntentState::Released, 13));
        let back: Account = decode(&encode(&AccountWithoutTombstones(&a))).unwrap();
        let mut want = a.clone();
        want.intents = a
            .intents
            .iter()
            .filter(|(_, i)| i.state == IntentState::Open)
            .map(|(t, i)| (t.clone(), *i))
            .collect();
        assert_eq!(
            back, want,
            "every field in Account's order, open intents only"
        );
        // Without tombstones it is the account's own encoding.
        assert_eq!(encode(&AccountWithoutTombstones(&want)), encode(&want));
    }

    #[test]
    fn tombstone_runs_round_trip_and_are_checked() {
        let t = |s: &str| TransferId::new(s).unwrap();
        let a = AccountId::new("a").unwrap();
        let tomb = |transfer: &str, state, horizon| {
            let i = Intent {
                debit: 1,
                credit: 0,
                state,
                horizon: Timestamp(horizon),
            };
            (a.clone(), t(transfer), i)
        };
        let run = vec![
            tomb("t1", IntentState::Posted, 5),
            tomb("t2", IntentState::Released, 9),
        ];
        let bytes = |latest, tombstones: &[Tombstone]| {
            encode(&TombstoneRunRef {
                latest_horizon: Timestamp(latest),
                tombstones,
            })
        };
        let back = tombstone_run(&bytes(9, &run)).unwrap();
        assert_eq!(
            (back.latest_horizon, back.tombstones),
            (Timestamp(9), run.clone())
        );
        assert!(
            tombstone_run(&bytes(8, &run)).is_err(),
            "wrong greatest horizon"
        );
        assert!(tombstone_run(&bytes(0, &[])).is_err(), "empty");
        let open = vec![tomb("t3", IntentState::Open, 9)];
        assert!(tombstone_run(&bytes(9, &open)).is_err(), "an open intent");
        // Keys: a shard's runs in the order written.
        assert!(tombstone_run_key(1, 7, 0) < tombstone_run_key(1, 7, 1));
        assert!(tombstone_run_key(1, 7, 9) < tombstone_run_key(1, 8, 0));
        assert!(tombstone_run_key(1, u64::MAX, 9) < tombstone_run_key(2, 0, 0));
    }
}
