//! The tokio executor and sweeper against Memory stores on several shards, with a manual
//! clock: every retry's backoff moves the clock instead of waiting, so these tests take no
//! real time and replay exactly.

use futures_util::FutureExt;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, Amount, AssetCode, CancelReason, Clock, Code, IntentState, LowerBound,
    ManualClock, OwnerId, Posting, Rng, Timestamp, TransferId, TransferKind, TransferRecord,
    TransferSpec, TransferState,
};
use xfer_engine::{
    Cluster, Config, ExecError, Executor, Machine, ManualSleeper, Outcome, Request, Retry,
    RetryPolicy, Router, SweepConfig, Sweeper,
};
use xfer_store::{
    AccountOp, ExecuteHook, FaultPlan, Faulty, Intercept, MemoryStore, Op, Reply, Store,
    StoreError, TransferOp,
};

const SHARDS: usize = 3;
const T0: Timestamp = Timestamp(1_000_000);
const TIMEOUT_MS: u64 = 10_000;
const HOLD_TTL_MS: u64 = 60_000;
const CLOSE_WAITS_MAX: u32 = 3;

struct World {
    clock: Arc<ManualClock>,
    exec: Executor,
    sweeper: Sweeper,
}

impl World {
    fn over(clock: Arc<ManualClock>, shards: Vec<Arc<dyn Store>>, sweep: SweepConfig) -> World {
        let cfg = Config::default();
        let cluster = Arc::new(Cluster::new(shards, Router::hash(SHARDS)));
        let retry = || {
            Retry::new(
                RetryPolicy::default(),
                Arc::new(ManualSleeper(clock.clone())),
            )
        };
        let exec = Executor::new(
            cluster.clone(),
            owner("exec-1"),
            cfg,
            clock.clone(),
            retry(),
        )
        .with_close_waits_max(CLOSE_WAITS_MAX);
        let swept = Executor::new(cluster, owner("sweeper-1"), cfg, clock.clone(), retry());
        World {
            clock,
            exec,
            sweeper: Sweeper::new(swept, sweep),
        }
    }

    fn memory() -> World {
        World::memory_with(SweepConfig::default())
    }

    fn memory_with(sweep: SweepConfig) -> World {
        let clock = Arc::new(ManualClock::at(T0));
        let shards =
            (0..SHARDS).map(|_| Arc::new(MemoryStore::new(clock.clone())) as Arc<dyn Store>);
        World::over(clock.clone(), shards.collect(), sweep)
    }

    fn cluster(&self) -> &Cluster {
        self.exec.cluster()
    }

    async fn open(&self, id: &str, asset: &str, lower_bound: LowerBound) {
        let op = AccountOp::Create {
            asset: asset_code(asset),
            lower_bound,
        };
        match self.exec.execute_op(Op::Account(acct(id), op)).await {
            Ok(Reply::Account(_)) => {}
            other => panic!("create {id}: {other:?}"),
        }
    }

    async fn account(&self, id: &str) -> Account {
        match self
            .exec
            .execute_op(Op::Account(acct(id), AccountOp::Get))
            .await
        {
            Ok(Reply::Account(a)) => std::sync::Arc::unwrap_or_clone(a),
            other => panic!("get {id}: {other:?}"),
        }
    }

    async fn transfer(&self, id: &str) -> TransferRecord {
        match self
            .exec
            .execute_op(Op::Transfer(tid(id), TransferOp::Get))
            .await
        {
            Ok(Reply::Unchanged(r)) => (*r).clone(),
            other => panic!("get transfer {id}: {other:?}"),
        }
    }

    /// issuer (unbounded), alice with 100, bob with 0; all USD.
    async fn bank(&self) {
        self.open("issuer", "USD", LowerBound::Unbounded).await;
        self.open("alice", "USD", LowerBound::default()).await;
        self.open("bob", "USD", LowerBound::default()).await;
        let r = self.exec.submit(spec(
            "fund-alice",
            vec![posting("issuer", "alice", "USD", 100)],
        ));
        assert_eq!(finished(r.await).state, TransferState::Done);
    }

    /// Checks each listed balance, and that nothing is reserved or incoming there.
    /// The bank, and `h1`: alice holding 30 USD for bob.
    async fn bank_and_hold(&self) {
        self.bank().await;
        let held = self
            .exec
            .submit(hold("h1", vec![posting("alice", "bob", "USD", 30)]))
            .await;
        assert!(matches!(held, Ok(Outcome::Held(_))), "{held:?}");
    }

    async fn assert_settled(&self, balances: &[(&str, i64)]) {
        for (id, balance) in balances {
            let a = self.account(id).await;
            assert_eq!(
                (a.balance, a.reserved, a.incoming),
                (*balance, 0, 0),
                "{id}"
            );
        }
    }
}

fn acct(s: &str) -> AccountId {
    AccountId::new(s).expect("valid account id")
}
fn tid(s: &str) -> TransferId {
    TransferId::new(s).expect("valid transfer id")
}
fn owner(s: &str) -> OwnerId {
    OwnerId::new(s).expect("valid owner id")
}
fn asset_code(s: &str) -> AssetCode {
    AssetCode::new(s, "asset").expect("valid asset")
}

fn posting(from: &str, to: &str, asset: &str, amount: u64) -> Posting {
    let amount = Amount::new(amount, "amount").expect("valid amount");
    Posting {
        from: acct(from),
        to: acct(to),
        asset: asset_code(asset),
        amount,
    }
}

fn spec(id: &str, postings: Vec<Posting>) -> TransferSpec {
    TransferSpec {
        id: tid(id),
        postings: postings.into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: TIMEOUT_MS,
    }
}

fn hold(id: &str, postings: Vec<Posting>) -> TransferSpec {
    TransferSpec {
        kind: TransferKind::Hold {
            ttl_ms: HOLD_TTL_MS,
        },
        ..spec(id, postings)
    }
}

fn finished(r: Result<Outcome, ExecError>) -> TransferRecord {
    match r {
        Ok(Outcome::Finished(rec)) => rec,
        other => panic!("expected a finished transfer, got {other:?}"),
    }
}

/// Plays an executor that runs `rounds` rounds of a machine by hand and then vanishes.
async fn run_then_vanish(
    w: &World,
    (mut m, mut reqs): (Machine, Vec<Request>),
    rounds: usize,
) -> Machine {
    for _ in 0..rounds {
        let sent = w.cluster().execute(&reqs).await.expect("routable");
        let mut next = Vec::new();
        for (req, result) in reqs.iter().zip(sent) {
            let reply = result.expect("the memory store always answers");
            next.extend(m.on_reply(req.tag, reply, w.clock.now()));
        }
        reqs = next;
    }
    m
}

#[tokio::test(flavor = "current_thread")]
async fn plain_transfer_is_done_and_moves_balances() {
    let w = World::memory();
    w.bank().await;
    let rec = finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 30)]))
            .await,
    );
    assert_eq!((rec.state, rec.reason), (TransferState::Done, None));
    w.assert_settled(&[("issuer", -100), ("alice", 70), ("bob", 30)])
        .await;
}

