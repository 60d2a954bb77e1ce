//! [`Inner`]: one store behind the `Arc` that its handle, its shards and its background
//! threads hold — its shared parts, its committer and its checkpointer.

use crate::checkpointer::Checkpointer;
use crate::committer::{sync_here, Committer};
use crate::fs::Fs;
use crate::shared::Shared;
use xfer_store::{BoxFuture, SharedLog, StoreError};

/// See the module docs.
pub(crate) struct Inner<F: Fs> {
    pub(crate) shared: Shared<F>,
    pub(crate) committer: Committer,
    pub(crate) checkpointer: Checkpointer,
}

/// Every shard of one data directory appends to its one log; the committer makes it durable.
impl<F: Fs> SharedLog for Inner<F> {
    fn wait_durable(&self, lsn: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.committer.durable(&self.shared, lsn))
    }

    fn is_durable(&self, lsn: u64) -> bool {
        lsn < self.shared.log.durable_lsn()
    }

    fn sync_durable(&self, lsn: u64) -> Option<Result<(), StoreError>> {
        Some(sync_here(&self.shared, lsn))
    }
}
