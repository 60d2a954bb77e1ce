//! What the crate's unit tests share: a transfer to write and a store of one shard.

use crate::config::EmbeddedConfig;
use crate::embedded::Embedded;
use crate::shard::EmbeddedShard;
use std::path::Path;
use std::sync::Arc;

/// A transfer of one unit of USD from account `a` to account `b`, with id `id`.
pub(crate) fn one_usd_a_to_b(id: &str) -> xfer_core::TransferSpec {
    use xfer_core::{AccountId, Amount, AssetCode, Posting, TransferId, TransferKind};
    xfer_core::TransferSpec {
        id: TransferId::new(id).unwrap(),
        postings: vec![Posting {
            from: AccountId::new("a").unwrap(),
            to: AccountId::new("b").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: Amount::new(1, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 10_000,
    }
}

/// A store of one shard in `dir`, checkpointed only when a test asks, and its shard.
pub(crate) fn one_shard(dir: &Path) -> (Embedded, Arc<EmbeddedShard>) {
    let cfg = EmbeddedConfig {
        shards: 1,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    };
    let clock = Arc::new(xfer_core::SystemClock);
    let (store, _) = Embedded::open(dir, cfg, clock).unwrap();
    let shard = store.shards().remove(0);
    (store, shard)
}