#[tokio::test(flavor = "current_thread")]
async fn insufficient_funds_cancels_with_the_reason_and_moves_nothing() {
    let w = World::memory();
    w.bank().await;
    let rec = finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 150)]))
            .await,
    );
    assert_eq!(rec.state, TransferState::Canceled);
    let reason = CancelReason::Refused {
        account: acct("alice"),
        code: Code::ExceedsAvailable,
    };
    assert_eq!(rec.reason, Some(reason));
    w.assert_settled(&[("alice", 100), ("bob", 0)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn duplicate_submission_returns_the_same_transfer_and_applies_once() {
    let w = World::memory();
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let first = finished(w.exec.submit(s.clone()).await);
    w.clock.advance_ms(1_000);
    let again = finished(w.exec.submit(s).await);
    assert_eq!(first, again, "the same record, not a second run");
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;

    // Twice in one batch: one machine runs it; the other finds it claimed (or, both being
    // the same owner, follows it to the end). Either way it applies once.
    let s = spec("t2", vec![posting("alice", "bob", "USD", 5)]);
    let results = w.exec.submit_many(vec![s.clone(), s]).await;
    assert!(matches!(&results[0], Ok(Outcome::Finished(r)) if r.state == TransferState::Done));
    let second_ok = match &results[1] {
        Ok(Outcome::Left(_)) => true,
        Ok(Outcome::Finished(r)) => r.state == TransferState::Done,
        _ => false,
    };
    assert!(second_ok, "{:?}", results[1]);
    w.assert_settled(&[("alice", 65), ("bob", 35)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn same_id_with_a_different_body_is_rejected() {
    let w = World::memory();
    w.bank().await;
    finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 30)]))
            .await,
    );
    let err = w
        .exec
        .submit(spec("t1", vec![posting("alice", "bob", "USD", 31)]))
        .await;
    let err = err.expect_err("a different body must be refused");
    assert_eq!(err.code(), Some(Code::IdExistsWithDifferentBody), "{err}");
    assert!(!err.is_retryable());
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn invalid_spec_is_rejected_before_any_store_call() {
    let w = World::memory();
    let err = w
        .exec
        .submit(spec("t1", vec![]))
        .await
        .expect_err("no postings");
    assert_eq!(err.code(), Some(Code::PostingsMustNotBeEmpty));
    assert!(matches!(
        w.exec
            .execute_op(Op::Transfer(tid("t1"), TransferOp::Get))
            .await,
        Ok(Reply::NotFound)
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn hold_then_capture_is_done() {
    let w = World::memory();
    w.bank().await;
    match w
        .exec
        .submit(hold("h1", vec![posting("alice", "bob", "USD", 30)]))
        .await
    {
        Ok(Outcome::Held(rec)) => assert_eq!(rec.state, TransferState::Held),
        other => panic!("expected held: {other:?}"),
    }
    let (alice, bob) = (w.account("alice").await, w.account("bob").await);
    assert_eq!((alice.balance, alice.reserved), (100, 30));
    assert_eq!((bob.balance, bob.incoming), (0, 30));
    let rec = finished(w.exec.capture(tid("h1")).await);
    assert_eq!(rec.state, TransferState::Done);
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_hold_captured_in_part_moves_the_part_and_releases_the_rest() {
    let w = World::memory();
    w.bank().await;
    let units = |v: &[u64]| -> Vec<xfer_core::Amount> {
        v.iter()
            .map(|n| xfer_core::Amount::new(*n, "amount").unwrap())
            .collect()
    };
    let two = vec![
        posting("alice", "bob", "USD", 30),
        posting("alice", "bob", "USD", 20),
    ];
    for id in ["h1", "h2"] {
        let held = w.exec.submit(hold(id, two.clone())).await;
        assert!(matches!(held, Ok(Outcome::Held(_))), "{id}: {held:?}");
    }
    let code = |r: Result<Outcome, ExecError>| match r.expect_err("refused") {
        ExecError::Rejected(r) => (Some(r.code), Some(r.field)),
        other => (None, Some(other.to_string())),
    };
    // Refused before anything is written: too much, or not one amount per posting.
    assert_eq!(
        code(w.exec.capture_part(tid("h1"), units(&[30, 21])).await),
        (Some(Code::CaptureExceedsHold), Some("amounts[1]".into()))
    );
    assert_eq!(
        code(w.exec.capture_part(tid("h1"), units(&[5])).await),
        (Some(Code::CaptureMustMatchHold), Some("amounts".into()))
    );
    assert_eq!(w.transfer("h1").await.state, TransferState::Held);
    let rec = finished(w.exec.capture_part(tid("h1"), units(&[12, 20])).await);
    assert_eq!(rec.state, TransferState::Done);
    assert_eq!(rec.captured, units(&[12, 20]));
    // A repeat answers the same; other amounts, a whole capture or a void are refused.
    assert_eq!(
        finished(w.exec.capture_part(tid("h1"), units(&[12, 20])).await),
        rec
    );
    assert_eq!(
        code(w.exec.capture_part(tid("h1"), units(&[11, 20])).await).0,
        Some(Code::HoldAlreadyCaptured)
    );
    assert_eq!(
        code(w.exec.capture(tid("h1")).await).0,
        Some(Code::HoldAlreadyCaptured)
    );
    assert_eq!(
        code(w.exec.void(tid("h1")).await).0,
        Some(Code::HoldAlreadyCaptured)
    );
    // Amounts that take every posting whole are a whole capture.
    let whole = finished(w.exec.capture_part(tid("h2"), units(&[30, 20])).await);
    assert!(whole.captured.is_empty());
    assert_eq!(
        finished(w.exec.capture(tid("h2")).await).state,
        TransferState::Done
    );
    // A transfer is no hold.
    finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 1)]))
            .await,
    );
    assert_eq!(
        code(w.exec.capture_part(tid("t1"), units(&[1])).await).0,
        Some(Code::TransferIsNotHeld)
    );
    assert_eq!(
        code(w.exec.capture_part(tid("nope"), units(&[1])).await).0,
        Some(Code::TransferNotFound)
    );
    w.assert_settled(&[("alice", 100 - 32 - 50 - 1), ("bob", 32 + 50 + 1)])
        .await;
}

