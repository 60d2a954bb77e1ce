//! [`Inner`]: one store behind the `Arc` that its handle, its shards and its background
//! threads hold — its shared parts, its committer and its checkpointer.

use crate::checkpointer::Checkpointer;
use crate::committer::Committer;
use crate::fs::Fs;
use crate::shared::Shared;

/// See the module docs.
pub(crate) struct Inner<F: Fs> {
    pub(crate) shared: Shared<F>,
    pub(crate) committer: Committer,
    pub(crate) checkpointer: Checkpointer,
}
