//! The store conformance suite (the same one the Memory store passes) on the embedded
//! store, four ways: as it runs; checkpointing after every call (so finished transfers and
//! history are read back from the tables); and closing or crashing (dropping without a
//! checkpoint) and reopening after every call (so every step is recovered, from the tables
//! or by replaying the log).

use std::sync::{Arc, Mutex};
use xfer_core::{Account, AccountId, Asset, SystemClock, Timestamp, TransferId, TransferRecord};
use xfer_store::{
    BoxFuture, EventPage, FeedPosition, HistoryPage, Metadata, Op, Reply, Store, StoreError,
};
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
        // The shard is taken when the call is first polled, not when it is made: of two
        // calls joined, the second must reach the store the first one's cycle reopened.
        Box::pin(async move {
            let r = f(self.shard()).await;
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
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        let asset = asset.clone();
        self.call(move |s| Box::pin(async move { s.declare_asset(&asset).await }))
    }
    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        self.call(move |s| Box::pin(async move { s.assets().await }))
    }
    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (account, metadata) = (account.clone(), metadata.clone());
        self.call(move |s| {
            Box::pin(async move { s.set_account_metadata(&account, &metadata).await })
        })
    }
    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let accounts = accounts.to_vec();
        self.call(move |s| Box::pin(async move { s.account_metadata(&accounts).await }))
    }
    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let (key, value, after) = (key.to_string(), value.to_string(), after.cloned());
        self.call(move |s| {
            Box::pin(async move {
                s.accounts_with_metadata(&key, &value, after.as_ref(), limit)
                    .await
            })
        })
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
    fn events(
        &self,
        after: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        self.call(move |s| Box::pin(async move { s.events(after, limit).await }))
    }
    fn events_before(
        &self,
        before: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        self.call(move |s| Box::pin(async move { s.events_before(before, limit).await }))
    }
    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.call(move |s| Box::pin(async move { s.trim_events(before, limit).await }))
    }
}

#[tokio::test]
async fn conformance_as_it_runs() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::Plain)).await;
    xfer_store::conformance::run_events(|| async { Cycling::new(Mode::Plain) }).await;
    xfer_store::conformance::run_timelines(|| async { Cycling::new(Mode::Plain) }).await;
    xfer_store::conformance::run_one_phase_committing(|| async { Cycling::new(Mode::Plain) }).await;
}

#[tokio::test]
async fn conformance_checkpointing_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CheckpointEachCall)).await;
    xfer_store::conformance::run_events(|| async { Cycling::new(Mode::CheckpointEachCall) }).await;
    xfer_store::conformance::run_timelines(|| async { Cycling::new(Mode::CheckpointEachCall) })
        .await;
    xfer_store::conformance::run_one_phase_committing(|| async {
        Cycling::new(Mode::CheckpointEachCall)
    })
    .await;
}

#[tokio::test]
async fn conformance_closing_and_reopening_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CloseEachCall)).await;
    xfer_store::conformance::run_events(|| async { Cycling::new(Mode::CloseEachCall) }).await;
    xfer_store::conformance::run_timelines(|| async { Cycling::new(Mode::CloseEachCall) }).await;
    xfer_store::conformance::run_one_phase_committing(|| async {
        Cycling::new(Mode::CloseEachCall)
    })
    .await;
}

#[tokio::test]
async fn conformance_crashing_and_recovering_after_every_call() {
    xfer_store::conformance::run_all(|| Cycling::new(Mode::CrashEachCall)).await;
    xfer_store::conformance::run_events(|| async { Cycling::new(Mode::CrashEachCall) }).await;
    xfer_store::conformance::run_timelines(|| async { Cycling::new(Mode::CrashEachCall) }).await;
    xfer_store::conformance::run_one_phase_committing(|| async {
        Cycling::new(Mode::CrashEachCall)
    })
    .await;
}

/// A prune that takes several holds of the shard's lock logs each slice: after a crash, the
/// replay drops exactly what the call dropped (a slice missing from the log would leave
/// tombstones that a second prune then finds).
#[tokio::test]
async fn a_prune_of_many_slices_is_replayed_whole_after_a_crash() {
    use xfer_core::AssetCode;
    use xfer_store::AccountOp;
    let dir = tempfile::tempdir().expect("temp dir");
    let (e, shard) = open(dir.path());
    let usd = AssetCode::new("USD", "asset").unwrap();
    // 300 released marks on missing accounts: placeholders whose horizon has passed.
    let ops: Vec<Op> = (0..300)
        .map(|i| {
            Op::Account(
                AccountId::new(&format!("ghost{i}")).unwrap(),
                AccountOp::Release {
                    transfer: TransferId::new(&format!("t{i}")).unwrap(),
                    asset: usd.clone(),
                    horizon: Timestamp(1),
                },
            )
        })
        .collect();
    shard.execute(ops).await.expect("released");
    assert_eq!(shard.prune(1_000).await.expect("prune"), 300);
    drop(shard);
    drop(e); // a crash: no checkpoint, everything replays from the log
    let (_e, shard) = open(dir.path());
    assert_eq!(
        shard.prune(1_000).await.expect("prune"),
        0,
        "every slice was replayed"
    );
}
