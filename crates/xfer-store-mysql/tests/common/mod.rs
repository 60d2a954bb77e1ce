//! Fresh databases on the test server for each test, dropped when the test ends.

#![allow(dead_code)] // each test file uses its own part

use mysql_async::prelude::Queryable;
use std::sync::atomic::{AtomicUsize, Ordering};
use xfer_store_mysql::{MysqlConfig, MysqlStore};

pub fn url() -> String {
    std::env::var("XFER_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// Fresh databases for one test run, dropped when it ends (also when it fails).
pub struct Databases {
    prefix: String,
    made: AtomicUsize,
}

impl Databases {
    pub fn new(test: &str) -> Databases {
        Databases {
            prefix: format!("t_{test}_{}", std::process::id()),
            made: AtomicUsize::new(0),
        }
    }

    pub async fn open(&self) -> MysqlStore {
        self.open_with(|_| {}).await.0
    }

    /// A store with `tune` applied to its configuration, and its database's name.
    pub async fn open_with(&self, tune: impl FnOnce(&mut MysqlConfig)) -> (MysqlStore, String) {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let mut cfg = MysqlConfig::new(url(), format!("{}_{n}", self.prefix));
        tune(&mut cfg);
        match MysqlStore::open(&cfg).await {
            Ok(s) => (s, cfg.database),
            Err(e) => panic!("{e} (url {}; run scripts/services to start MariaDB)", url()),
        }
    }
}

impl Drop for Databases {
    fn drop(&mut self) {
        let n = self.made.load(Ordering::Relaxed);
        let prefix = self.prefix.clone();
        // The test's runtime is gone or going; drop the databases from a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok(mut conn) = mysql_async::Conn::from_url(url()).await else {
                    return;
                };
                for i in 0..n {
                    let _ = conn
                        .query_drop(format!("DROP DATABASE IF EXISTS `{prefix}_{i}`"))
                        .await;
                }
                let _ = conn.disconnect().await;
            })
        })
        .join();
    }
}

/// A record inserted with refund links keeps them, and links are summed exactly near
/// `i64::MAX` (the conformance suite's amounts are small, and it inserts no links).
pub async fn refund_links_are_kept_and_summed_exactly(s: &dyn xfer_store::Store) {
    use std::sync::Arc;
    use xfer_core::amount::AMOUNT_MAX;
    use xfer_core::{
        AccountId, Amount, AssetCode, Code, Posting, RefundLink, Timestamp, TransferId,
        TransferKind, TransferRecord, TransferSpec, TransferState,
    };
    use xfer_store::{Op, Reply, TransferOp};
    let tid = |s: &str| TransferId::new(s).expect("valid id");
    let amount = |n: u64| Amount::new(n, "amount").expect("valid amount");
    let posting = |from: &str, to: &str, n: u64| Posting {
        from: AccountId::new(from).expect("valid id"),
        to: AccountId::new(to).expect("valid id"),
        asset: AssetCode::new("USD", "asset").expect("valid asset"),
        amount: amount(n),
    };
    let spec = TransferSpec {
        id: tid("big"),
        postings: vec![posting("a", "b", AMOUNT_MAX), posting("c", "d", 7)].into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 1_000,
    };
    let mut original = TransferRecord::accept(spec, Timestamp(0), 100);
    original.state = TransferState::Done;
    original.refunded_by = Some(tid("q1"));
    original.refunds = vec![RefundLink {
        refund: tid("q1"),
        amounts: vec![amount(AMOUNT_MAX - 1), amount(2)],
    }];
    let step = |op: TransferOp| async move {
        let mut replies = s
            .execute(vec![Op::Transfer(tid("big"), op)])
            .await
            .expect("a reply");
        replies.pop().expect("one reply")
    };
    let link = |refund: &str, amounts: [u64; 2]| TransferOp::LinkRefund {
        refund: tid(refund),
        replacing: Vec::new(),
        postings: vec![posting("b", "a", amounts[0]), posting("d", "c", amounts[1])],
        now: Timestamp(5_000),
    };
    let links = |r: &Reply| match r {
        Reply::Transfer(t) | Reply::Unchanged(t) => (t.refunds.clone(), t.refunded_by.clone()),
        other => panic!("a record, not {other}"),
    };
    let inserted = step(TransferOp::Insert(Arc::new(original.clone()))).await;
    assert_eq!(
        links(&inserted),
        (original.refunds.clone(), Some(tid("q1")))
    );
    assert_eq!(
        step(link("q2", [2, 1])).await,
        Reply::Refused(Code::RefundExceedsOriginal),
        "2^63 - 2 + 2 of 2^63 - 1"
    );
    let linked = step(link("q2", [1, 5])).await;
    assert!(matches!(linked, Reply::Transfer(_)), "{linked}");
    let mut expected = original.refunds.clone();
    expected.push(RefundLink {
        refund: tid("q2"),
        amounts: vec![amount(1), amount(5)],
    });
    assert_eq!(
        links(&step(TransferOp::Get).await),
        (expected, Some(tid("q2")))
    );
    assert_eq!(
        step(link("q3", [1, 1])).await,
        Reply::Refused(Code::OriginalAlreadyRefunded)
    );
}
