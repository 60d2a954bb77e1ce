//! Refund links read the original's amounts from its text and sum them in Decimal128 in the
//! update pipeline: random links (partial, whole, too much, repeats, replacing others, past
//! the limit) on originals whose amounts sit around 2^53 and 2^63, each held to the Memory
//! store's reply.

mod common;
use common::Databases;
use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, Posting, Rng, SystemClock, Timestamp, TransferId, TransferKind,
    TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{MemoryStore, Op, Reply, Store, TransferOp};

const MAX: u64 = i64::MAX as u64;

fn amount(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => (1 << 53) - 2 + rng.below(5),
        1 => MAX - rng.below(3),
        2 => (1 << 63) - (1 << 11) + rng.below(3),
        3 => (1 << 62) + rng.below(1_000),
        _ => 1 + rng.below(MAX),
    }
}

fn original(id: &str, rng: &mut Rng) -> TransferRecord {
    let posting = |from: &str, to: &str, n| Posting {
        from: AccountId::new(from).unwrap(),
        to: AccountId::new(to).unwrap(),
        asset: AssetCode::new("USD", "asset").unwrap(),
        amount: Amount::new(n, "amount").unwrap(),
    };
    let postings: Vec<Posting> = (0..1 + rng.below(3))
        .map(|i| posting(&format!("a{i}"), &format!("b{i}"), amount(rng)))
        .collect();
    let spec = TransferSpec {
        id: TransferId::new(id).unwrap(),
        postings: postings.into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 1_000,
    };
    let mut r = TransferRecord::accept(spec, Timestamp(1_000), 100);
    r.state = TransferState::Done;
    r.accepted()
}

/// A refund's amount of `full`: often what the links before left, or one more, or all.
fn part(rng: &mut Rng, full: u64, left: u64) -> u64 {
    let n = match rng.below(6) {
        0 => left,
        1 => left.saturating_add(1),
        2 => full,
        3 => 1 + rng.below(full),
        4 => 1 + rng.below(left.max(1)),
        _ => left / (1 + rng.below(4)),
    };
    n.clamp(1, MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_links_match_the_memory_store() {
    let databases = Databases::new("refunds");
    let store = databases.open().await;
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(7);
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for o in 0..12 {
        let id = TransferId::new(&format!("o{o}")).unwrap();
        let orig = original(id.as_str(), &mut rng);
        let insert = vec![Op::Transfer(
            id.clone(),
            TransferOp::Insert(Arc::new(orig.clone())),
        )];
        let want = memory.execute(insert.clone()).await.unwrap();
        assert_eq!(store.execute(insert).await.unwrap(), want, "insert {id}");
        let mut left: Vec<u64> = orig
            .spec
            .postings
            .iter()
            .map(|p| p.amount.units())
            .collect();
        for step in 0..60u64 {
            let full = orig.spec.postings.iter().map(|p| p.amount.units());
            // Every other original mostly takes small refunds, which reach the limit.
            let tiny = o % 2 == 1 && rng.below(6) > 0;
            let amounts: Vec<u64> = full
                .zip(&left)
                .map(|(f, l)| match tiny {
                    true => 1 + rng.below(3),
                    false => part(&mut rng, f, *l),
                })
                .collect();
            let mut postings = orig.spec.reversed_postings();
            for (p, a) in postings.iter_mut().zip(&amounts) {
                p.amount = Amount::new(*a, "amount").unwrap();
            }
            let (pool, replaced) = if o % 2 == 1 {
                (40, rng.below(8) / 7)
            } else {
                (24, rng.below(4))
            };
            let replacing = (0..replaced)
                .map(|_| TransferId::new(&format!("r{}", rng.below(pool))).unwrap())
                .collect();
            let op = TransferOp::LinkRefund {
                refund: TransferId::new(&format!("r{}", rng.below(pool))).unwrap(),
                replacing,
                postings,
                now: Timestamp(2_000 + step),
            };
            let batch = vec![Op::Transfer(id.clone(), op)];
            let want = memory.execute(batch.clone()).await.unwrap();
            let got = store.execute(batch.clone()).await.unwrap();
            assert_eq!(got, want, "{id} step {step}: {}", batch[0]);
            *seen.entry(outcome(&want[0])).or_default() += 1;
            if let Reply::Transfer(r) = &want[0] {
                let taken = r.refunded_units();
                left = orig
                    .spec
                    .postings
                    .iter()
                    .zip(taken)
                    .map(|(p, t)| p.amount.units() - t)
                    .collect();
            }
        }
        let get = vec![Op::Transfer(id.clone(), TransferOp::Get)];
        let want = memory.execute(get.clone()).await.unwrap();
        assert_eq!(store.execute(get).await.unwrap(), want, "{id} at the end");
    }
    println!("{seen:?}");
    for o in [
        "linked",
        "repeat",
        "refund_must_reverse_original",
        "original_already_refunded",
        "refund_exceeds_original",
        "too_many_refunds",
    ] {
        assert!(seen.contains_key(o), "no {o}: {seen:?}");
    }
}

fn outcome(r: &Reply) -> &'static str {
    match r {
        Reply::Transfer(_) => "linked",
        Reply::Unchanged(_) => "repeat",
        Reply::Refused(code) => code.as_str(),
        _ => "other",
    }
}
