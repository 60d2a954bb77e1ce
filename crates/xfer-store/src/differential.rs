//! The differential check every database backend runs: random account steps, with amounts
//! and bounds drawn around 2^53 (where a double stops being exact) and 2^63 (where an i64
//! overflows), through the Memory store (the reference: Rust integers) and the backend,
//! requiring the same reply to every step and the same accounts at the end. A store that
//! does its arithmetic in another number type (Lua's doubles, SQL decimals, BSON) is held
//! to the Rust rules this way.

use crate::conformance::FUTURE;
use crate::op::{AccountOp, Op};
use crate::shard::MemoryStore;
use crate::store::Store;
use std::sync::Arc;
use xfer_core::{AccountId, AssetCode, LowerBound, Rng, SystemClock, TransferId};

/// Runs `steps` random batches of 1 to 8 account steps from `seed` on `store` (a fresh
/// shard) and on a Memory store, and panics at the first reply or account that differs.
pub async fn same_as_memory<S: Store + ?Sized>(store: &S, seed: u64, steps: u64) {
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(seed);
    for step in 0..steps {
        let batch: Vec<Op> = (0..1 + rng.below(8)).map(|_| op(&mut rng, step)).collect();
        let want = memory.execute(batch.clone()).await.unwrap();
        let got = store.execute(batch.clone()).await.unwrap();
        for ((o, w), g) in batch.iter().zip(&want).zip(&got) {
            assert_eq!(g, w, "seed {seed} step {step}: {o}");
        }
    }
    let want = memory.accounts(None, 100).await.unwrap();
    let got = store.accounts(None, 100).await.unwrap();
    assert_eq!(got, want, "seed {seed}: the accounts at the end");
    assert!(
        want.iter().any(|a| a.balance.unsigned_abs() > 1 << 53),
        "seed {seed}: the run reached balances past 2^53"
    );
}

fn amount(rng: &mut Rng) -> u64 {
    let max = i64::MAX as u64;
    match rng.below(6) {
        0 => rng.below(1_000),
        1 => (1u64 << 53) - 2 + rng.below(5),
        2 => (1u64 << 62) + rng.below(1_000),
        3 => max - rng.below(3),
        4 => rng.below(max),
        _ => 9_999_999 + rng.below(3), // limb boundaries of the Lua arithmetic
    }
}

fn bound(rng: &mut Rng) -> LowerBound {
    match rng.below(5) {
        0 => LowerBound::Unbounded,
        1 => LowerBound::Bounded(0),
        2 => LowerBound::Bounded(-(amount(rng) as i64)),
        3 => LowerBound::Bounded(i64::MIN + rng.below(3) as i64),
        _ => LowerBound::Bounded(rng.below(100) as i64),
    }
}

fn op(rng: &mut Rng, step: u64) -> Op {
    let account = AccountId::new(&format!("a{}", rng.below(4))).unwrap();
    let usd = AssetCode::new("USD", "asset").unwrap();
    let transfer = TransferId::new(&format!("t{}", rng.below(step / 2 + 1))).unwrap();
    let op = match rng.below(10) {
        0 => AccountOp::Create {
            asset: usd,
            lower_bound: bound(rng),
        },
        1..=4 => {
            let (debit, credit) = match rng.below(3) {
                0 => (amount(rng), 0),
                1 => (0, amount(rng)),
                _ => (amount(rng), amount(rng)),
            };
            AccountOp::Prepare {
                transfer,
                asset: usd,
                debit,
                credit,
                deadline: FUTURE,
                horizon: FUTURE,
            }
        }
        5 | 6 => AccountOp::Post {
            transfer,
            asset: usd,
        },
        7 => AccountOp::Release {
            transfer,
            asset: usd,
            horizon: FUTURE,
        },
        8 => AccountOp::SetLowerBound {
            lower_bound: bound(rng),
        },
        _ => AccountOp::Get,
    };
    Op::Account(account, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_steps_reach_balances_past_2_pow_53() {
        let store = MemoryStore::new(Arc::new(SystemClock));
        same_as_memory(&store, 1, 400).await;
    }
}
