//! The contention check every database backend runs: many batches at once on one shard,
//! all touching one hot account and one issuer in shuffled orders, must neither deadlock
//! nor lose an update. Each task runs rounds of (a batch of prepares with one-phase
//! commits among them, a batch of posts); at the end the issuer has paid exactly what the
//! others received and nothing is left open. A one-phase step locks its accounts from
//! among the transfers of its batch, which is what a store's lock order must allow for.

use crate::conformance::FUTURE;
use crate::op::{AccountOp, Op, PostOutcome, PrepareOutcome, Reply, TransferOp};
use crate::store::{Store, StoreError};
use futures_util::future::join_all;
use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, IntentState, LowerBound, OwnerId, Posting, Rng, Timestamp,
    TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};

const PER_BATCH: u64 = 8;
const OTHERS: u64 = 20;

fn acct(s: &str) -> AccountId {
    AccountId::new(s).expect("a valid id")
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").expect("a valid asset")
}

/// Runs `tasks` concurrent movers of `rounds` rounds each on `store` (a fresh shard whose
/// pool holds `tasks` connections) and checks the totals; answers how many transfers
/// moved. An error a
/// mover meets (a deadlock reported by the database, a lost connection) fails it.
pub async fn hot_account(
    store: Arc<dyn Store>,
    tasks: u64,
    rounds: u64,
) -> Result<u64, StoreError> {
    let mut creates = vec![Op::Account(
        acct("issuer"),
        AccountOp::Create {
            asset: usd(),
            lower_bound: LowerBound::Unbounded,
        },
    )];
    for name in std::iter::once("hot".to_string()).chain((0..OTHERS).map(|i| format!("a{i}"))) {
        creates.push(Op::Account(
            acct(&name),
            AccountOp::Create {
                asset: usd(),
                lower_bound: LowerBound::default(),
            },
        ));
    }
    store.execute(creates).await?;
    let mut total = 0;
    for moved in join_all((0..tasks).map(|t| mover(Arc::clone(&store), t, rounds))).await {
        total += moved?;
    }

    let accounts = store.accounts(None, 1000).await?;
    let issuer = accounts
        .iter()
        .find(|a| a.id.as_str() == "issuer")
        .expect("the issuer");
    assert_eq!(
        issuer.balance,
        -(total as i64),
        "the issuer paid everything"
    );
    let received: i64 = accounts
        .iter()
        .filter(|a| a.id.as_str() != "issuer")
        .map(|a| a.balance)
        .sum();
    assert_eq!(received, total as i64, "every credit arrived once");
    for a in &accounts {
        assert_eq!(
            (a.reserved, a.incoming),
            (0, 0),
            "{}: nothing left open",
            a.id
        );
        assert!(a.intents.values().all(|i| i.state == IntentState::Posted));
        a.check_sums().expect("the sums hold");
    }
    // Only the two-phase ones leave intents.
    let transfers = tasks * rounds * PER_BATCH;
    assert_eq!(issuer.intents.len() as u64, transfers);
    Ok(transfers)
}

/// A one-phase step of `amount` from the issuer to `to`, claimed by its submitter.
fn one_phase(id: &str, to: AccountId, amount: u64) -> Op {
    let spec = TransferSpec {
        id: TransferId::new(id).expect("a valid id"),
        postings: vec![Posting {
            from: acct("issuer"),
            to,
            asset: usd(),
            amount: Amount::new(amount, "amount").expect("a valid amount"),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 60_000,
    };
    let mut r = TransferRecord::accept_claimed(
        spec,
        Timestamp(1),
        OwnerId::new("mover").expect("a valid owner"),
        FUTURE,
    );
    r.deadline = FUTURE;
    Op::Transfer(r.id().clone(), TransferOp::OnePhase(Arc::new(r)))
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// One task: rounds of (a batch of prepares, a batch of posts), each shuffled. Answers the
/// total it moved.
async fn mover(store: Arc<dyn Store>, task: u64, rounds: u64) -> Result<u64, StoreError> {
    let mut rng = Rng::new(task + 1);
    let mut moved = 0;
    for round in 0..rounds {
        let mut prepares = Vec::new();
        let mut posts = Vec::new();
        for k in 0..PER_BATCH {
            let t = TransferId::new(&format!("t{task}-{round}-{k}")).unwrap();
            let to = if rng.chance(500_000) {
                acct("hot")
            } else {
                acct(&format!("a{}", rng.below(OTHERS)))
            };
            let amount = rng.range(1, 100);
            moved += amount;
            for (account, debit, credit) in [(acct("issuer"), amount, 0), (to, 0, amount)] {
                prepares.push(Op::Account(
                    account.clone(),
                    AccountOp::Prepare {
                        transfer: t.clone(),
                        asset: usd(),
                        debit,
                        credit,
                        deadline: FUTURE,
                        horizon: FUTURE,
                    },
                ));
                posts.push(Op::Account(
                    account,
                    AccountOp::Post {
                        transfer: t.clone(),
                        asset: usd(),
                    },
                ));
            }
        }
        for k in 0..PER_BATCH / 2 {
            let to = if rng.chance(500_000) {
                acct("hot")
            } else {
                acct(&format!("a{}", rng.below(OTHERS)))
            };
            let amount = rng.range(1, 100);
            prepares.push(one_phase(&format!("p{task}-{round}-{k}"), to, amount));
        }
        shuffle(&mut rng, &mut prepares);
        shuffle(&mut rng, &mut posts);
        let sent = prepares.clone();
        for (op, r) in sent.iter().zip(store.execute(prepares).await?) {
            match (op, r) {
                (Op::Transfer(_, TransferOp::OnePhase(rec)), Reply::Transfer(t)) => {
                    // Committed, or inserted (a store may answer as the insert).
                    if t.state == TransferState::Done {
                        moved += rec.spec.postings[0].amount.units();
                    } else {
                        assert_eq!(t.state, TransferState::Pending, "{op}");
                    }
                }
                (op, r) => assert_eq!(r, Reply::Prepare(PrepareOutcome::Prepared), "{op}"),
            }
        }
        for r in store.execute(posts).await? {
            assert_eq!(r, Reply::Post(PostOutcome::Posted));
        }
    }
    Ok(moved)
}
