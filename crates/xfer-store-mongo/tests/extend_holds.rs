//! Extending a hold is a condition in the update pipeline and the refusals are the Rust
//! rules on the document left as it was: random extensions of holds whose expiries sit long
//! past, around 10^15, 2^53 and 2^63 - 1, and of transfers in every other state, each held
//! to the Memory store's reply (the record with its timeline), then the `wake` index to the
//! Memory store's scan.

mod common;
use common::Databases;
use std::collections::BTreeSet;
use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, OwnerId, Posting, Rng, SystemClock, Timestamp, TransferId,
    TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{MemoryStore, Op, Reply, Store, TransferOp};

const MAX: u64 = i64::MAX as u64;

/// An expiry no real clock is near: long past, or far ahead at the numbers' boundaries.
fn expiry(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => 1_500 + rng.below(1_000),
        1 => 1_000_000_000_000_000 - 2 + rng.below(4),
        2 => (1 << 53) - 2 + rng.below(4),
        3 => MAX - rng.below(3),
        _ => 100_000_000_000_000 + rng.below(1 << 40),
    }
}

fn record(id: &str, state: TransferState, hold: Option<u64>) -> TransferRecord {
    let spec = TransferSpec {
        id: TransferId::new(id).unwrap(),
        postings: vec![Posting {
            from: AccountId::new("a").unwrap(),
            to: AccountId::new("b").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: Amount::new(5, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: match hold {
            Some(_) => TransferKind::Hold { ttl_ms: 1_000 },
            None => TransferKind::Transfer,
        },
        refund_of: None,
        timeout_ms: 1_000,
    };
    let mut r = TransferRecord::accept(spec, Timestamp(1_000), 100);
    r.state = state;
    r.hold_expires_at = hold.map(Timestamp);
    if state != TransferState::Initial {
        r.epoch = 1;
        r.owner = Some(OwnerId::new("x").unwrap());
    }
    r.accepted()
}

/// The expiries the extensions aim at, from the hold's own `e`.
fn until(rng: &mut Rng, e: u64) -> u64 {
    match rng.below(6) {
        0 => e - 1,
        1 => e,
        2 => (e + 1).min(MAX),
        3 => MAX - rng.below(2),
        _ => expiry(rng),
    }
}

/// The caller's clock: mostly long before every expiry ahead, else right at `e`.
fn now(rng: &mut Rng, e: u64) -> u64 {
    match rng.below(6) {
        0 => e - 2,
        1 => e - 1,
        2 => e,
        3 => (e + 1).min(MAX),
        _ => 1_000 + rng.below(100),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_match_the_memory_store() {
    let databases = Databases::new("extend");
    let store = databases.open().await;
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(11);
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let others = [
        TransferState::Initial,
        TransferState::Pending,
        TransferState::Applied,
        TransferState::Canceling,
        TransferState::Done,
        TransferState::Canceled,
    ];
    let mut ids = vec![];
    for h in 0..24usize {
        let id = TransferId::new(&format!("h{h}")).unwrap();
        let (state, hold) = match h {
            0..=15 => (TransferState::Held, Some(expiry(&mut rng))),
            // Held with no expiry: nothing to extend.
            16 => (TransferState::Held, None),
            _ => (others[(h - 17) % others.len()], Some(expiry(&mut rng))),
        };
        let insert = vec![Op::Transfer(
            id.clone(),
            TransferOp::Insert(Arc::new(record(id.as_str(), state, hold))),
        )];
        let want = memory.execute(insert.clone()).await.unwrap();
        assert_eq!(store.execute(insert).await.unwrap(), want, "insert {id}");
        ids.push(id);
    }
    ids.push(TransferId::new("absent").unwrap());
    for step in 0..400u64 {
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let get = vec![Op::Transfer(id.clone(), TransferOp::Get)];
        let e = match &memory.execute(get).await.unwrap()[0] {
            Reply::Unchanged(r) => r.hold_expires_at.map_or(MAX, |e| e.0),
            _ => MAX,
        };
        let op = TransferOp::Extend {
            until: Timestamp(until(&mut rng, e)),
            now: Timestamp(now(&mut rng, e)),
        };
        let batch = vec![Op::Transfer(id.clone(), op)];
        let want = memory.execute(batch.clone()).await.unwrap();
        let got = store.execute(batch.clone()).await.unwrap();
        assert_eq!(got, want, "step {step}: {}", batch[0]);
        *seen.entry(outcome(&want[0])).or_default() += 1;
    }
    println!("{seen:?}");
    for o in [
        "extended",
        "unchanged",
        "hold_expired",
        "transfer_is_not_held",
        "not_found",
    ] {
        assert!(seen.contains_key(o), "no {o}: {seen:?}");
    }

    let want = memory.transfers(None, 100).await.unwrap();
    assert_eq!(
        store.transfers(None, 100).await.unwrap(),
        want,
        "at the end"
    );
    // The due index at each expiry and just before it, short of "never" (which a stored
    // Int64 saturates at 2^63 - 1).
    let mut cutoffs: BTreeSet<u64> = [1_099, 1_100].into();
    for e in want.iter().filter_map(|r| r.hold_expires_at) {
        cutoffs.extend([e.0 - 1, e.0].into_iter().filter(|&c| c < MAX));
    }
    let due = |rs: Vec<TransferRecord>| -> BTreeSet<String> {
        rs.iter().map(|r| r.id().to_string()).collect()
    };
    for at in cutoffs {
        let want = due(memory.scan_due(Timestamp(at), 100).await.unwrap());
        let got = due(store.scan_due(Timestamp(at), 100).await.unwrap());
        assert_eq!(got, want, "due at {at}");
    }
}

fn outcome(r: &Reply) -> &'static str {
    match r {
        Reply::Transfer(_) => "extended",
        Reply::Unchanged(_) => "unchanged",
        Reply::Refused(code) => code.as_str(),
        Reply::NotFound => "not_found",
        _ => "other",
    }
}
