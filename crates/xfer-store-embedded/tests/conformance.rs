//! The store conformance suite (the same one the Memory store passes) on the embedded
//! store, four ways: as it runs; checkpointing after every call (so finished transfers and
//! history are read back from the tables); and closing or crashing (dropping without a
//! checkpoint) and reopening after every call (so every step is recovered, from the tables
//! or by replaying the log).

use std::sync::{Arc, Mutex};
use xfer_core::{Account, AccountId, SystemClock, Timestamp, TransferId, TransferRecord};
use xfer_store::{BoxFuture, HistoryPage, Op, Reply, Store, StoreError};
use xfer_store_embedded::{Embedded, EmbeddedConfig, EmbeddedShard};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    CheckpointEachCall,
    CloseEachCall,
    CrashEachCall,
}

struct Cycling {
    mode: Mode,
    dir: tempfile::TempDir,
    open: Mutex<Option<(Embedded, Arc<EmbeddedShard>)>>,
}

fn open(dir: &std::path::Path) -> (Embedded, Arc<EmbeddedShard>) {
    let cfg = EmbeddedConfig {
        shards: 1,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    };
    let (e, _) = Embedded::open(dir, cfg, Arc::new(SystemClock)).expect("open");
    let shard = e.shards().remove(0);
    (e, shard)
}

impl Cycling {
    fn new(mode: Mode) -> Cycling {
        let dir = tempfile::tempdir().expect("temp dir");
        let open = Mutex::new(Some(open(dir.path())));
        Cycling { mode, dir, open }
    }

    fn shard(&self) -> Arc<EmbeddedShard> {
        self.open.lock().unwrap().as_ref().unwrap().1.clone()
    }

    /// After a call: what the mode asks for.
    fn cycle(&self) {
        let mut open = self.open.lock().unwrap();
        match self.mode {
            Mode::Plain => {}
            Mode::CheckpointEachCall => open.as_ref().unwrap().0.checkpoint().unwrap(),
            Mode::CloseEachCall | Mode::CrashEachCall => {
                let (e, shard) = open.take().unwrap();
                drop(shard);
                if self.mode == Mode::CloseEachCall {
                    e.close().unwrap();
                } else {
                    drop(e);
                }
                *open = Some(self::open(self.dir.path()));
            }
        }
    }

    fn call<'a, T: Send + 'a>(
        &'a self,
        f: impl FnOnce(Arc<EmbeddedShard>) -> BoxFuture<'static, Result<T, StoreError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let shard = self.shard();
        let fut = f(shard);
        Box::pin(async move {
            let r = fut.await;
            self.cycle();
            r
        })
    }
}

impl Store for Cycling {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        self.call(move |s| Box::pin(async move { s.execute(ops).await }))
    }
    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        self.call(move |s| Box::pin(async move { s.scan_due(now, limit).await }))
    }
    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        let account = account.clone();
        self.call(move |s| Box::pin(async move { s.history(&account, before, limit).await }))
    }
    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.call(move |s| Box::pin(async move { s.prune(limit).await }))
    }
    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        let after = after.cloned();
        self.call(move |s| Box::pin(async move { s.accounts(after.as_ref(), limit).await }))
    }
    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        let after = after.cloned();
        self.call(move |s| Box::pin(async move { s.transfers(after.as_ref(), limit).await }))
    }
}

#[tokio::test]
async fn conformance_as_it_runs() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::Plain)).await;
}

#[tokio::test]
async fn conformance_checkpointing_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CheckpointEachCall)).await;
}

#[tokio::test]
async fn conformance_closing_and_reopening_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CloseEachCall)).await;
}

#[tokio::test]
async fn conformance_crashing_and_recovering_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CrashEachCall)).await;
}
