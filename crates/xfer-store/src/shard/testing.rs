//! What the shard's unit tests share: an account created, a transfer's spec.

use crate::op::{AccountOp, Op};
use crate::shard::apply::MemoryShard;
use xfer_core::{AccountId, AssetCode, LowerBound, Timestamp, TransferId};

/// Creates account `id`, in USD and unbounded, at 1 ms.
pub(super) fn create(shard: &mut MemoryShard, id: &str) -> AccountId {
    let id = AccountId::new(id).unwrap();
    let op = AccountOp::Create {
        asset: AssetCode::new("USD", "asset").unwrap(),
        lower_bound: LowerBound::Unbounded,
    };
    shard.apply(&Op::Account(id.clone(), op), Timestamp(1));
    id
}

/// A one-posting USD transfer of `amount` from `from` to `to`, due in a second.
pub(super) fn spec(
    id: TransferId,
    from: &AccountId,
    to: &AccountId,
    amount: u64,
) -> xfer_core::TransferSpec {
    xfer_core::TransferSpec {
        id,
        postings: vec![xfer_core::Posting {
            from: from.clone(),
            to: to.clone(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: xfer_core::Amount::new(amount, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: xfer_core::TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 1_000,
    }
}
