//! A table as fjall keeps it: the compaction options of the tables that grow over the
//! whole key range, and fjall's errors as the store's.

use fjall::KeyspaceCreateOptions;
use std::sync::Arc;
use xfer_store::StoreError;

/// The options of the tables every checkpoint adds thousands of keys to, all over the key
/// range (transfer ids and accounts are random): `done`, `history`, `tombstones`. Leveled
/// compaction, as fjall's default, but with tables of 16 MiB instead of 64 and eight of
/// them in level 0 before they are merged into level 1 instead of four: each merge into
/// level 1 rewrites the part of it the new keys overlap, which with random keys is all of
/// it, so fewer, smaller merges rewrite less (`docs/benchmarks.md`).
pub(super) fn growing() -> KeyspaceCreateOptions {
    leveled(8, 10.0)
}

/// Leveled compaction with tables of 16 MiB, `l0` tables in level 0 before a merge, and
/// each level from the second on `ratio` times the size of the one before (fjall's
/// default is ten).
pub(super) fn leveled(l0: u8, ratio: f32) -> KeyspaceCreateOptions {
    let leveled = fjall::compaction::Leveled::default()
        .with_table_target_size(16 << 20)
        .with_l0_threshold(l0)
        .with_level_ratio_policy(vec![ratio]);
    KeyspaceCreateOptions::default().compaction_strategy(Arc::new(leveled))
}

pub(super) fn unavailable(what: &str) -> impl FnOnce(fjall::Error) -> StoreError + '_ {
    move |e| StoreError::Unavailable(format!("checkpoint tables: {what}: {e}"))
}

pub(super) fn corrupted(what: &str, key: &[u8], why: String) -> StoreError {
    StoreError::Corrupted(format!(
        "checkpoint table {what}, key {:?}: {why}",
        String::from_utf8_lossy(key)
    ))
}