#[tokio::test(flavor = "current_thread")]
async fn hold_then_void_is_canceled() {
    let w = World::memory();
    w.bank_and_hold().await;
    let rec = finished(w.exec.void(tid("h1")).await);
    assert_eq!(
        (rec.state, rec.reason),
        (TransferState::Canceled, Some(CancelReason::Voided))
    );
    w.assert_settled(&[("alice", 100), ("bob", 0)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn capture_of_an_unknown_transfer_is_rejected() {
    let w = World::memory();
    let err = w
        .exec
        .capture(tid("nope"))
        .await
        .expect_err("nothing to capture");
    assert_eq!(err.code(), Some(Code::TransferNotFound));
}

#[tokio::test(flavor = "current_thread")]
async fn expired_hold_is_canceled_by_the_sweeper() {
    let w = World::memory();
    w.bank_and_hold().await;
    let report = w.sweeper.pass().await;
    assert_eq!(report.due, 0, "a hold is not due before it expires");
    assert_eq!(w.transfer("h1").await.state, TransferState::Held);

    w.clock.advance_ms(HOLD_TTL_MS);
    let err = w.exec.capture(tid("h1")).await.expect_err("expired");
    assert_eq!(err.code(), Some(Code::HoldExpired));
    let report = w.sweeper.pass().await;
    assert_eq!((report.due, report.finished), (1, 1), "{report:?}");
    let rec = w.transfer("h1").await;
    assert_eq!(
        (rec.state, rec.reason),
        (TransferState::Canceled, Some(CancelReason::Expired))
    );
    w.assert_settled(&[("alice", 100), ("bob", 0)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_settled_hold_refuses_the_other_settle_and_answers_a_repeat() {
    let w = World::memory();
    w.bank().await;
    for id in ["h1", "h2", "h3"] {
        let held = w
            .exec
            .submit(hold(id, vec![posting("alice", "bob", "USD", 10)]))
            .await;
        assert!(matches!(held, Ok(Outcome::Held(_))), "{id}: {held:?}");
    }
    let code = |r: Result<Outcome, ExecError>| r.expect_err("refused").code();
    // h1 captured: a repeat answers it done, a void is refused.
    assert_eq!(
        finished(w.exec.capture(tid("h1")).await).state,
        TransferState::Done
    );
    assert_eq!(
        finished(w.exec.capture(tid("h1")).await).state,
        TransferState::Done
    );
    assert_eq!(
        code(w.exec.void(tid("h1")).await),
        Some(Code::HoldAlreadyCaptured)
    );
    // h2 voided: a repeat answers it canceled, a capture is refused.
    let voided = finished(w.exec.void(tid("h2")).await);
    assert_eq!(voided.reason, Some(CancelReason::Voided));
    assert_eq!(finished(w.exec.void(tid("h2")).await), voided);
    assert_eq!(
        code(w.exec.capture(tid("h2")).await),
        Some(Code::HoldAlreadyVoided)
    );
    // h3 expired: before and after the sweeper released it, both settles say so.
    w.clock.advance_ms(HOLD_TTL_MS);
    assert_eq!(
        code(w.exec.capture(tid("h3")).await),
        Some(Code::HoldExpired)
    );
    let report = w.sweeper.pass().await;
    assert_eq!(report.finished, 1, "{report:?}");
    assert_eq!(w.transfer("h3").await.reason, Some(CancelReason::Expired));
    assert_eq!(
        code(w.exec.capture(tid("h3")).await),
        Some(Code::HoldExpired)
    );
    assert_eq!(code(w.exec.void(tid("h3")).await), Some(Code::HoldExpired));
    // A transfer is no hold, whatever its state.
    let t = finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 1)]))
            .await,
    );
    assert_eq!(t.state, TransferState::Done);
    assert_eq!(
        code(w.exec.capture(tid("t1")).await),
        Some(Code::TransferIsNotHeld)
    );
    assert_eq!(
        code(w.exec.void(tid("t1")).await),
        Some(Code::TransferIsNotHeld)
    );
    // A hold canceled before it was held was never held.
    let refused = w
        .exec
        .submit(hold("h4", vec![posting("alice", "bob", "USD", 1_000_000)]))
        .await;
    assert_eq!(finished(refused).state, TransferState::Canceled);
    assert_eq!(
        code(w.exec.capture(tid("h4")).await),
        Some(Code::TransferIsNotHeld)
    );
    assert_eq!(
        code(w.exec.void(tid("h4")).await),
        Some(Code::TransferIsNotHeld)
    );
    w.assert_settled(&[("alice", 89), ("bob", 11)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn refund_is_done_once_and_a_second_refund_is_canceled() {
    let w = World::memory();
    w.bank().await;
    let original = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    finished(w.exec.submit(original.clone()).await);
    let refund = |id: &str| TransferSpec {
        refund_of: Some(tid("t1")),
        ..spec(id, original.reversed_postings())
    };
    let rec = finished(w.exec.submit(refund("r1")).await);
    assert_eq!(rec.state, TransferState::Done);
    assert_eq!(w.transfer("t1").await.refunded_by, Some(tid("r1")));
    w.assert_settled(&[("alice", 100), ("bob", 0)]).await;

    let rec = finished(w.exec.submit(refund("r2")).await);
    assert_eq!(rec.state, TransferState::Canceled);
    let reason = CancelReason::RefundRefused {
        code: Code::OriginalAlreadyRefunded,
    };
    assert_eq!(rec.reason, Some(reason));
    w.assert_settled(&[("alice", 100), ("bob", 0)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn one_sweep_pass_prunes_every_tombstone_due_however_many_there_are() {
    // prune_limit only sizes each call: a pass that stopped at it would fall behind a
    // shard that gains tombstones faster than one call per pass drops them.
    let w = World::memory_with(SweepConfig {
        prune_limit: 2,
        ..SweepConfig::default()
    });
    w.bank().await;
    for n in 0..5 {
        let t = spec(&format!("t{n}"), vec![posting("alice", "bob", "USD", 1)]);
        assert_eq!(finished(w.exec.submit(t).await).state, TransferState::Done);
    }
    let tombstones = |a: &Account| a.intents.len();
    assert_eq!(
        tombstones(&w.account("alice").await),
        6,
        "funding and t0..t4"
    );
    assert_eq!(
        w.sweeper.pass().await.pruned,
        0,
        "nothing is past its horizon yet"
    );

    // Past every horizon, and past the end of the pruner's bucket holding it (a tombstone
    // is taken up to one bucket after its horizon: `xfer_store::shard::prune_at`).
    w.clock
        .advance_ms(TIMEOUT_MS + Config::default().skew_ms + xfer_store::shard::PRUNE_BUCKET_MS);
    let report = w.sweeper.pass().await;
    // funding: issuer + alice; t0..t4: alice + bob each.
    assert_eq!(report.pruned, 12, "{report:?}");
    for id in ["issuer", "alice", "bob"] {
        assert_eq!(tombstones(&w.account(id).await), 0, "{id}");
    }
    w.assert_settled(&[("alice", 95), ("bob", 5)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn vanished_executor_is_finished_by_the_sweeper_after_the_lease_lapses() {
    let w = World::memory();
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let start = Machine::submit(s, owner("crashed"), w.clock.now(), Config::default());
    let m = run_then_vanish(&w, start.expect("valid"), 2).await; // insert (claimed), prepare
    assert_eq!(m.phase_name(), "deciding");
    drop(m);
    assert_eq!(w.transfer("t1").await.state, TransferState::Pending);
    assert_eq!(w.account("alice").await.reserved, 30);

    assert_eq!(w.sweeper.pass().await.due, 0, "the lease is still live");
    w.clock.advance_ms(Config::default().lease_ms);
    let report = w.sweeper.pass().await;
    assert_eq!((report.due, report.finished), (1, 1), "{report:?}");
    assert_eq!(w.transfer("t1").await.state, TransferState::Done);
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn decided_transfer_is_posted_by_the_sweeper_even_past_its_deadline() {
    let w = World::memory();
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let start = Machine::submit(s, owner("crashed"), w.clock.now(), Config::default());
    let m = run_then_vanish(&w, start.expect("valid"), 3).await; // ... and decide
    assert_eq!(m.phase_name(), "posting");
    drop(m);
    assert_eq!(w.transfer("t1").await.state, TransferState::Applied);
    w.clock.advance_ms(TIMEOUT_MS * 2);
    let report = w.sweeper.pass().await;
    assert_eq!(report.finished, 1, "{report:?}");
    assert_eq!(
        w.transfer("t1").await.state,
        TransferState::Done,
        "applied is never undone"
    );
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn redrive_finishes_an_abandoned_transfer_without_waiting_for_the_lease() {
    let w = World::memory();
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let start = Machine::submit(s, owner("crashed"), w.clock.now(), Config::default());
    drop(run_then_vanish(&w, start.expect("valid"), 3).await);
    let rec = finished(w.exec.redrive(tid("t1")).await);
    assert_eq!(rec.state, TransferState::Done);
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
    let err = w.exec.redrive(tid("nope")).await.expect_err("unknown id");
    assert_eq!(err.code(), Some(Code::TransferNotFound));
}

#[tokio::test(flavor = "current_thread")]
async fn close_waits_for_transfers_in_flight_then_closes() {
    let w = World::memory();
    w.bank_and_hold().await;
    let before = w.clock.now();
    let err = w
        .exec
        .close_account(acct("alice"))
        .await
        .expect_err("a hold is in flight");
    assert_eq!(err.code(), Some(Code::AccountHasTransfersInFlight));
    assert!(err.is_retryable());
    assert!(w.clock.now() > before, "it waited between attempts");

    finished(w.exec.void(tid("h1")).await);
    let closed = w
        .exec
        .close_account(acct("alice"))
        .await
        .expect("nothing in flight");
    assert_eq!(closed.status, xfer_core::AccountStatus::Closed);
    let rec = finished(
        w.exec
            .submit(spec("t2", vec![posting("issuer", "alice", "USD", 1)]))
            .await,
    );
    let reason = CancelReason::Refused {
        account: acct("alice"),
        code: Code::AccountClosed,
    };
    assert_eq!(
        (rec.state, rec.reason),
        (TransferState::Canceled, Some(reason))
    );
    let err = w
        .exec
        .close_account(acct("nobody"))
        .await
        .expect_err("no such account");
    assert_eq!(err.code(), Some(Code::AccountNotFound));
}

#[tokio::test(flavor = "current_thread")]
async fn sweeper_run_recovers_at_start_up_and_stops_on_shutdown() {
    let w = World::memory();
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let start = Machine::submit(s, owner("crashed"), w.clock.now(), Config::default());
    drop(run_then_vanish(&w, start.expect("valid"), 3).await);
    w.clock.advance_ms(Config::default().lease_ms);

    let interval_ms = SweepConfig::default().interval_ms;
    let stop_at = w.clock.now().plus_ms(3 * interval_ms);
    let clock = w.clock.clone();
    let shutdown = std::future::poll_fn(|_| {
        if clock.now() >= stop_at {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    });
    assert_eq!(w.sweeper.run(shutdown).await, 3, "one pass per interval");
    assert_eq!(w.transfer("t1").await.state, TransferState::Done);
}

// --- faults ----------------------------------------------------------------------------

fn faulty_world(plan: FaultPlan, seed: u64) -> (World, Vec<Arc<Faulty<MemoryStore>>>) {
    let clock = Arc::new(ManualClock::at(T0));
    let faulty: Vec<Arc<Faulty<MemoryStore>>> = (0..SHARDS as u64)
        .map(|i| Arc::new(Faulty::new(MemoryStore::new(clock.clone()), plan, seed + i)))
        .collect();
    let shards = faulty.iter().map(|f| f.clone() as Arc<dyn Store>).collect();
    (World::over(clock, shards, SweepConfig::default()), faulty)
}

#[tokio::test(flavor = "current_thread")]
async fn unreachable_stores_answer_unavailable_and_lost_replies_indeterminate() {
    let down = FaultPlan {
        unavailable_per_million: 1_000_000,
        reply_lost_per_million: 0,
    };
    let (w, faulty) = faulty_world(down, 1);
    let err = w
        .exec
        .submit(spec("t1", vec![posting("a", "b", "USD", 1)]))
        .await
        .expect_err("down");
    assert!(matches!(err, ExecError::Unavailable(_)), "{err}");
    assert!(err.is_retryable());
    for f in &faulty {
        assert!(
            f.inner()
                .transfers(None, 10)
                .await
                .expect("memory")
                .is_empty(),
            "nothing applied"
        );
    }
    let lossy = FaultPlan {
        unavailable_per_million: 0,
        reply_lost_per_million: 1_000_000,
    };
    let (w, _) = faulty_world(lossy, 1);
    let err = w
        .exec
        .submit(spec("t1", vec![posting("a", "b", "USD", 1)]))
        .await
        .expect_err("lossy");
    assert!(matches!(err, ExecError::Indeterminate(_)), "{err}");
    assert!(err.is_retryable());
}

const USERS: usize = 16;
const TRANSFERS: usize = 240;
const FUNDING: u64 = 1_000;
const SEEDS: u64 = 8;
const PASSES_MAX: usize = 20;

/// 240 transfers at once (points-plus-cash pairs, overdrafts, holds) over stores that refuse
/// calls and lose replies after applying part of a batch, for a few fixed seeds. Whatever
/// each call answered, after sweeper passes every transfer is terminal and the guarantees
/// hold.
#[tokio::test(flavor = "current_thread")]
async fn many_transfers_over_faulty_stores_keep_every_guarantee() {
    for seed in 0..SEEDS {
        faulty_workload(seed).await;
    }
}

async fn faulty_workload(seed: u64) {
    let plan = FaultPlan {
        unavailable_per_million: 150_000,
        reply_lost_per_million: 150_000,
    };
    let (w, faulty) = faulty_world(plan, seed * 1_000);
    open_users(&w).await;
    let funding: Vec<TransferSpec> = (0..USERS)
        .flat_map(|i| {
            let cash = posting("issuer-usd", &format!("u{i}"), "USD", FUNDING);
            let points = posting("issuer-pts", &format!("p{i}"), "POINTS", FUNDING);
            [
                spec(&format!("fund-u{i}"), vec![cash]),
                spec(&format!("fund-p{i}"), vec![points]),
            ]
        })
        .collect();
    check_results(&w.exec.submit_many(funding).await);
    let results = w.exec.submit_many(workload(&mut Rng::new(seed))).await;
    check_results(&results);

    sweep_until_quiet(&w, seed).await;
    let (accounts, transfers) = contents(&faulty).await;
    for t in &transfers {
        assert!(
            t.state.is_terminal(),
            "seed {seed}: {} is {}",
            t.id(),
            t.state
        );
    }
    for state in [TransferState::Done, TransferState::Canceled] {
        assert!(
            transfers.iter().any(|t| t.state == state),
            "seed {seed}: none {state}"
        );
    }
    check_money(&accounts, &transfers);
    check_answers(&results, &transfers);
    let unavailable: u64 = faulty
        .iter()
        .map(|f| f.counts.unavailable.load(Relaxed))
        .sum();
    let reply_lost: u64 = faulty
        .iter()
        .map(|f| f.counts.reply_lost.load(Relaxed))
        .sum();
    assert!(
        unavailable > 0 && reply_lost > 0,
        "seed {seed}: {unavailable} {reply_lost} faults"
    );
}

/// Lets every lease, deadline and hold lapse, and sweeps until a pass finds nothing due.
async fn sweep_until_quiet(w: &World, seed: u64) {
    for _ in 0..PASSES_MAX {
        w.clock.advance_ms(HOLD_TTL_MS + TIMEOUT_MS);
        let report = w.sweeper.pass().await;
        assert!(
            report.failed.iter().all(|(_, e)| e.is_retryable()),
            "seed {seed}: {report:?}"
        );
        if report.due == 0 && report.shard_errors.is_empty() {
            return;
        }
    }
    panic!("seed {seed}: still due after {PASSES_MAX} passes");
}

/// What each call answered agrees with what the stores kept: a finished transfer is stored
/// in that state, and `Unavailable` means nothing was written.
fn check_answers(results: &[Result<Outcome, ExecError>], transfers: &[TransferRecord]) {
    for (i, r) in results.iter().enumerate() {
        let stored = transfers
            .iter()
            .find(|t| t.id().as_str() == format!("w{i}"));
        match (r, stored) {
            (Ok(Outcome::Finished(rec)), Some(t)) => assert_eq!(rec.state, t.state, "w{i}"),
            (Err(ExecError::Unavailable(_)), None) => {}
            (Err(ExecError::Unavailable(e)), Some(_)) => panic!("w{i} written, answered {e}"),
            (_, None) => panic!("w{i} answered {r:?} but was never written"),
            (_, Some(_)) => {}
        }
    }
}

async fn open_users(w: &World) {
    w.open("issuer-usd", "USD", LowerBound::Unbounded).await;
    w.open("issuer-pts", "POINTS", LowerBound::Unbounded).await;
    for i in 0..USERS {
        w.open(&format!("u{i}"), "USD", LowerBound::default()).await;
        w.open(&format!("p{i}"), "POINTS", LowerBound::default())
            .await;
    }
}

/// Random transfers: cash, points, or both together (seed 001's points + cash payment);
/// amounts up to half a funding so that some overdraw; one in ten a hold left to expire.
fn workload(rng: &mut Rng) -> Vec<TransferSpec> {
    let pick = |rng: &mut Rng, prefix: &str, asset: &str| {
        let from = rng.below(USERS as u64);
        let to = (from + 1 + rng.below(USERS as u64 - 1)) % USERS as u64;
        let amount = if rng.chance(50_000) {
            2 * FUNDING
        } else {
            rng.range(1, FUNDING / 20)
        };
        posting(
            &format!("{prefix}{from}"),
            &format!("{prefix}{to}"),
            asset,
            amount,
        )
    };
    (0..TRANSFERS)
        .map(|n| {
            let postings = match rng.below(3) {
                0 => vec![pick(rng, "u", "USD")],
                1 => vec![pick(rng, "p", "POINTS")],
                _ => vec![pick(rng, "u", "USD"), pick(rng, "p", "POINTS")],
            };
            let id = format!("w{n}");
            if rng.chance(100_000) {
                hold(&id, postings)
            } else {
                spec(&id, postings)
            }
        })
        .collect()
}

/// Faults may leave a call without an outcome, never with a broken one.
fn check_results(results: &[Result<Outcome, ExecError>]) {
    for r in results {
        match r {
            Ok(Outcome::Finished(_) | Outcome::Held(_) | Outcome::Left(_)) => {}
            Err(ExecError::Indeterminate(_) | ExecError::Unavailable(_)) => {}
            other => panic!("under faults: {other:?}"),
        }
    }
}

async fn contents(faulty: &[Arc<Faulty<MemoryStore>>]) -> (Vec<Account>, Vec<TransferRecord>) {
    let (mut accounts, mut transfers) = (Vec::new(), Vec::new());
    for f in faulty {
        accounts.extend(f.inner().accounts(None, usize::MAX).await.expect("memory"));
        transfers.extend(f.inner().transfers(None, usize::MAX).await.expect("memory"));
    }
    (accounts, transfers)
}

/// Conservation, no leaks, no overdraft, and history: replaying the `done` transfers from
/// zero gives every balance.
fn check_money(accounts: &[Account], transfers: &[TransferRecord]) {
    let mut sums = std::collections::BTreeMap::<AssetCode, i64>::new();
    let mut replay = std::collections::BTreeMap::<AccountId, i64>::new();
    for a in accounts {
        *sums.entry(a.asset.clone()).or_default() += a.balance;
        assert_eq!((a.reserved, a.incoming), (0, 0), "{} leaks", a.id);
        assert_eq!(a.open_intents(), 0, "{} has open intents", a.id);
        assert!(a.intents.values().all(|i| i.state != IntentState::Open));
        assert!(a.is_within_bound(), "{} overdrawn", a.id);
    }
    assert_eq!(sums.len(), 2, "{sums:?}");
    assert!(
        sums.values().all(|s| *s == 0),
        "money created or destroyed: {sums:?}"
    );
    for t in transfers.iter().filter(|t| t.state == TransferState::Done) {
        for p in &t.spec.postings {
            *replay.entry(p.from.clone()).or_default() -= p.amount.signed();
            *replay.entry(p.to.clone()).or_default() += p.amount.signed();
        }
    }
    for a in accounts {
        assert_eq!(
            replay.get(&a.id).copied().unwrap_or(0),
            a.balance,
            "history of {}",
            a.id
        );
    }
}

/// A shard that answers `budget` more calls, then refuses every call (nothing applied).
fn goes_down(clock: Arc<ManualClock>, budget: Arc<AtomicUsize>) -> Intercept<MemoryStore> {
    let hook: ExecuteHook<MemoryStore> = Box::new(move |inner, ops| {
        let left = budget.load(Relaxed);
        if left == 0 {
            let down = xfer_store::StoreError::Unavailable("down".into());
            return Box::pin(std::future::ready(Err(down)));
        }
        budget.store(left - 1, Relaxed);
        inner.execute(ops)
    });
    Intercept::new(MemoryStore::new(clock), hook)
}

/// The story: `redrive` applies a `Redrive` (the lease lapses now), then drives recovery;
/// when every recovery round found the stores down it answered `Unavailable`, which
/// promises that nothing was applied, though the lease change was (found in review).
#[tokio::test(flavor = "current_thread")]
async fn redrive_that_changed_the_lease_never_claims_nothing_was_applied() {
    let clock = Arc::new(ManualClock::at(T0));
    let budgets: Vec<Arc<AtomicUsize>> = (0..SHARDS).map(|_| Arc::new(usize::MAX.into())).collect();
    let shards = budgets
        .iter()
        .map(|b| Arc::new(goes_down(clock.clone(), b.clone())) as Arc<dyn Store>)
        .collect();
    let w = World::over(clock, shards, SweepConfig::default());
    w.bank().await;
    let s = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    let start = Machine::submit(s, owner("crashed"), w.clock.now(), Config::default());
    drop(run_then_vanish(&w, start.expect("valid"), 3).await);
    for b in &budgets {
        b.store(1, Relaxed); // the Redrive goes through; everything after fails
    }
    let err = w.exec.redrive(tid("t1")).await.expect_err("stores down");
    assert!(matches!(err, ExecError::Indeterminate(_)), "{err}");
}

/// Records the ids it is told of.
#[derive(Default)]
struct Told(std::sync::Mutex<Vec<String>>);

impl xfer_engine::Decisions for Told {
    fn decided(&self, id: &TransferId) {
        self.0.lock().unwrap().push(id.to_string());
    }
}

#[tokio::test(flavor = "current_thread")]
async fn each_decision_written_is_told_once_and_a_repeat_decides_nothing() {
    let w = World::memory();
    w.bank().await;
    let told = Told::default();
    let specs = vec![
        spec("t1", vec![posting("alice", "bob", "USD", 30)]),
        spec("t2", vec![posting("alice", "bob", "USD", 500)]), // refused: canceling
        hold("h1", vec![posting("alice", "bob", "USD", 10)]),
    ];
    let results = w
        .exec
        .submit_many_observed(specs.clone(), Some(&told))
        .await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let mut ids = told.0.lock().unwrap().clone();
    ids.sort();
    assert_eq!(
        ids,
        ["h1", "t1", "t2"],
        "done, canceled and held are each decided once"
    );

    // The same transfers again: answered from their records, nothing decided anew.
    let again = Told::default();
    let results = w.exec.submit_many_observed(specs, Some(&again)).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert!(
        again.0.lock().unwrap().is_empty(),
        "{:?}",
        again.0.lock().unwrap()
    );
}

/// The log shared by [`Pipelined`] shards: every answer gets the next LSN, and the test
/// says by hand how far the log is durable, or that syncing failed.
#[derive(Default)]
struct Gate {
    next: std::sync::atomic::AtomicU64,
    durable: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicBool,
    changed: tokio::sync::Notify,
}

impl Gate {
    fn open_all(&self) {
        self.durable.store(u64::MAX, Relaxed);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        self.durable.store(self.next.load(Relaxed), Relaxed);
    }

    fn fail(&self) {
        self.failed.store(true, Relaxed);
        self.changed.notify_waiters();
    }
}

impl xfer_store::SharedLog for Gate {
    fn wait_durable(&self, lsn: u64) -> xfer_store::BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            loop {
                let changed = self.changed.notified();
                if self.failed.load(Relaxed) {
                    return Err(StoreError::Indeterminate("sync failed".into()));
                }
                if self.is_durable(lsn) {
                    return Ok(());
                }
                changed.await;
            }
        })
    }

    fn is_durable(&self, lsn: u64) -> bool {
        lsn <= self.durable.load(Relaxed)
    }
}

/// A Memory store that says it appends to the gate's log and answers before the log is
/// durable (as the embedded store does).
struct Pipelined {
    inner: MemoryStore,
    gate: Arc<Gate>,
}

impl Store for Pipelined {
    fn execute(&self, ops: Vec<Op>) -> xfer_store::BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        self.inner.execute(ops)
    }

    fn log(&self) -> Option<Arc<dyn xfer_store::SharedLog>> {
        Some(self.gate.clone())
    }

    fn execute_ahead<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> xfer_store::BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        Box::pin(async move {
            let replies = self.inner.execute(Op::copies(ops)).await?;
            Ok((replies, self.gate.next.fetch_add(1, Relaxed) + 1))
        })
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> xfer_store::BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        self.inner.scan_due(now, limit)
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> xfer_store::BoxFuture<'a, Result<xfer_store::HistoryPage, StoreError>> {
        self.inner.history(account, before, limit)
    }

    fn prune(&self, limit: usize) -> xfer_store::BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.prune(limit)
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> xfer_store::BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        self.inner.accounts(after, limit)
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> xfer_store::BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        self.inner.transfers(after, limit)
    }
}

/// `SHARDS` shards on one gated log (the gate open), and the gate; with `plain_last`, the
/// last shard is a plain Memory store instead (durable answers, no shared log).
fn pipelined_world(plain_last: bool) -> (World, Arc<Gate>) {
    let clock = Arc::new(ManualClock::at(T0));
    let gate = Arc::new(Gate::default());
    gate.open_all();
    let shards = (0..SHARDS)
        .map(|i| {
            if plain_last && i == SHARDS - 1 {
                Arc::new(MemoryStore::new(clock.clone())) as Arc<dyn Store>
            } else {
                Arc::new(Pipelined {
                    inner: MemoryStore::new(clock.clone()),
                    gate: gate.clone(),
                }) as Arc<dyn Store>
            }
        })
        .collect();
    (World::over(clock, shards, SweepConfig::default()), gate)
}

/// On shards that share one log, a transfer runs all its steps without waiting for the log
/// to be durable, but neither its outcome nor its decision is given before the log is
/// durable up to its last step.
#[tokio::test(flavor = "current_thread")]
async fn on_one_log_steps_run_ahead_of_the_sync_and_nothing_is_told_before_it() {
    let (w, gate) = pipelined_world(false);
    assert!(w.cluster().pipelined());
    w.bank().await;
    gate.close();
    let told = Told::default();
    let specs = vec![spec("t1", vec![posting("alice", "bob", "USD", 30)])];
    let submit = w.exec.submit_many_observed(specs, Some(&told));
    tokio::pin!(submit);
    // Let it run until it can go no further: it then waits for the log.
    for _ in 0..100 {
        assert!(
            submit.as_mut().now_or_never().is_none(),
            "answered before the log was durable"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        w.transfer("t1").await.state,
        TransferState::Done,
        "every step ran"
    );
    assert!(
        told.0.lock().unwrap().is_empty(),
        "decision told before it was durable"
    );
    gate.open_all();
    let results = submit.await;
    assert_eq!(
        finished(results.into_iter().next().unwrap()).state,
        TransferState::Done
    );
    assert_eq!(*told.0.lock().unwrap(), ["t1"]);
    w.assert_settled(&[("alice", 70), ("bob", 30)]).await;
}

/// If the shared log cannot be synced, no outcome resting on its answers is given: each is
/// `Indeterminate` (the transfer may or may not survive a crash), and no decision is told.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_sync_of_the_shared_log_leaves_every_outcome_unknown() {
    let (w, gate) = pipelined_world(false);
    w.bank().await;
    gate.close();
    let told = Told::default();
    let specs = vec![
        spec("t1", vec![posting("alice", "bob", "USD", 30)]),
        spec("t2", vec![posting("alice", "bob", "USD", 500)]), // canceled: not enough
    ];
    let submit = w.exec.submit_many_observed(specs, Some(&told));
    tokio::pin!(submit);
    for _ in 0..100 {
        assert!(submit.as_mut().now_or_never().is_none());
        tokio::task::yield_now().await;
    }
    gate.fail();
    for r in submit.await {
        assert!(matches!(r, Err(ExecError::Indeterminate(_))), "{r:?}");
    }
    assert!(told.0.lock().unwrap().is_empty());
}

/// Shards on different logs (here one is a plain durable store) never answer ahead of their
/// sync: a crash of one could keep a step that rests on a lost step of the other.
#[tokio::test(flavor = "current_thread")]
async fn shards_on_different_logs_wait_for_every_step() {
    let (w, gate) = pipelined_world(true);
    assert!(!w.cluster().pipelined());
    w.bank().await;
    gate.close();
    // Nothing waits on the gate: every step is a durable `execute`.
    let r = w
        .exec
        .submit(spec("t1", vec![posting("alice", "bob", "USD", 30)]))
        .await;
    assert_eq!(finished(r).state, TransferState::Done);
    assert_eq!(gate.next.load(Relaxed), 0, "no pending call was made");
}

/// `submit_many_ahead` drives every round and leaves the wait for the log to its caller:
/// its LSN is not durable when it returns, the outcomes given a successful wait are the
/// transfers' own, and given a failed one each is `Indeterminate`.
#[tokio::test(flavor = "current_thread")]
async fn ahead_leaves_the_wait_to_the_caller_and_a_failed_wait_leaves_outcomes_unknown() {
    let (w, gate) = pipelined_world(false);
    w.bank().await;
    gate.close();
    let specs = || {
        vec![
            spec("t1", vec![posting("alice", "bob", "USD", 30)]),
            spec("t2", vec![posting("alice", "bob", "USD", 500)]), // canceled: not enough
        ]
    };
    let ahead = w.exec.submit_many_ahead(specs()).await;
    assert!(ahead.lsn() > 0);
    assert!(!w.cluster().is_durable(ahead.lsn()));
    let failed = StoreError::Indeterminate("the sync failed".into());
    for r in ahead.outcomes(Err(failed)) {
        assert!(matches!(r, Err(ExecError::Indeterminate(_))), "{r:?}");
    }
    let ahead = w.exec.submit_many_ahead(specs()).await;
    gate.open_all();
    // A proof of an earlier LSN releases nothing that rests on a later one.
    let short = w.cluster().wait_durable(ahead.lsn() - 1).await;
    assert_eq!(short.as_ref().map(|d| d.lsn()).ok(), Some(ahead.lsn() - 1));
    let ahead_again = w.exec.submit_many_ahead(specs()).await;
    for r in ahead_again.outcomes(short) {
        assert!(matches!(r, Err(ExecError::Indeterminate(_))), "{r:?}");
    }
    let synced = w.cluster().wait_durable(ahead.lsn()).await;
    let states: Vec<TransferState> = ahead
        .outcomes(synced)
        .into_iter()
        .map(|r| finished(r).state)
        .collect();
    assert_eq!(states, [TransferState::Done, TransferState::Canceled]);
}

/// Past the replay's allowance for records stamped by clocks ahead of its own.
fn settle_clocks(w: &World) {
    w.clock.advance_ms(xfer_engine::replay::CLOCK_SLACK_MS + 1);
}

#[tokio::test(flavor = "current_thread")]
async fn replay_finds_every_balance_from_the_transfers() {
    let w = World::memory();
    w.bank().await;
    let original = spec("t1", vec![posting("alice", "bob", "USD", 30)]);
    finished(w.exec.submit(original.clone()).await);
    let refund = TransferSpec {
        refund_of: Some(tid("t1")),
        ..spec("r1", original.reversed_postings())
    };
    finished(w.exec.submit(refund).await);
    finished(
        w.exec
            .submit(spec("t2", vec![posting("alice", "bob", "USD", 10)]))
            .await,
    );
    for h in ["h1", "h2"] {
        let held = w
            .exec
            .submit(hold(h, vec![posting("alice", "bob", "USD", 5)]));
        assert!(matches!(held.await, Ok(Outcome::Held(_))));
    }
    finished(w.exec.capture(tid("h1")).await);
    finished(w.exec.void(tid("h2")).await);
    let too_much = finished(
        w.exec
            .submit(spec("t3", vec![posting("bob", "alice", "USD", 999)]))
            .await,
    );
    assert_eq!(too_much.state, TransferState::Canceled);
    settle_clocks(&w);

    let r = xfer_engine::replay(w.cluster(), w.clock.now(), 60_000)
        .await
        .expect("replayed");
    assert!(r.is_clean(), "{r:?}");
    assert_eq!((r.transfers, r.done), (7, 5), "{r:?}");
    assert_eq!((r.accounts_compared, r.accounts_busy), (3, 0), "{r:?}");
}

/// A shard store whose record of `t-bad` says 7 where 5 moved: what a hand edit of the
/// store, or a bug, leaves behind.
fn misrecords(clock: Arc<ManualClock>) -> Intercept<MemoryStore> {
    let hook: ExecuteHook<MemoryStore> = Box::new(move |inner, ops| {
        let ops = ops
            .into_iter()
            .map(|op| match op {
                Op::Transfer(id, TransferOp::Insert(rec)) if id.as_str() == "t-bad" => {
                    let mut rec = (*rec).clone();
                    let mut spec = (*rec.spec).clone();
                    spec.postings = vec![posting("alice", "bob", "USD", 7)].into();
                    rec.spec = Arc::new(spec);
                    Op::Transfer(id, TransferOp::Insert(Arc::new(rec)))
                }
                op => op,
            })
            .collect();
        inner.execute(ops)
    });
    Intercept::new(MemoryStore::new(clock), hook)
}

#[tokio::test(flavor = "current_thread")]
async fn replay_names_each_account_its_transfers_do_not_explain() {
    let clock = Arc::new(ManualClock::at(T0));
    let shards = (0..SHARDS)
        .map(|_| Arc::new(misrecords(clock.clone())) as Arc<dyn Store>)
        .collect();
    let w = World::over(clock, shards, SweepConfig::default());
    w.bank().await;
    finished(
        w.exec
            .submit(spec("t-ok", vec![posting("alice", "bob", "USD", 3)]))
            .await,
    );
    finished(
        w.exec
            .submit(spec("t-bad", vec![posting("alice", "bob", "USD", 5)]))
            .await,
    );
    w.assert_settled(&[("alice", 92), ("bob", 8)]).await;
    settle_clocks(&w);

    let r = xfer_engine::replay(w.cluster(), w.clock.now(), 60_000)
        .await
        .expect("replayed");
    assert!(!r.is_clean());
    let mut found: Vec<(String, i64, i128)> = r
        .differences
        .iter()
        .map(|d| (d.account.clone(), d.balance, d.replayed))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [("alice".into(), 92, 90), ("bob".into(), 8, 10)],
        "{r:?}"
    );
    assert_eq!(r.differences_total, 2);
}

#[tokio::test(flavor = "current_thread")]
async fn replay_lists_tombstones_left_past_their_horizon_and_skips_accounts_in_use() {
    let w = World::memory();
    w.bank().await;
    finished(
        w.exec
            .submit(spec("t1", vec![posting("alice", "bob", "USD", 30)]))
            .await,
    );
    let held = w
        .exec
        .submit(hold("h1", vec![posting("issuer", "bob", "USD", 5)]));
    assert!(matches!(held.await, Ok(Outcome::Held(_))));
    // Past every horizon (the hold lives on), and no sweep has run.
    w.clock
        .advance_ms(TIMEOUT_MS + Config::default().skew_ms + 2_000);
    let now = w.clock.now();

    let r = xfer_engine::replay(w.cluster(), now, 1_000)
        .await
        .expect("replayed");
    assert!(r.is_clean(), "{r:?}");
    // issuer and bob hold h1's open intents: money may be moving there.
    assert_eq!((r.accounts_compared, r.accounts_busy), (1, 2), "{r:?}");
    let mut overdue: Vec<(String, String)> = r
        .overdue_tombstones
        .iter()
        .map(|o| (o.account.clone(), o.transfer.clone()))
        .collect();
    overdue.sort();
    let want = [
        ("alice", "fund-alice"),
        ("alice", "t1"),
        ("bob", "t1"),
        ("issuer", "fund-alice"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, t)| (a.to_string(), t.to_string()))
        .collect();
    assert_eq!(overdue, want, "{r:?}");
    assert_eq!(r.overdue_tombstones_total, 4);
    // Within the grace, nothing is overdue; after a sweep, nothing is left.
    let r = xfer_engine::replay(w.cluster(), now, 60_000)
        .await
        .expect("replayed");
    assert_eq!(r.overdue_tombstones_total, 0, "{r:?}");
    w.clock.advance_ms(xfer_store::shard::PRUNE_BUCKET_MS);
    w.sweeper.pass().await;
    let r = xfer_engine::replay(w.cluster(), w.clock.now(), 1_000)
        .await
        .expect("replayed");
    assert_eq!(r.overdue_tombstones_total, 0, "{r:?}");
}

/// A shard store that answers every post of `t-bad` as if its intent had been released (a
/// protocol violation), and fails every batch with a post of `t-down` (a store error),
/// until `healed`.
fn poisons(
    clock: Arc<ManualClock>,
    healed: Arc<std::sync::atomic::AtomicBool>,
) -> Intercept<MemoryStore> {
    let hook: ExecuteHook<MemoryStore> = Box::new(move |inner, ops| {
        let posts = |name: &str| {
            ops.iter().any(|op| {
                matches!(op, Op::Account(_, AccountOp::Post { transfer, .. }) if transfer.as_str() == name)
            })
        };
        if healed.load(Relaxed) {
            return inner.execute(ops);
        }
        if posts("t-down") {
            // The batch's other ops are applied, but the answer is lost.
            let others: Vec<Op> = ops
                .iter()
                .filter(|op| !matches!(op, Op::Account(_, AccountOp::Post { transfer, .. }) if transfer.as_str() == "t-down"))
                .cloned()
                .collect();
            return Box::pin(async move {
                inner.execute(others).await?;
                Err(StoreError::Unavailable("down".into()))
            });
        }
        if posts("t-bad") {
            let replies = ops
                .iter()
                .map(|op| match op {
                    Op::Account(_, AccountOp::Post { transfer, .. })
                        if transfer.as_str() == "t-bad" =>
                    {
                        Reply::Post(xfer_store::PostOutcome::FoundReleased)
                    }
                    _ => Reply::NotFound,
                })
                .collect();
            return Box::pin(std::future::ready(Ok(replies)));
        }
        inner.execute(ops)
    });
    Intercept::new(MemoryStore::new(clock), hook)
}

#[tokio::test(flavor = "current_thread")]
async fn a_transfer_no_retry_fixes_is_escalated_once_and_a_redrive_clears_it() {
    let clock = Arc::new(ManualClock::at(T0));
    let healed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shards = (0..SHARDS)
        .map(|_| Arc::new(poisons(clock.clone(), healed.clone())) as Arc<dyn Store>)
        .collect();
    let sweep = SweepConfig {
        escalate_after: 2,
        ..SweepConfig::default()
    };
    let w = World::over(clock, shards, sweep);
    w.bank().await;
    let submit = |id: &'static str| {
        let exec = &w.exec;
        async move {
            let r = exec
                .submit(spec(id, vec![posting("alice", "bob", "USD", 5)]))
                .await;
            assert!(r.is_err(), "{id}: {r:?}");
        }
    };
    submit("t-bad").await;
    assert_eq!(w.transfer("t-bad").await.state, TransferState::Applied);
    let lapse = || w.clock.advance_ms(Config::default().lease_ms + 1);
    // A violation is escalated at once.
    lapse();
    let r = w.sweeper.pass().await;
    assert_eq!(r.failed.len(), 1, "{r:?}");
    let marked: Vec<(&str, u32)> = r
        .escalated
        .iter()
        .map(|(id, e)| (id.as_str(), e.attempts))
        .collect();
    assert_eq!(marked, [("t-bad", 1)], "{r:?}");
    assert!(
        r.escalated[0].1.error.contains("protocol violation"),
        "{r:?}"
    );
    let rec = w.transfer("t-bad").await;
    assert_eq!(rec.escalation.as_ref(), Some(&r.escalated[0].1));
    assert_eq!(
        rec.state,
        TransferState::Applied,
        "the mark changes no state"
    );
    // A store error alone (nothing else finished: an outage, perhaps) counts nothing.
    submit("t-down").await;
    for _ in 0..4 {
        lapse();
        let r = w.sweeper.pass().await;
        assert!(r.escalated.is_empty(), "{r:?}");
        assert_eq!(r.escalated_waiting, 1, "t-bad skipped, not retried: {r:?}");
        assert_eq!(
            r.failed
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["t-down"]
        );
    }
    assert!(w.transfer("t-down").await.escalation.is_none());
    // With others finishing beside it, t-down's failures count: marked after two. The
    // others' records and accounts live on a shard t-down's posts do not touch.
    let router = w.exec.cluster().router();
    let usd = asset_code("USD");
    let shard = |name: &str| router.shard_of_account(&acct(name), Some(&usd)).unwrap();
    let poisoned = [shard("alice"), shard("bob")];
    let free = |prefix: &str, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|name| {
                !poisoned.contains(&shard(name))
                    && !poisoned.contains(&router.shard_of_transfer(&tid(name)))
            })
            .take(n)
            .collect()
    };
    let (accounts, ids) = (free("x", 2), free("t-ok", 2));
    for a in &accounts {
        w.open(a, "USD", LowerBound::Unbounded).await;
    }
    for id in &ids {
        lapse();
        let other = TransferRecord::accept(
            spec(id, vec![posting(&accounts[0], &accounts[1], "USD", 1)]),
            w.clock.now(),
            0,
        );
        let insert = Op::Transfer(other.spec.id.clone(), TransferOp::Insert(Arc::new(other)));
        w.exec.execute_op(insert).await.expect("inserted");
        let r = w.sweeper.pass().await;
        assert_eq!(r.finished, 1, "{r:?}");
        let marked: Vec<&str> = r.escalated.iter().map(|(id, _)| id.as_str()).collect();
        let want: &[&str] = if *id == ids[0] { &[] } else { &["t-down"] };
        assert_eq!(marked, want, "{r:?}");
    }
    assert_eq!(w.transfer("t-down").await.escalation.unwrap().attempts, 2);
    // Fixed by a person: a re-drive clears the mark and finishes it.
    healed.store(true, Relaxed);
    for id in ["t-bad", "t-down"] {
        let rec = finished(w.exec.redrive(tid(id)).await);
        assert_eq!(
            (rec.state, rec.escalation),
            (TransferState::Done, None),
            "{id}"
        );
    }
    lapse();
    let r = w.sweeper.pass().await;
    assert_eq!((r.escalated_waiting, r.failed.len()), (0, 0), "{r:?}");
    w.assert_settled(&[("alice", 90), ("bob", 10)]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn escalated_transfers_never_take_the_place_of_due_ones() {
    let sweep = SweepConfig {
        scan_limit: 2,
        ..SweepConfig::default()
    };
    let w = World::memory_with(sweep);
    w.bank().await;
    // Seven escalated records, due since long before a healthy one: five on its shard,
    // more than a scan takes there.
    let router = w.exec.cluster().router();
    let home = router.shard_of_transfer(&tid("healthy"));
    let mut ids: Vec<String> = (0..)
        .map(|n| format!("stuck-{n}"))
        .filter(|id| router.shard_of_transfer(&tid(id)) == home)
        .take(5)
        .collect();
    ids.extend(
        (0..)
            .map(|n| format!("elsewhere-{n}"))
            .filter(|id| router.shard_of_transfer(&tid(id)) != home)
            .take(2),
    );
    let accept = |id: &str, at: Timestamp| {
        TransferRecord::accept(spec(id, vec![posting("alice", "bob", "USD", 1)]), at, 0)
    };
    for id in &ids {
        let id = tid(id);
        let mark = xfer_core::Escalation::new(1, "protocol violation", T0);
        let ops = vec![
            Op::Transfer(
                id.clone(),
                TransferOp::Insert(Arc::new(accept(id.as_str(), T0))),
            ),
            Op::Transfer(id, TransferOp::Escalate { escalation: mark }),
        ];
        w.exec.execute_ops(ops).await.expect("written");
    }
    w.clock.advance_ms(1_000);
    let healthy = accept("healthy", w.clock.now());
    w.exec
        .execute_op(Op::Transfer(
            tid("healthy"),
            TransferOp::Insert(Arc::new(healthy)),
        ))
        .await
        .expect("inserted");
    let r = w.sweeper.pass().await;
    assert_eq!((r.finished, r.escalated_waiting), (1, 7), "{r:?}");
    assert_eq!(w.transfer("healthy").await.state, TransferState::Done);
    for id in &ids {
        assert_eq!(w.transfer(id).await.state, TransferState::Initial, "{id}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_hold_captured_in_part_and_half_posted_audits_as_conserved() {
    let w = World::memory();
    w.bank_and_hold().await;
    // The capture decided and alice's leg posted; bob's post not yet made.
    let capture = TransferOp::CapturePart {
        owner: owner("c"),
        now: w.clock.now(),
        lease_until: w.clock.now().plus_ms(5_000),
        amounts: vec![Amount::new(12, "amount").unwrap()],
    };
    w.exec
        .execute_op(Op::Transfer(tid("h1"), capture))
        .await
        .expect("captured");
    let post = AccountOp::PostPart {
        transfer: tid("h1"),
        asset: asset_code("USD"),
        debit: 12,
        credit: 0,
    };
    w.exec
        .execute_op(Op::Account(acct("alice"), post))
        .await
        .expect("posted");
    let r = xfer_engine::audit(w.exec.cluster()).await.expect("audited");
    assert!(r.is_clean(), "{r:?}");
    let usd = r.assets.iter().find(|a| a.asset == "USD").expect("USD");
    assert_eq!(usd.conserved, Some(true), "{r:?}");
}
