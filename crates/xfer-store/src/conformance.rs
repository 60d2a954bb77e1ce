//! The store conformance suite: the rules of [`record`](crate::record) checked through the
//! [`Store`] trait, so that every backend is held to the same meaning. A backend's tests call
//! [`run_all`] with a factory of empty stores.
//!
//! The suite never controls the store's clock: "past" deadlines and horizons are
//! `Timestamp(1)` and "future" ones [`FUTURE`], so it runs against a real server too.

use crate::event::{Event, FeedPosition};
use crate::op::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
use crate::store::Store;
use std::sync::Arc;
use xfer_core::amount::AMOUNT_MAX;
use xfer_core::{
    AccountId, AccountStatus, Amount, AssetCode, Code, IntentState, LowerBound, OwnerId, Posting,
    Timestamp, TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};

/// A deadline no store clock reaches during the suite.
pub const FUTURE: Timestamp = Timestamp(u64::MAX / 2);
const PAST: Timestamp = Timestamp(1);

/// Runs every case, each on a fresh store from `new_store`. Panics naming the case that
/// failed.
pub async fn run_all<S: Store>(new_store: impl Fn() -> S) {
    run_all_opened(|| std::future::ready(new_store())).await
}

/// [`run_all`] for stores that are opened asynchronously (a database schema created per
/// case).
pub async fn run_all_opened<S: Store, F: std::future::Future<Output = S>>(
    open_store: impl Fn() -> F,
) {
    accounts_are_created_once(&open_store().await).await;
    prepare_reserves_and_repeats_are_no_ops(&open_store().await).await;
    prepare_refusals_change_nothing(&open_store().await).await;
    incoming_is_not_available(&open_store().await).await;
    counters_never_overflow(&open_store().await).await;
    post_moves_money_once(&open_store().await).await;
    release_gives_back_once_and_marks_ahead(&open_store().await).await;
    release_on_a_missing_account_survives_its_creation(&open_store().await).await;
    history_lists_a_transfer_once_on_every_account_it_names(&open_store().await).await;
    late_prepares_are_refused(&open_store().await).await;
    close_waits_for_transfers_in_flight(&open_store().await).await;
    lower_bounds_hold(&open_store().await).await;
    transfers_insert_once(&open_store().await).await;
    claims_and_decisions_compare_and_set(&open_store().await).await;
    holds_capture_void_and_expire(&open_store().await).await;
    refunds_link_once(&open_store().await).await;
    partial_refunds_never_sum_above_the_original(&open_store().await).await;
    holds_extend_before_they_expire(&open_store().await).await;
    holds_capture_in_part(&open_store().await).await;
    escalation_marks_once_until_a_redrive(&open_store().await).await;
    sweeper_scan_is_due_first_and_skips_terminal(&open_store().await).await;
    history_is_newest_first_and_paged(&open_store().await).await;
    prune_drops_only_expired_tombstones(&open_store().await).await;
    batches_are_independent_per_record(&open_store().await).await;
    one_phase_commits_whole_or_inserts(&open_store().await).await;
    assets_are_declared_once(&open_store().await).await;
    account_metadata_is_kept_beside_the_account(&open_store().await).await;
}

/// For a store that commits in one phase (the Memory, embedded, PostgreSQL, MySQL and
/// Redis stores): the
/// case of [`run_all`] that checks [`TransferOp::OnePhase`], requiring it to commit where
/// it can. Others may always answer as the insert.
pub async fn run_one_phase_committing<S: Store, F: std::future::Future<Output = S>>(
    open_store: impl Fn() -> F,
) {
    assert!(
        one_phase_commits_whole_or_inserts(&open_store().await).await,
        "a one-phase commit that every leg allows must commit"
    );
}

fn acct(s: &str) -> AccountId {
    AccountId::new(s).expect("valid id")
}
fn tid(s: &str) -> TransferId {
    TransferId::new(s).expect("valid id")
}
fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").expect("valid asset")
}
/// For a store that keeps a change feed (Memory, embedded, PostgreSQL, Redis): the steps of
/// the cases that move transfers through every state, on one store, make the events the
/// Memory store makes of them (`event::events_of`), read back oldest first in increasing
/// positions, the same whole or a page at a time.
pub async fn run_events<S: Store, F: std::future::Future<Output = S>>(open_store: impl Fn() -> F) {
    let s = open_store().await;
    let reference =
        crate::MemoryStore::new(Arc::new(xfer_core::ManualClock::at(Timestamp(10_000))));
    for store in [&s as &dyn Store, &reference] {
        every_state(store).await;
    }
    let want = all_events(&reference, 1_000).await;
    // A feed may show an event only once older transactions elsewhere have ended
    // (PostgreSQL's, `migration_5.sql`): read until it has them all, for a while.
    let mut got = all_events(&s, 1_000).await;
    for _ in 0..200 {
        if got.len() >= want.len() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        got = all_events(&s, 1_000).await;
    }
    let seen = |events: &[Event]| -> Vec<String> {
        let at = |e: &Event| e.at.as_ms();
        events
            .iter()
            .map(|e| format!("{} at {}", e.id(), at(e)))
            .collect()
    };
    assert_eq!(seen(&got), seen(&want), "the feed's events");
    assert!(
        got.windows(2).all(|w| w[0].position < w[1].position),
        "positions increase: {got:?}"
    );
    assert_eq!(all_events(&s, 1).await, got, "paged one at a time");
    let mut backwards = got.clone();
    backwards.reverse();
    for page in [1, 3, 1_000] {
        assert_eq!(
            all_events_backwards(&s, page).await,
            backwards,
            "read backwards {page} at a time"
        );
    }
    let last = got.last().expect("events").position;
    let after = s.events(last, 10).await.expect("events after the last");
    assert_eq!(after.events, [], "nothing after the last");
    // Steps that change nothing make no event.
    for id in ["t1", "h2"] {
        transfer_op(&s, id, TransferOp::Finish { now: at(7_000) }).await;
    }
    let o1 = record("o1", 0);
    let relink = TransferOp::LinkRefund {
        refund: tid("r2"),
        replacing: vec![tid("r1")],
        postings: o1.spec.reversed_postings(),
        now: at(9_000),
    };
    transfer_op(&s, "o1", relink).await;
    transfer_op(&s, "o1", TransferOp::Insert(Arc::new(o1))).await;
    assert_eq!(all_events(&s, 1_000).await, got, "repeats make no event");
    // Retention drops a prefix, and readers are told where it ends. (A store may drop
    // only what it has saved: the embedded store, what a checkpoint wrote.)
    let n = s.trim_events(FUTURE, 1_000).await.expect("trim");
    let kept = s.events(FeedPosition::START, 1_000).await.expect("events");
    assert!(n <= got.len(), "dropped {n} of {}", got.len());
    assert_eq!(kept.events, got[n..], "the events after those dropped");
    assert_eq!(
        all_events_backwards(&s, 2).await,
        backwards[..got.len() - n],
        "read backwards, only the events kept"
    );
    if n == 0 {
        assert_eq!(kept.dropped_through, FeedPosition::START);
    } else {
        assert_eq!(
            kept.dropped_through,
            got[n - 1].position,
            "the last dropped"
        );
    }
}

/// For every store: the timelines the steps of `every_state`, a take-over past the bound
/// and a re-drive leave on their records are the Memory store's (`timeline::step_of`), as
/// read back by `Get` and by the listing.
pub async fn run_timelines<S: Store, F: std::future::Future<Output = S>>(
    open_store: impl Fn() -> F,
) {
    let s = open_store().await;
    let reference =
        crate::MemoryStore::new(Arc::new(xfer_core::ManualClock::at(Timestamp(10_000))));
    let committed = every_state(&s).await;
    takeovers_past_the_bound(&s).await;
    every_state(&reference).await;
    takeovers_past_the_bound(&reference).await;
    let mut want = all_timelines(&reference).await;
    assert!(want.len() >= 12, "{want:?}");
    if !committed {
        // A store that answers a one-phase step as the insert (MongoDB) keeps those
        // transfers pending, claimed: one step, as the Memory store's insert would.
        for (id, t) in &mut want {
            if id.starts_with('q') {
                t.truncate(1);
            }
        }
    }
    assert_eq!(all_timelines(&s).await, want, "the timelines, listed");
    for (id, timeline) in &want {
        let got = match transfer_op(&s, id, TransferOp::Get).await {
            Reply::Unchanged(r) | Reply::Transfer(r) => timeline_text(&r),
            other => panic!("{id}: get answered {other}"),
        };
        assert_eq!(&got, timeline, "the timeline of {id}, read");
    }
    let long = &want.iter().find(|(id, _)| id == "k1").expect("k1").1;
    assert_eq!(
        long.len(),
        xfer_core::TIMELINE_STEPS_MAX,
        "bounded: {long:?}"
    );
    assert!(long[0].contains("initial"), "the first step kept: {long:?}");
}

/// A transfer taken over 20 times, then re-driven (which is no step) and taken over again:
/// 23 steps, more than the bound.
async fn takeovers_past_the_bound(s: &dyn Store) {
    transfer_op(s, "k1", TransferOp::Insert(Arc::new(record("k1", 10)))).await;
    for n in 1..=21u64 {
        let claim = TransferOp::Claim {
            owner: owner(&format!("e{n}")),
            now: Timestamp(100 * n),
            lease_until: Timestamp(100 * n + 50),
        };
        assert!(state_of(&transfer_op(s, "k1", claim).await).2, "claim {n}");
    }
    let redrive = TransferOp::Redrive {
        now: Timestamp(2_120),
    };
    transfer_op(s, "k1", redrive).await;
    let claim = TransferOp::Claim {
        owner: owner("last"),
        now: Timestamp(2_130),
        lease_until: FUTURE,
    };
    assert!(
        state_of(&transfer_op(s, "k1", claim).await).2,
        "after the re-drive"
    );
}

/// Each transfer's id and its timeline, a step a line, in id order.
async fn all_timelines(s: &dyn Store) -> Vec<(String, Vec<String>)> {
    let all = s.transfers(None, 1_000).await.expect("transfers");
    all.iter()
        .map(|r| (r.id().to_string(), timeline_text(r)))
        .collect()
}

fn timeline_text(r: &TransferRecord) -> Vec<String> {
    r.timeline
        .steps()
        .iter()
        .map(|s| {
            let owner = s.owner.as_ref().map(|o| o.as_str()).unwrap_or("-");
            let reason = s.reason.as_ref().map(|r| r.to_string()).unwrap_or_default();
            let refund = s.refund.as_ref().map(|r| r.as_str()).unwrap_or("-");
            format!(
                "{} {} {owner} {} {reason:?} {refund}",
                s.at.as_ms(),
                s.state,
                s.epoch
            )
        })
        .collect()
}

/// Answers whether the store committed the one-phase steps (else they were inserts).
async fn every_state(s: &dyn Store) -> bool {
    claims_and_decisions_compare_and_set(s).await;
    holds_capture_void_and_expire(s).await;
    for id in ["h2", "h3"] {
        let finish = TransferOp::Finish { now: at(6_000) };
        assert_eq!(
            state_of(&transfer_op(s, id, finish).await).0,
            TransferState::Canceled
        );
    }
    refunds_link_once(s).await;
    one_phase_commits_whole_or_inserts(s).await
}

/// Every event of `s`, newest first, read `page` at a time.
async fn all_events_backwards(s: &dyn Store, page: usize) -> Vec<Event> {
    let mut all: Vec<Event> = Vec::new();
    loop {
        let before = all.last().map_or(FeedPosition::END, |e| e.position);
        let got = s
            .events_before(before, page)
            .await
            .expect("events before")
            .events;
        assert!(got.len() <= page, "at most the limit");
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

/// Every event of `s`, read `page` at a time.
async fn all_events(s: &dyn Store, page: usize) -> Vec<Event> {
    let mut all: Vec<Event> = Vec::new();
    loop {
        let after = all.last().map_or(FeedPosition::START, |e| e.position);
        let got = s.events(after, page).await.expect("events").events;
        assert!(got.len() <= page, "at most the limit");
        if got.is_empty() {
            return all;
        }
        all.extend(got);
    }
}

fn owner(s: &str) -> OwnerId {
    OwnerId::new(s).expect("valid id")
}

async fn one(s: &dyn Store, op: Op) -> Reply {
    let mut r = s.execute(vec![op]).await.expect("store call failed");
    assert_eq!(r.len(), 1, "one reply per op");
    r.pop().expect("one reply")
}

async fn create(s: &dyn Store, id: &str, lower_bound: LowerBound) -> Reply {
    one(
        s,
        Op::Account(
            acct(id),
            AccountOp::Create {
                asset: usd(),
                lower_bound,
            },
        ),
    )
    .await
}

async fn get(s: &dyn Store, id: &str) -> xfer_core::Account {
    match one(s, Op::Account(acct(id), AccountOp::Get)).await {
        Reply::Account(a) => std::sync::Arc::unwrap_or_clone(a),
        other => panic!("get {id}: {other}"),
    }
}

fn prepare_op(account: &str, t: &str, debit: u64, credit: u64, deadline: Timestamp) -> Op {
    Op::Account(
        acct(account),
        AccountOp::Prepare {
            transfer: tid(t),
            asset: usd(),
            debit,
            credit,
            deadline,
            horizon: FUTURE,
        },
    )
}

async fn prepare(s: &dyn Store, account: &str, t: &str, debit: u64, credit: u64) -> Reply {
    one(s, prepare_op(account, t, debit, credit, FUTURE)).await
}

async fn post(s: &dyn Store, account: &str, t: &str) -> Reply {
    one(
        s,
        Op::Account(
            acct(account),
            AccountOp::Post {
                transfer: tid(t),
                asset: usd(),
            },
        ),
    )
    .await
}

async fn release(s: &dyn Store, account: &str, t: &str, horizon: Timestamp) -> Reply {
    one(
        s,
        Op::Account(
            acct(account),
            AccountOp::Release {
                transfer: tid(t),
                asset: usd(),
                horizon,
            },
        ),
    )
    .await
}

/// Funds `id` with `amount` from an unbounded issuer through the protocol's own steps.
async fn fund(s: &dyn Store, id: &str, amount: u64) {
    create(s, "issuer", LowerBound::Unbounded).await;
    let t = format!("fund-{id}-{amount}");
    assert_eq!(
        prepare(s, "issuer", &t, amount, 0).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, id, &t, 0, amount).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    post(s, "issuer", &t).await;
    post(s, id, &t).await;
}

fn spec(id: &str, kind: TransferKind) -> TransferSpec {
    TransferSpec {
        id: tid(id),
        postings: vec![Posting {
            from: acct("a"),
            to: acct("b"),
            asset: usd(),
            amount: Amount::new(5, "amount").expect("valid"),
        }]
        .into(),
        metadata: String::new(),
        kind,
        refund_of: None,
        timeout_ms: 1_000,
    }
}

fn record(id: &str, now: u64) -> TransferRecord {
    TransferRecord::accept(spec(id, TransferKind::Transfer), Timestamp(now), 100)
}

async fn transfer_op(s: &dyn Store, id: &str, op: TransferOp) -> Reply {
    one(s, Op::Transfer(tid(id), op)).await
}

fn state_of(r: &Reply) -> (TransferState, u64, bool) {
    match r {
        Reply::Transfer(t) => (t.state, t.epoch, true),
        Reply::Unchanged(t) => (t.state, t.epoch, false),
        other => panic!("expected a transfer record, got {other}"),
    }
}

fn asset(code: &str, scale: u8) -> xfer_core::Asset {
    xfer_core::Asset::new(code, scale).expect("valid asset")
}

async fn assets_are_declared_once(s: &dyn Store) {
    assert_eq!(
        s.assets().await.expect("assets"),
        vec![],
        "a new catalog is empty"
    );
    let usd = asset("USD", 2);
    assert_eq!(s.declare_asset(&usd).await.expect("declare"), usd);
    assert_eq!(
        s.declare_asset(&usd).await.expect("repeat"),
        usd,
        "a repeat"
    );
    assert_eq!(
        s.declare_asset(&asset("USD", 0))
            .await
            .expect("other scale"),
        usd,
        "a declaration is never changed: the earlier one answers"
    );
    let longest = asset("ABCDEFGHIJ-_1234", 18);
    for a in [
        asset("POINTS", 0),
        asset("BTC", 8),
        longest.clone(),
        asset("JPY", 0),
    ] {
        assert_eq!(s.declare_asset(&a).await.expect("declare"), a);
    }
    let codes: Vec<(String, u8)> = s
        .assets()
        .await
        .expect("assets")
        .into_iter()
        .map(|a| (a.code.as_str().to_string(), a.scale))
        .collect();
    let want = [
        ("ABCDEFGHIJ-_1234", 18),
        ("BTC", 8),
        ("JPY", 0),
        ("POINTS", 0),
        ("USD", 2),
    ];
    let want: Vec<(String, u8)> = want.iter().map(|(c, n)| (c.to_string(), *n)).collect();
    assert_eq!(codes, want, "every declaration, in code order");
    // Two declarations of one code at once: one wins, and both are told the winner.
    let (a, b) = futures_util::future::join(
        s.declare_asset(&asset("EUR", 2)),
        s.declare_asset(&asset("EUR", 3)),
    )
    .await;
    let (a, b) = (a.expect("declare"), b.expect("declare"));
    assert_eq!(a, b, "both told the one declaration kept");
    let kept = s.assets().await.expect("assets");
    assert_eq!(kept.iter().filter(|x| x.code.as_str() == "EUR").count(), 1);
    assert!(kept.contains(&a));
}

fn meta(pairs: &[(&str, &str)]) -> crate::store::Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn account_metadata_is_kept_beside_the_account(s: &dyn Store) {
    let (a, b, c, x) = (acct("m-a"), acct("m-b"), acct("m-c"), acct("m-x"));
    let ids = |found: Vec<(AccountId, crate::store::Metadata)>| -> Vec<String> {
        found.into_iter().map(|(id, _)| id.to_string()).collect()
    };
    assert_eq!(
        s.account_metadata(std::slice::from_ref(&a))
            .await
            .expect("read"),
        vec![]
    );
    // Values are any text: quotes, backslashes, dollars, dots and non-ASCII survive.
    let odd = "é \"q\" \\ $x.y {}";
    let ma = meta(&[("owner", "alice"), ("tier", "gold"), ("note", odd)]);
    let (mb, mc) = (meta(&[("owner", "bob")]), meta(&[("owner", "alice")]));
    for (id, m) in [(&a, &ma), (&b, &mb), (&c, &mc)] {
        s.set_account_metadata(id, m).await.expect("set");
    }
    let got = s
        .account_metadata(&[c.clone(), x.clone(), a.clone()])
        .await
        .expect("read");
    assert_eq!(
        got,
        vec![(c.clone(), mc.clone()), (a.clone(), ma.clone())],
        "in the order asked"
    );
    let alice = |after: Option<AccountId>, limit| {
        let after = after.clone();
        async move {
            s.accounts_with_metadata("owner", "alice", after.as_ref(), limit)
                .await
                .expect("filter")
        }
    };
    assert_eq!(ids(alice(None, 10).await), ["m-a", "m-c"]);
    assert_eq!(alice(None, 1).await, vec![(a.clone(), ma.clone())]);
    assert_eq!(ids(alice(Some(a.clone()), 10).await), ["m-c"]);
    let by_note = s
        .accounts_with_metadata("note", odd, None, 10)
        .await
        .expect("filter");
    assert_eq!(ids(by_note), ["m-a"]);
    let none = s.accounts_with_metadata("owner", "carol", None, 10).await;
    assert_eq!(none.expect("filter"), vec![]);
    // A new map replaces the old one whole; an empty one removes it.
    let silver = meta(&[("tier", "silver")]);
    s.set_account_metadata(&a, &silver).await.expect("replace");
    assert_eq!(ids(alice(None, 10).await), ["m-c"]);
    assert_eq!(
        s.account_metadata(std::slice::from_ref(&a))
            .await
            .expect("read"),
        vec![(a.clone(), silver)]
    );
    s.set_account_metadata(&c, &meta(&[]))
        .await
        .expect("remove");
    assert_eq!(
        s.account_metadata(std::slice::from_ref(&c))
            .await
            .expect("read"),
        vec![]
    );
    assert_eq!(alice(None, 10).await, vec![]);
    assert_eq!(
        s.account_metadata(std::slice::from_ref(&b))
            .await
            .expect("read"),
        vec![(b, mb)]
    );
}

async fn accounts_are_created_once(s: &dyn Store) {
    assert!(matches!(
        create(s, "a", LowerBound::default()).await,
        Reply::Account(_)
    ));
    assert!(
        matches!(
            create(s, "a", LowerBound::default()).await,
            Reply::Account(_)
        ),
        "same body again"
    );
    assert_eq!(
        create(s, "a", LowerBound::Unbounded).await,
        Reply::Refused(Code::AccountExistsWithDifferentBody)
    );
    let a = get(s, "a").await;
    assert_eq!(
        (a.balance, a.reserved, a.incoming, a.status),
        (0, 0, 0, AccountStatus::Open)
    );
    assert_eq!(
        one(s, Op::Account(acct("nobody"), AccountOp::Get)).await,
        Reply::NotFound
    );
}

async fn prepare_reserves_and_repeats_are_no_ops(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    assert_eq!(
        prepare(s, "a", "t1", 60, 0).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, "a", "t1", 60, 0).await,
        Reply::Prepare(PrepareOutcome::AlreadyPrepared)
    );
    let a = get(s, "a").await;
    assert_eq!((a.balance, a.reserved, a.available()), (100, 60, 40));
    assert_eq!(a.intents[&tid("t1")].state, IntentState::Open);
}

async fn prepare_refusals_change_nothing(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    let before = get(s, "a").await;
    assert_eq!(
        prepare(s, "a", "t1", 101, 0).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::ExceedsAvailable))
    );
    let eur = AssetCode::new("EUR", "asset").expect("valid");
    let op = AccountOp::Prepare {
        transfer: tid("t2"),
        asset: eur,
        debit: 1,
        credit: 0,
        deadline: FUTURE,
        horizon: FUTURE,
    };
    assert_eq!(
        one(s, Op::Account(acct("a"), op)).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::AssetMismatch))
    );
    assert_eq!(
        prepare(s, "ghost", "t3", 0, 1).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::AccountNotFound))
    );
    assert_eq!(
        prepare(s, "a", "t4", 0, i64::MAX as u64).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::BalanceWouldOverflow))
    );
    assert_eq!(get(s, "a").await, before, "refusals change nothing");
}

async fn incoming_is_not_available(s: &dyn Store) {
    create(s, "b", LowerBound::default()).await;
    assert_eq!(
        prepare(s, "b", "t1", 0, 50).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, "b", "t2", 1, 0).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::ExceedsAvailable))
    );
    let b = get(s, "b").await;
    assert_eq!((b.balance, b.incoming, b.available()), (0, 50, 0));
}

/// The story: the overflow guard bounded only the balance's range, so an unbounded issuer
/// (balance 0) could prepare `i64::MAX` and then 1 more: `reserved` wrapped, and after the
/// posts the issuer held +`i64::MAX` — money created from nothing (found in review).
async fn counters_never_overflow(s: &dyn Store) {
    create(s, "issuer", LowerBound::Unbounded).await;
    let max = i64::MAX as u64;
    assert_eq!(
        prepare(s, "issuer", "t1", max, 0).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    let overflow = Reply::Prepare(PrepareOutcome::Refused(Code::BalanceWouldOverflow));
    assert_eq!(
        prepare(s, "issuer", "t2", 1, 0).await,
        overflow,
        "reserved would pass i64::MAX"
    );
    create(s, "sink", LowerBound::Unbounded).await;
    assert_eq!(
        prepare(s, "sink", "t3", 0, max).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, "sink", "t4", 0, 1).await,
        overflow,
        "incoming would pass i64::MAX"
    );
    let (issuer, sink) = (get(s, "issuer").await, get(s, "sink").await);
    assert_eq!(
        (issuer.reserved, sink.incoming),
        (i64::MAX, i64::MAX),
        "refusals changed nothing"
    );
}

async fn post_moves_money_once(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    create(s, "b", LowerBound::default()).await;
    fund(s, "a", 100).await;
    prepare(s, "a", "t1", 30, 0).await;
    prepare(s, "b", "t1", 0, 30).await;
    assert_eq!(post(s, "a", "t1").await, Reply::Post(PostOutcome::Posted));
    assert_eq!(post(s, "b", "t1").await, Reply::Post(PostOutcome::Posted));
    assert_eq!(
        post(s, "a", "t1").await,
        Reply::Post(PostOutcome::AlreadyPosted)
    );
    assert_eq!(
        prepare(s, "a", "t1", 30, 0).await,
        Reply::Prepare(PrepareOutcome::AlreadyPosted),
        "late prepare finds the tombstone"
    );
    assert_eq!(
        release(s, "a", "t1", FUTURE).await,
        Reply::Release(ReleaseOutcome::FoundPosted)
    );
    assert_eq!(
        post(s, "a", "never-prepared").await,
        Reply::Post(PostOutcome::Missing)
    );
    let (a, b) = (get(s, "a").await, get(s, "b").await);
    assert_eq!(
        (a.balance, a.reserved, b.balance, b.incoming),
        (70, 0, 30, 0)
    );
    assert_eq!(a.intents[&tid("t1")].state, IntentState::Posted);
}

async fn release_gives_back_once_and_marks_ahead(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    prepare(s, "a", "t1", 30, 0).await;
    assert_eq!(
        release(s, "a", "t1", FUTURE).await,
        Reply::Release(ReleaseOutcome::Released)
    );
    assert_eq!(
        release(s, "a", "t1", FUTURE).await,
        Reply::Release(ReleaseOutcome::AlreadyReleased)
    );
    assert_eq!(
        post(s, "a", "t1").await,
        Reply::Post(PostOutcome::FoundReleased)
    );
    assert_eq!(get(s, "a").await.reserved, 0);
    // A release that overtakes its prepare leaves a mark; the prepare then does nothing.
    assert_eq!(
        release(s, "a", "t2", FUTURE).await,
        Reply::Release(ReleaseOutcome::Marked)
    );
    assert_eq!(
        prepare(s, "a", "t2", 10, 0).await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased)
    );
    let a = get(s, "a").await;
    assert_eq!((a.balance, a.reserved, a.open_intents()), (100, 0, 0));
}

async fn release_on_a_missing_account_survives_its_creation(s: &dyn Store) {
    assert_eq!(
        release(s, "late", "t1", FUTURE).await,
        Reply::Release(ReleaseOutcome::Marked)
    );
    assert_eq!(
        one(s, Op::Account(acct("late"), AccountOp::Get)).await,
        Reply::NotFound,
        "a placeholder is not an account"
    );
    assert_eq!(
        prepare(s, "late", "t1", 0, 5).await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased)
    );
    assert!(matches!(
        create(s, "late", LowerBound::default()).await,
        Reply::Account(_)
    ));
    assert_eq!(
        prepare(s, "late", "t1", 0, 5).await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased),
        "the mark survived creation"
    );
    assert_eq!(get(s, "late").await.incoming, 0);
}

/// `account`'s whole history, newest first.
async fn history_of(s: &dyn Store, account: &str) -> Vec<String> {
    let page = s.history(&acct(account), None, 100).await.expect("history");
    assert_eq!(page.next, None, "one page");
    page.entries.iter().map(|(_, t)| t.to_string()).collect()
}

/// The story (issue 49): a transfer canceled because one account refused its prepare was
/// in the history of the accounts that prepared it, not in the refusing one's. The
/// account's first write for a transfer, intent or released mark, lists it, once.
async fn history_lists_a_transfer_once_on_every_account_it_names(s: &dyn Store) {
    for id in ["a", "b", "c", "d", "shut"] {
        create(s, id, LowerBound::default()).await;
    }
    fund(s, "a", 100).await;
    assert_eq!(
        prepare(s, "a", "t1", 10, 0).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, "c", "t1", 5, 0).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::ExceedsAvailable))
    );
    assert_eq!(
        history_of(s, "c").await,
        Vec::<String>::new(),
        "a refusal writes nothing"
    );
    assert_eq!(
        prepare(s, "b", "t1", 0, 15).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    for (account, outcome) in [
        ("a", ReleaseOutcome::Released),
        ("b", ReleaseOutcome::Released),
        ("c", ReleaseOutcome::Marked),
        ("a", ReleaseOutcome::AlreadyReleased),
        ("c", ReleaseOutcome::AlreadyReleased),
    ] {
        assert_eq!(
            release(s, account, "t1", FUTURE).await,
            Reply::Release(outcome),
            "release t1 on {account}"
        );
    }
    assert_eq!(
        prepare(s, "c", "t1", 5, 0).await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased)
    );
    assert_eq!(history_of(s, "a").await, ["t1", "fund-a-100"]);
    assert_eq!(history_of(s, "b").await, ["t1"]);
    assert_eq!(history_of(s, "c").await, ["t1"], "the refusing account too");
    // A release that overtakes the prepare: the mark lists it, the prepare then does not.
    release(s, "d", "t2", FUTURE).await;
    assert_eq!(
        prepare(s, "d", "t2", 0, 1).await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased)
    );
    assert_eq!(history_of(s, "d").await, ["t2"]);
    // A closed account named by a transfer lists it; a placeholder is no account.
    one(s, Op::Account(acct("shut"), AccountOp::Close)).await;
    prepare(s, "shut", "t3", 0, 1).await;
    release(s, "shut", "t3", FUTURE).await;
    assert_eq!(history_of(s, "shut").await, ["t3"]);
    release(s, "ghost", "t3", FUTURE).await;
    create(s, "ghost", LowerBound::default()).await;
    assert_eq!(history_of(s, "ghost").await, Vec::<String>::new());
    // A mark past its horizon may be pruned and the release repeated: still at most once.
    for _ in 0..2 {
        assert_eq!(
            release(s, "d", "t4", PAST).await,
            Reply::Release(ReleaseOutcome::Marked)
        );
        s.prune(100).await.expect("prune");
    }
    let listed = history_of(s, "d").await;
    assert!(
        listed.iter().filter(|t| *t == "t4").count() <= 1,
        "t4 listed twice: {listed:?}"
    );
}

async fn late_prepares_are_refused(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    assert_eq!(
        one(s, prepare_op("a", "t1", 10, 0, PAST)).await,
        Reply::Prepare(PrepareOutcome::TooLate)
    );
    assert_eq!(get(s, "a").await.reserved, 0);
}

async fn close_waits_for_transfers_in_flight(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    prepare(s, "a", "t1", 10, 0).await;
    let close = || Op::Account(acct("a"), AccountOp::Close);
    assert_eq!(
        one(s, close()).await,
        Reply::Refused(Code::AccountHasTransfersInFlight)
    );
    release(s, "a", "t1", FUTURE).await;
    assert!(
        matches!(one(s, close()).await, Reply::Account(a) if a.status == AccountStatus::Closed)
    );
    assert!(
        matches!(one(s, close()).await, Reply::Account(_)),
        "closing twice is fine"
    );
    assert_eq!(
        prepare(s, "a", "t2", 0, 1).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::AccountClosed))
    );
}

async fn lower_bounds_hold(s: &dyn Store) {
    create(s, "credit", LowerBound::Bounded(-50)).await;
    assert_eq!(
        prepare(s, "credit", "t1", 50, 0).await,
        Reply::Prepare(PrepareOutcome::Prepared)
    );
    assert_eq!(
        prepare(s, "credit", "t2", 1, 0).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::ExceedsAvailable))
    );
    let set = |lb| Op::Account(acct("credit"), AccountOp::SetLowerBound { lower_bound: lb });
    assert_eq!(
        one(s, set(LowerBound::Bounded(0))).await,
        Reply::Refused(Code::LowerBoundAboveAvailable)
    );
    assert!(matches!(
        one(s, set(LowerBound::Bounded(-60))).await,
        Reply::Account(_)
    ));
    assert_eq!(get(s, "credit").await.available(), 10);
}

async fn transfers_insert_once(s: &dyn Store) {
    let r = record("t1", 10);
    assert!(matches!(
        transfer_op(s, "t1", TransferOp::Insert(Arc::new(r.clone()))).await,
        Reply::Transfer(_)
    ));
    let again = transfer_op(s, "t1", TransferOp::Insert(Arc::new(record("t1", 99)))).await;
    assert!(
        matches!(&again, Reply::Unchanged(t) if t.created_at == Timestamp(10)),
        "same body: the first record"
    );
    let mut other = record("t1", 10);
    std::sync::Arc::make_mut(&mut other.spec).metadata = "different".into();
    assert_eq!(
        transfer_op(s, "t1", TransferOp::Insert(Arc::new(other))).await,
        Reply::Refused(Code::IdExistsWithDifferentBody)
    );
    assert_eq!(
        transfer_op(s, "nope", TransferOp::Get).await,
        Reply::NotFound
    );
}

async fn claims_and_decisions_compare_and_set(s: &dyn Store) {
    transfer_op(s, "t1", TransferOp::Insert(Arc::new(record("t1", 10)))).await;
    let claim = |o: &str, now: u64| TransferOp::Claim {
        owner: owner(o),
        now: Timestamp(now),
        lease_until: Timestamp(now + 100),
    };
    assert_eq!(
        state_of(&transfer_op(s, "t1", claim("x", 20)).await),
        (TransferState::Pending, 1, true)
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", claim("y", 30)).await),
        (TransferState::Pending, 1, false),
        "lease held"
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", claim("y", 120)).await),
        (TransferState::Pending, 2, true),
        "lease lapsed: takeover"
    );
    let decide = |epoch, to| TransferOp::Decide {
        epoch,
        to,
        reason: None,
        now: Timestamp(130),
    };
    assert!(
        !state_of(&transfer_op(s, "t1", decide(1, TransferState::Applied)).await).2,
        "zombie epoch"
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", decide(2, TransferState::Applied)).await),
        (TransferState::Applied, 2, true)
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", decide(2, TransferState::Canceling)).await).0,
        TransferState::Applied,
        "decided once"
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", claim("z", 500)).await),
        (TransferState::Applied, 3, true),
        "applied is taken over, not undone"
    );
    let finish = TransferOp::Finish {
        now: Timestamp(510),
    };
    assert_eq!(
        state_of(&transfer_op(s, "t1", finish.clone()).await).0,
        TransferState::Done
    );
    assert_eq!(
        state_of(&transfer_op(s, "t1", finish).await),
        (TransferState::Done, 3, false)
    );
    assert!(
        !state_of(&transfer_op(s, "t1", claim("z", 9_999)).await).2,
        "terminal is never claimed"
    );
}

/// Times far past any store clock, so that only the callers' clocks judge expiry here.
fn at(ms: u64) -> Timestamp {
    Timestamp(FUTURE.as_ms() / 2 + ms)
}

async fn holds_capture_void_and_expire(s: &dyn Store) {
    for id in ["h1", "h2", "h3"] {
        held(s, id).await;
    }
    let capture = |now| TransferOp::Capture {
        owner: owner("c"),
        now: at(now),
        lease_until: at(now + 100),
    };
    assert_eq!(
        state_of(&transfer_op(s, "h1", capture(10)).await),
        (TransferState::Applied, 2, true)
    );
    assert_eq!(
        state_of(&transfer_op(s, "h1", capture(11)).await),
        (TransferState::Applied, 2, false),
        "a repeated capture"
    );
    let void = TransferOp::Void {
        owner: owner("v"),
        now: at(10),
        lease_until: at(110),
    };
    assert_eq!(
        state_of(&transfer_op(s, "h1", void.clone()).await).0,
        TransferState::Applied,
        "captured stays captured"
    );
    assert_eq!(
        state_of(&transfer_op(s, "h2", void).await),
        (TransferState::Canceling, 2, true)
    );
    let early = TransferOp::Claim {
        owner: owner("s"),
        now: at(4_000),
        lease_until: at(4_100),
    };
    assert!(
        !state_of(&transfer_op(s, "h3", early).await).2,
        "not expired yet"
    );
    assert_eq!(
        transfer_op(s, "h3", capture(5_000)).await,
        Reply::Refused(Code::HoldExpired)
    );
    let late = TransferOp::Claim {
        owner: owner("s"),
        now: at(5_000),
        lease_until: at(5_100),
    };
    assert_eq!(
        state_of(&transfer_op(s, "h3", late).await),
        (TransferState::Canceling, 2, true)
    );
    // A capture resent with a stale clock is judged by the store's clock too: this hold
    // expired at t3, long before any store's now.
    let r = TransferRecord::accept(
        spec("h4", TransferKind::Hold { ttl_ms: 2 }),
        Timestamp(1),
        0,
    );
    transfer_op(s, "h4", TransferOp::Insert(Arc::new(r))).await;
    let claim = TransferOp::Claim {
        owner: owner("x"),
        now: Timestamp(1),
        lease_until: Timestamp(2),
    };
    transfer_op(s, "h4", claim).await;
    let held = TransferOp::Decide {
        epoch: 1,
        to: TransferState::Held,
        reason: None,
        now: Timestamp(1),
    };
    transfer_op(s, "h4", held).await;
    let stale = TransferOp::Capture {
        owner: owner("c"),
        now: Timestamp(2),
        lease_until: Timestamp(3),
    };
    assert_eq!(
        transfer_op(s, "h4", stale).await,
        Reply::Refused(Code::HoldExpired)
    );
}

async fn post_part(s: &dyn Store, account: &str, t: &str, debit: u64, credit: u64) -> Reply {
    let op = AccountOp::PostPart {
        transfer: tid(t),
        asset: usd(),
        debit,
        credit,
    };
    one(s, Op::Account(acct(account), op)).await
}

fn capture_part(amounts: &[u64], now: u64) -> TransferOp {
    TransferOp::CapturePart {
        owner: owner("c"),
        now: at(now),
        lease_until: at(now + 100),
        amounts: amounts
            .iter()
            .map(|a| Amount::new(*a, "amount").expect("valid"))
            .collect(),
    }
}

/// The captured amounts of `id`'s record, as it is.
async fn captured_of(s: &dyn Store, id: &str) -> (TransferState, Vec<u64>) {
    match transfer_op(s, id, TransferOp::Get).await {
        Reply::Unchanged(r) => (r.state, r.captured.iter().map(|a| a.units()).collect()),
        other => panic!("get {id}: {other}"),
    }
}

/// A hold captured in part: the capture keeps its amounts on the record once, whatever is
/// asked after; each account's post moves the captured part and gives the rest back in one
/// step, never more than the intent; refunds are judged against what was captured.
async fn holds_capture_in_part(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    create(s, "b", LowerBound::default()).await;
    create(s, "c", LowerBound::default()).await;
    fund(s, "a", 100).await;
    fund(s, "c", 10).await;
    prepare(s, "a", "p1", 30, 0).await;
    prepare(s, "b", "p1", 0, 30).await;
    prepare(s, "c", "p1", 10, 4).await;
    let before = (get(s, "a").await, get(s, "b").await);
    assert_eq!(
        post_part(s, "a", "p1", 31, 0).await,
        Reply::Refused(Code::CaptureExceedsHold)
    );
    assert_eq!(
        post_part(s, "b", "p1", 0, 31).await,
        Reply::Refused(Code::CaptureExceedsHold)
    );
    assert_eq!(
        (get(s, "a").await, get(s, "b").await),
        before,
        "a refused post changes nothing"
    );
    assert_eq!(
        post_part(s, "a", "p1", 12, 0).await,
        Reply::Post(PostOutcome::Posted)
    );
    assert_eq!(
        post_part(s, "a", "p1", 12, 0).await,
        Reply::Post(PostOutcome::AlreadyPosted)
    );
    assert_eq!(
        post(s, "a", "p1").await,
        Reply::Post(PostOutcome::AlreadyPosted)
    );
    assert_eq!(
        post_part(s, "b", "p1", 0, 12).await,
        Reply::Post(PostOutcome::Posted)
    );
    assert_eq!(
        post_part(s, "c", "p1", 7, 4).await,
        Reply::Post(PostOutcome::Posted),
        "debit in part, credit whole"
    );
    assert_eq!(
        release(s, "b", "p1", FUTURE).await,
        Reply::Release(ReleaseOutcome::FoundPosted)
    );
    assert_eq!(
        post_part(s, "a", "never-prepared", 1, 0).await,
        Reply::Post(PostOutcome::Missing)
    );
    let (a, b, c) = (get(s, "a").await, get(s, "b").await, get(s, "c").await);
    assert_eq!(
        (a.balance, a.reserved, b.balance, b.incoming),
        (88, 0, 12, 0)
    );
    assert_eq!((c.balance, c.reserved, c.incoming), (7, 0, 0));
    assert_eq!(a.intents[&tid("p1")].state, IntentState::Posted);
    for account in [&a, &b, &c] {
        account.check_sums().expect("sums");
    }

    // The capture decision keeps its amounts, once.
    for id in ["h1", "h2", "h3", "h4"] {
        held(s, id).await;
    }
    assert_eq!(
        state_of(&transfer_op(s, "h1", capture_part(&[3], 10)).await),
        (TransferState::Applied, 2, true)
    );
    assert_eq!(
        captured_of(s, "h1").await,
        (TransferState::Applied, vec![3])
    );
    for again in [capture_part(&[3], 11), capture_part(&[2], 11)] {
        assert_eq!(
            state_of(&transfer_op(s, "h1", again).await),
            (TransferState::Applied, 2, false),
            "a repeat, or other amounts, changes nothing"
        );
    }
    let whole = TransferOp::Capture {
        owner: owner("c"),
        now: at(12),
        lease_until: at(112),
    };
    transfer_op(s, "h1", whole.clone()).await;
    assert_eq!(
        captured_of(s, "h1").await,
        (TransferState::Applied, vec![3])
    );
    transfer_op(s, "h1", TransferOp::Finish { now: at(20) }).await;
    assert_eq!(captured_of(s, "h1").await, (TransferState::Done, vec![3]));
    // Refunds take back at most what was captured.
    let h1 = match transfer_op(s, "h1", TransferOp::Get).await {
        Reply::Unchanged(r) => r,
        other => panic!("get h1: {other}"),
    };
    assert_eq!(
        transfer_op(s, "h1", partial_link(&h1, "hr1", &[], &[4])).await,
        Reply::Refused(Code::RefundMustReverseOriginal),
        "more than was captured does not reverse it"
    );
    assert!(state_of(&transfer_op(s, "h1", partial_link(&h1, "hr1", &[], &[2])).await).2);
    assert_eq!(
        transfer_op(s, "h1", partial_link(&h1, "hr2", &[], &[2])).await,
        Reply::Refused(Code::RefundExceedsOriginal)
    );
    assert!(state_of(&transfer_op(s, "h1", partial_link(&h1, "hr2", &[], &[1])).await).2);
    assert_eq!(
        transfer_op(s, "h1", partial_link(&h1, "hr3", &[], &[1])).await,
        Reply::Refused(Code::OriginalAlreadyRefunded)
    );
    assert_eq!(captured_of(s, "h1").await, (TransferState::Done, vec![3]));

    // Captured whole: nothing kept. Voided or expired: a capture in part changes nothing.
    transfer_op(s, "h2", whole).await;
    assert_eq!(captured_of(s, "h2").await, (TransferState::Applied, vec![]));
    assert_eq!(
        transfer_op(s, "h3", capture_part(&[1], 5_000)).await,
        Reply::Refused(Code::HoldExpired)
    );
    let void = TransferOp::Void {
        owner: owner("v"),
        now: at(10),
        lease_until: at(110),
    };
    transfer_op(s, "h4", void).await;
    assert_eq!(
        state_of(&transfer_op(s, "h4", capture_part(&[1], 11)).await),
        (TransferState::Canceling, 2, false)
    );
    assert_eq!(
        captured_of(s, "h4").await,
        (TransferState::Canceling, vec![])
    );
    assert_eq!(
        transfer_op(s, "none", capture_part(&[1], 11)).await,
        Reply::NotFound
    );
}

/// A hold `id` accepted at t0 with a ttl of 5,000 ms, claimed and held.
async fn held(s: &dyn Store, id: &str) {
    let r = TransferRecord::accept(spec(id, TransferKind::Hold { ttl_ms: 5_000 }), at(0), 100);
    transfer_op(s, id, TransferOp::Insert(Arc::new(r))).await;
    let claim = TransferOp::Claim {
        owner: owner("x"),
        now: at(1),
        lease_until: at(101),
    };
    transfer_op(s, id, claim).await;
    let decide = TransferOp::Decide {
        epoch: 1,
        to: TransferState::Held,
        reason: None,
        now: at(2),
    };
    assert_eq!(
        state_of(&transfer_op(s, id, decide).await).0,
        TransferState::Held
    );
}

/// A hold's expiry moves later while it has not passed, never earlier; the sweeper sees the
/// new one; a settled, expired or unheld transfer is not extended.
async fn holds_extend_before_they_expire(s: &dyn Store) {
    let extend = |until: u64, now: u64| TransferOp::Extend {
        until: at(until),
        now: at(now),
    };
    let expiry = |r: &Reply| match r {
        Reply::Transfer(t) | Reply::Unchanged(t) => {
            t.hold_expires_at.map(|e| e.as_ms() - at(0).as_ms())
        }
        other => panic!("expected a record, got {other}"),
    };
    held(s, "x1").await;
    let r = transfer_op(s, "x1", extend(9_000, 100)).await;
    assert!(matches!(r, Reply::Transfer(_)), "{r}");
    assert_eq!(expiry(&r), Some(9_000));
    let r = transfer_op(s, "x1", extend(9_000, 200)).await;
    assert!(matches!(r, Reply::Unchanged(_)), "a repeat: {r}");
    let r = transfer_op(s, "x1", extend(7_000, 300)).await;
    assert!(matches!(r, Reply::Unchanged(_)), "never earlier: {r}");
    assert_eq!(expiry(&r), Some(9_000));
    // The sweeper wakes at the new expiry, and a claim before it finds it not expired.
    let due = s.scan_due(at(8_000), 100).await.expect("scan");
    assert!(
        !due.iter().any(|r| r.id().as_str() == "x1"),
        "not due before 9,000"
    );
    let due = s.scan_due(at(9_000), 100).await.expect("scan");
    assert!(due.iter().any(|r| r.id().as_str() == "x1"), "due at 9,000");
    let early = TransferOp::Claim {
        owner: owner("s"),
        now: at(6_000),
        lease_until: at(6_100),
    };
    assert!(
        !state_of(&transfer_op(s, "x1", early).await).2,
        "not expired at 6,000"
    );
    let capture = TransferOp::Capture {
        owner: owner("c"),
        now: at(8_500),
        lease_until: at(8_600),
    };
    assert_eq!(
        state_of(&transfer_op(s, "x1", capture).await),
        (TransferState::Applied, 2, true),
        "captured after the first expiry, before the new one"
    );
    let r = transfer_op(s, "x1", extend(12_000, 8_600)).await;
    assert!(
        matches!(&r, Reply::Unchanged(t) if t.state == TransferState::Applied),
        "a captured hold stays as it is: {r}"
    );
    assert_eq!(expiry(&r), Some(9_000));

    // Past its expiry, by the caller's clock or the store's: refused.
    held(s, "x2").await;
    assert_eq!(
        transfer_op(s, "x2", extend(9_000, 5_000)).await,
        Reply::Refused(Code::HoldExpired)
    );
    let r = TransferRecord::accept(
        spec("x3", TransferKind::Hold { ttl_ms: 2 }),
        Timestamp(1),
        0,
    );
    transfer_op(s, "x3", TransferOp::Insert(Arc::new(r))).await;
    let claim = TransferOp::Claim {
        owner: owner("x"),
        now: Timestamp(1),
        lease_until: Timestamp(2),
    };
    transfer_op(s, "x3", claim).await;
    let decide = TransferOp::Decide {
        epoch: 1,
        to: TransferState::Held,
        reason: None,
        now: Timestamp(2),
    };
    transfer_op(s, "x3", decide).await;
    let stale = TransferOp::Extend {
        until: FUTURE,
        now: Timestamp(2),
    };
    assert_eq!(
        transfer_op(s, "x3", stale).await,
        Reply::Refused(Code::HoldExpired),
        "expired at t3 by the store's clock"
    );

    // Not held yet, or not there.
    transfer_op(s, "x4", TransferOp::Insert(Arc::new(record("x4", 0)))).await;
    assert_eq!(
        transfer_op(s, "x4", extend(9_000, 10)).await,
        Reply::Refused(Code::TransferIsNotHeld)
    );
    assert_eq!(
        transfer_op(s, "x5", extend(9_000, 10)).await,
        Reply::NotFound
    );
}

async fn refunds_link_once(s: &dyn Store) {
    let mut r = record("o1", 0);
    r.state = TransferState::Done;
    transfer_op(s, "o1", TransferOp::Insert(Arc::new(r.clone()))).await;
    let reversed = r.spec.reversed_postings();
    let link =
        |refund: &str, replacing: Option<&str>, postings: Vec<Posting>| TransferOp::LinkRefund {
            refund: tid(refund),
            replacing: replacing.map(tid).into_iter().collect(),
            postings,
            now: at(8_000 + refund.len() as u64 * 10 + u64::from(replacing.is_some())),
        };
    assert_eq!(
        transfer_op(s, "o1", link("r1", None, r.spec.postings.to_vec())).await,
        Reply::Refused(Code::RefundMustReverseOriginal)
    );
    assert!(
        matches!(transfer_op(s, "o1", link("r1", None, reversed.clone())).await, Reply::Transfer(t) if t.refunded_by == Some(tid("r1")))
    );
    assert!(
        matches!(
            transfer_op(s, "o1", link("r1", None, reversed.clone())).await,
            Reply::Unchanged(_)
        ),
        "repeat"
    );
    assert_eq!(
        transfer_op(s, "o1", link("r2", None, reversed.clone())).await,
        Reply::Refused(Code::OriginalAlreadyRefunded)
    );
    assert!(
        matches!(transfer_op(s, "o1", link("r2", Some("r1"), reversed)).await, Reply::Transfer(t) if t.refunded_by == Some(tid("r2")))
    );
    transfer_op(s, "p1", TransferOp::Insert(Arc::new(record("p1", 0)))).await;
    assert_eq!(
        transfer_op(s, "p1", link("r3", None, vec![])).await,
        Reply::Refused(Code::OriginalIsNotDone)
    );
}

/// A done transfer of `amounts` from a to b and from c to d, inserted as `id`.
async fn done_of_two_postings(s: &dyn Store, id: &str, amounts: [u64; 2]) -> TransferRecord {
    let mut spec = spec(id, TransferKind::Transfer);
    let posting = |from: &str, to: &str, amount| Posting {
        from: acct(from),
        to: acct(to),
        asset: usd(),
        amount: Amount::new(amount, "amount").expect("valid"),
    };
    spec.postings = vec![posting("a", "b", amounts[0]), posting("c", "d", amounts[1])].into();
    let mut r = TransferRecord::accept(spec, Timestamp(0), 100);
    r.state = TransferState::Done;
    transfer_op(s, id, TransferOp::Insert(Arc::new(r.clone()))).await;
    r
}

/// `original`'s postings reversed with `amounts`.
fn refund_postings(original: &TransferRecord, amounts: &[u64]) -> Vec<Posting> {
    let mut postings = original.spec.reversed_postings();
    for (p, a) in postings.iter_mut().zip(amounts) {
        p.amount = Amount::new(*a, "amount").expect("valid");
    }
    postings
}

fn partial_link(
    original: &TransferRecord,
    refund: &str,
    replacing: &[&str],
    amounts: &[u64],
) -> TransferOp {
    TransferOp::LinkRefund {
        refund: tid(refund),
        replacing: replacing.iter().map(|r| tid(r)).collect(),
        postings: refund_postings(original, amounts),
        now: at(8_500),
    }
}

/// The refunds `id`'s record links, each with its amounts, and its `refunded_by`.
async fn links_of(s: &dyn Store, id: &str) -> (Vec<(String, Vec<u64>)>, Option<String>) {
    let r = match transfer_op(s, id, TransferOp::Get).await {
        Reply::Unchanged(r) => r,
        other => panic!("get {id}: {other}"),
    };
    let links = r
        .refund_links()
        .iter()
        .map(|l| {
            let amounts = l.amounts.iter().map(|a| a.units()).collect();
            (l.refund.to_string(), amounts)
        })
        .collect();
    (links, r.refunded_by.as_ref().map(|t| t.to_string()))
}

fn links(list: &[(&str, &[u64])]) -> Vec<(String, Vec<u64>)> {
    list.iter()
        .map(|(r, a)| (r.to_string(), a.to_vec()))
        .collect()
}

/// Partial refunds: several per original, posting by posting never above it, each link
/// judged against the links before it; canceled refunds' links dropped when replaced.
async fn partial_refunds_never_sum_above_the_original(s: &dyn Store) {
    let o = done_of_two_postings(s, "o3", [5, 7]).await;
    let changed = |r: &Reply| matches!(r, Reply::Transfer(_));
    assert!(changed(
        &transfer_op(s, "o3", partial_link(&o, "q1", &[], &[2, 3])).await
    ));
    assert_eq!(
        links_of(s, "o3").await,
        (links(&[("q1", &[2, 3])]), Some("q1".into()))
    );
    assert_eq!(
        transfer_op(s, "o3", partial_link(&o, "q2", &[], &[3, 5])).await,
        Reply::Refused(Code::RefundExceedsOriginal),
        "3 + 5 of the second posting's 7"
    );
    // Not the original's shape: one posting of two, an amount above the posting's, a
    // posting not reversed.
    for postings in [
        refund_postings(&o, &[1, 1])[..1].to_vec(),
        refund_postings(&o, &[6, 1]),
        {
            let mut p = refund_postings(&o, &[1, 1]);
            let q = &mut p[1];
            std::mem::swap(&mut q.from, &mut q.to);
            p
        },
    ] {
        let op = TransferOp::LinkRefund {
            refund: tid("q2"),
            replacing: vec![],
            postings,
            now: at(8_500),
        };
        assert_eq!(
            transfer_op(s, "o3", op).await,
            Reply::Refused(Code::RefundMustReverseOriginal)
        );
    }
    assert!(changed(
        &transfer_op(s, "o3", partial_link(&o, "q2", &[], &[3, 4])).await
    ));
    assert!(
        matches!(
            transfer_op(s, "o3", partial_link(&o, "q1", &[], &[2, 3])).await,
            Reply::Unchanged(_)
        ),
        "a repeat of an earlier link"
    );
    assert_eq!(
        links_of(s, "o3").await,
        (
            links(&[("q1", &[2, 3]), ("q2", &[3, 4])]),
            Some("q2".into())
        )
    );
    assert_eq!(
        transfer_op(s, "o3", partial_link(&o, "q3", &[], &[1, 1])).await,
        Reply::Refused(Code::OriginalAlreadyRefunded),
        "5 of 5 and 7 of 7 taken back"
    );
    // q1 was canceled: its link goes, q3's comes; an id not linked is ignored.
    assert!(changed(
        &transfer_op(s, "o3", partial_link(&o, "q3", &["q1", "zz"], &[1, 1])).await
    ));
    assert_eq!(
        links_of(s, "o3").await,
        (
            links(&[("q2", &[3, 4]), ("q3", &[1, 1])]),
            Some("q3".into())
        )
    );
    assert_eq!(
        transfer_op(s, "o3", partial_link(&o, "q4", &["q2"], &[5, 7])).await,
        Reply::Refused(Code::RefundExceedsOriginal),
        "q3's 1 and 1 stay"
    );
    assert_eq!(
        links_of(s, "o3").await.0.len(),
        2,
        "a refused link drops nothing it would replace"
    );
    assert!(changed(
        &transfer_op(s, "o3", partial_link(&o, "q4", &["q2", "q3"], &[5, 7])).await
    ));
    assert_eq!(
        links_of(s, "o3").await,
        (links(&[("q4", &[5, 7])]), Some("q4".into()))
    );

    // At most REFUNDS_MAX links.
    let o = done_of_two_postings(s, "o4", [100, 100]).await;
    for i in 0..xfer_core::REFUNDS_MAX {
        let op = partial_link(&o, &format!("m{i}"), &[], &[1, 1]);
        assert!(changed(&transfer_op(s, "o4", op).await), "link {i}");
    }
    let last = partial_link(&o, "m-last", &[], &[1, 1]);
    assert_eq!(
        transfer_op(s, "o4", last).await,
        Reply::Refused(Code::TooManyRefunds)
    );
    let last = partial_link(&o, "m-last", &["m0"], &[1, 1]);
    assert!(changed(&transfer_op(s, "o4", last).await));

    // Two links that together exceed it, in one call: one succeeds. (Two calls at once:
    // `xfer/tests/api.rs` `partial_refunds`, over HTTP on every store.)
    let o = done_of_two_postings(s, "o5", [5, 7]).await;
    let replies = s
        .execute(vec![
            Op::Transfer(tid("o5"), partial_link(&o, "c1", &[], &[3, 4])),
            Op::Transfer(tid("o5"), partial_link(&o, "c2", &[], &[3, 4])),
        ])
        .await
        .expect("batch");
    assert_eq!(
        replies.iter().filter(|r| changed(r)).count(),
        1,
        "{replies:?}"
    );
    assert!(replies.contains(&Reply::Refused(Code::RefundExceedsOriginal)));
    // Sums near the largest amount are exact.
    let mut big = record("o8", 0);
    big.state = TransferState::Done;
    let mut postings = big.spec.postings.to_vec();
    postings[0].amount = Amount::new(AMOUNT_MAX, "amount").expect("valid");
    big.spec = Arc::new(TransferSpec {
        postings: postings.into(),
        ..TransferSpec::clone(&big.spec)
    });
    transfer_op(s, "o8", TransferOp::Insert(Arc::new(big.clone()))).await;
    assert!(changed(
        &transfer_op(s, "o8", partial_link(&big, "b1", &[], &[AMOUNT_MAX - 2])).await
    ));
    assert_eq!(
        transfer_op(s, "o8", partial_link(&big, "b2", &[], &[3])).await,
        Reply::Refused(Code::RefundExceedsOriginal),
        "2^63 - 3 + 3 of 2^63 - 1"
    );
    assert!(changed(
        &transfer_op(s, "o8", partial_link(&big, "b2", &[], &[2])).await
    ));
    assert_eq!(
        links_of(s, "o8").await,
        (
            links(&[("b1", &[AMOUNT_MAX - 2]), ("b2", &[2])]),
            Some("b2".into())
        )
    );
    assert_eq!(
        transfer_op(s, "o8", partial_link(&big, "b3", &[], &[1])).await,
        Reply::Refused(Code::OriginalAlreadyRefunded),
        "2^63 - 1 of 2^63 - 1"
    );

    // A record written before partial refunds: its one refund took everything back.
    let mut old = record("o7", 0);
    old.state = TransferState::Done;
    old.refunded_by = Some(tid("old"));
    transfer_op(s, "o7", TransferOp::Insert(Arc::new(old.clone()))).await;
    assert_eq!(
        transfer_op(s, "o7", partial_link(&old, "n1", &[], &[1])).await,
        Reply::Refused(Code::OriginalAlreadyRefunded)
    );
    assert!(matches!(
        transfer_op(s, "o7", partial_link(&old, "old", &[], &[5])).await,
        Reply::Unchanged(_)
    ));
    assert!(changed(
        &transfer_op(s, "o7", partial_link(&old, "n1", &["old"], &[1])).await
    ));
    assert_eq!(
        links_of(s, "o7").await,
        (links(&[("n1", &[1])]), Some("n1".into()))
    );
}

async fn sweeper_scan_is_due_first_and_skips_terminal(s: &dyn Store) {
    for (id, now) in [("late", 300), ("early", 100), ("mid", 200), ("fin", 0)] {
        transfer_op(s, id, TransferOp::Insert(Arc::new(record(id, now)))).await;
    }
    let op = TransferOp::Claim {
        owner: owner("x"),
        now: Timestamp(1),
        lease_until: Timestamp(2),
    };
    transfer_op(s, "fin", op).await;
    transfer_op(
        s,
        "fin",
        TransferOp::Decide {
            epoch: 1,
            to: TransferState::Canceling,
            reason: None,
            now: Timestamp(1),
        },
    )
    .await;
    transfer_op(s, "fin", TransferOp::Finish { now: Timestamp(1) }).await;
    let due = s.scan_due(Timestamp(350), 10).await.expect("scan");
    let ids: Vec<_> = due.iter().map(|r| r.id().to_string()).collect();
    assert_eq!(
        ids,
        ["early", "mid"],
        "wake times 200, 300, 400: earliest first, due only"
    );
    let due = s.scan_due(Timestamp(250), 10).await.expect("scan");
    assert_eq!(due.len(), 1);
    assert_eq!(
        s.scan_due(Timestamp(10_000), 2).await.expect("scan").len(),
        2,
        "limit"
    );
}

/// The escalation of `id`'s record, as it is.
async fn escalation_of(s: &dyn Store, id: &str) -> (TransferRecord, Option<xfer_core::Escalation>) {
    match transfer_op(s, id, TransferOp::Get).await {
        Reply::Unchanged(r) => {
            let e = r.escalation.clone();
            (Arc::unwrap_or_clone(r), e)
        }
        other => panic!("get {id}: {other}"),
    }
}

/// An escalation marks a non-terminal record once, changes nothing else, stays in the due
/// scan (the stuck list reads it there) and is cleared by a re-drive, lapsed or not.
async fn escalation_marks_once_until_a_redrive(s: &dyn Store) {
    transfer_op(s, "e1", TransferOp::Insert(Arc::new(record("e1", 10)))).await;
    let (before, none) = escalation_of(s, "e1").await;
    assert_eq!(none, None);
    // Quotes, backslashes, non-ASCII, and the longest error kept.
    let mut error = "store corrupted: \"x\" \\ é $a.b ".to_string();
    while error.len() < xfer_core::transfer::ESCALATION_ERROR_LEN_MAX {
        error.push('z');
    }
    let first = xfer_core::Escalation::new(3, &error, Timestamp(50));
    assert_eq!(
        first.error.len(),
        xfer_core::transfer::ESCALATION_ERROR_LEN_MAX
    );
    let escalate = |e: &xfer_core::Escalation| TransferOp::Escalate {
        escalation: e.clone(),
    };
    assert!(state_of(&transfer_op(s, "e1", escalate(&first)).await).2);
    let (after, kept) = escalation_of(s, "e1").await;
    assert_eq!(kept.as_ref(), Some(&first));
    assert_eq!(
        TransferRecord {
            escalation: None,
            ..after
        },
        before,
        "nothing else changes"
    );
    let other = xfer_core::Escalation::new(9, "other", Timestamp(60));
    assert!(
        !state_of(&transfer_op(s, "e1", escalate(&other)).await).2,
        "marked once"
    );
    assert_eq!(escalation_of(s, "e1").await.1, Some(first.clone()));
    let due = s.scan_due(Timestamp(10_000), 10).await.expect("scan");
    assert_eq!(
        due.iter()
            .map(|r| (r.id().as_str(), r.escalation.clone()))
            .collect::<Vec<_>>(),
        [("e1", Some(first.clone()))],
        "escalated, still due, read with its mark"
    );
    // A re-drive clears it: before the lease lapses (which it lapses), and after.
    let redrive = |now| TransferOp::Redrive {
        now: Timestamp(now),
    };
    assert!(state_of(&transfer_op(s, "e1", redrive(20)).await).2);
    let (r, none) = escalation_of(s, "e1").await;
    assert_eq!((none, r.lease_until), (None, Timestamp(20)));
    transfer_op(s, "e1", escalate(&other)).await;
    assert_eq!(escalation_of(s, "e1").await.1, Some(other));
    assert!(state_of(&transfer_op(s, "e1", redrive(1_000)).await).2);
    let (r, none) = escalation_of(s, "e1").await;
    assert_eq!(
        (none, r.lease_until),
        (None, Timestamp(20)),
        "a lapsed lease stays"
    );
    assert!(
        !state_of(&transfer_op(s, "e1", redrive(1_000)).await).2,
        "nothing to re-drive"
    );
    // A terminal record is never marked; a missing one is not found.
    let mut done = record("e2", 10);
    done.state = TransferState::Done;
    transfer_op(s, "e2", TransferOp::Insert(Arc::new(done))).await;
    assert!(!state_of(&transfer_op(s, "e2", escalate(&first)).await).2);
    assert_eq!(escalation_of(s, "e2").await.1, None);
    assert_eq!(
        transfer_op(s, "e3", escalate(&first)).await,
        Reply::NotFound
    );
}

async fn history_is_newest_first_and_paged(s: &dyn Store) {
    create(s, "b", LowerBound::default()).await;
    for i in 0..5 {
        prepare(s, "b", &format!("t{i}"), 0, 1).await;
    }
    let page = s.history(&acct("b"), None, 2).await.expect("history");
    let ids: Vec<_> = page.entries.iter().map(|(_, t)| t.to_string()).collect();
    assert_eq!(ids, ["t4", "t3"]);
    let page = s.history(&acct("b"), page.next, 2).await.expect("history");
    let ids: Vec<_> = page.entries.iter().map(|(_, t)| t.to_string()).collect();
    assert_eq!(ids, ["t2", "t1"]);
    let page = s.history(&acct("b"), page.next, 2).await.expect("history");
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.next, None);
}

async fn prune_drops_only_expired_tombstones(s: &dyn Store) {
    create(s, "a", LowerBound::default()).await;
    fund(s, "a", 100).await;
    let op = |t: &str, horizon| {
        Op::Account(
            acct("a"),
            AccountOp::Prepare {
                transfer: tid(t),
                asset: usd(),
                debit: 1,
                credit: 0,
                deadline: FUTURE,
                horizon,
            },
        )
    };
    for t in ["old", "young", "open"] {
        let horizon = if t == "old" { PAST } else { FUTURE };
        one(s, op(t, horizon)).await;
    }
    post(s, "a", "old").await;
    release(s, "a", "young", FUTURE).await;
    release(s, "ghost", "x", PAST).await;
    let dropped = s.prune(100).await.expect("prune");
    assert_eq!(
        dropped, 2,
        "the old tombstone and the ghost placeholder's mark"
    );
    let a = get(s, "a").await;
    let left: Vec<_> = a.intents.keys().map(|t| t.to_string()).collect();
    assert_eq!(
        left,
        ["fund-a-100", "open", "young"],
        "young tombstones and open intents stay"
    );
    assert_eq!(
        prepare(s, "ghost", "x", 0, 1).await,
        Reply::Prepare(PrepareOutcome::Refused(Code::AccountNotFound))
    );
}

async fn batches_are_independent_per_record(s: &dyn Store) {
    create(s, "hot", LowerBound::default()).await;
    fund(s, "hot", 500).await;
    let ops: Vec<Op> = (0..1_000)
        .map(|i| prepare_op("hot", &format!("t{i}"), 1, 0, FUTURE))
        .collect();
    let replies = s.execute(ops).await.expect("batch");
    let prepared = replies
        .iter()
        .filter(|r| **r == Reply::Prepare(PrepareOutcome::Prepared))
        .count();
    let refused = replies
        .iter()
        .filter(|r| **r == Reply::Prepare(PrepareOutcome::Refused(Code::ExceedsAvailable)))
        .count();
    assert_eq!(
        (prepared, refused),
        (500, 500),
        "each op judged on its own, in order"
    );
    let hot = get(s, "hot").await;
    assert_eq!((hot.reserved, hot.available()), (500, 0));
}

/// A transfer of `amount` from "a" to `to`, claimed by "o", with a deadline no store clock
/// reaches: the record a submitter sends for the one-phase commit.
fn claimed(id: &str, to: &str, amount: u64) -> Arc<TransferRecord> {
    let mut spec = spec(id, TransferKind::Transfer);
    let posting = &mut spec.postings[0];
    posting.to = acct(to);
    posting.amount = Amount::new(amount, "amount").expect("valid");
    let mut r = TransferRecord::accept_claimed(spec, at(10), owner("o"), FUTURE);
    r.deadline = FUTURE;
    Arc::new(r)
}

/// The one-phase commit (`record::one_phase_allows`): where every leg's prepare would
/// succeed, the record is kept `done` and every leg's amounts move, with no intent left,
/// once; otherwise it is the insert and nothing moves. Answers whether the first one
/// committed (a store may always answer as the insert).
async fn one_phase_commits_whole_or_inserts(s: &dyn Store) -> bool {
    for id in ["a", "b"] {
        create(s, id, LowerBound::default()).await;
    }
    fund(s, "a", 100).await;
    let one_phase =
        |r: &Arc<TransferRecord>| Op::Transfer(r.id().clone(), TransferOp::OnePhase(Arc::clone(r)));
    let first = claimed("q1", "b", 30);
    let committed = match one(s, one_phase(&first)).await {
        Reply::Transfer(t) if t.state == TransferState::Done => {
            assert_eq!(t.owner, None, "a done record has no owner");
            assert_eq!(t.updated_at, t.created_at, "done when created");
            assert_eq!(t.spec, first.spec);
            assert_eq!(
                (get(s, "a").await.balance, get(s, "b").await.balance),
                (70, 30)
            );
            for id in ["a", "b"] {
                assert!(
                    get(s, id).await.intents.get(&tid("q1")).is_none(),
                    "no intent"
                );
                assert_eq!(
                    history_of(s, id).await.first().map(String::as_str),
                    Some("q1")
                );
            }
            true
        }
        Reply::Transfer(t) => {
            assert_eq!(*t, *first, "not committed: the insert");
            assert_eq!(
                (get(s, "a").await.balance, get(s, "b").await.balance),
                (100, 0)
            );
            false
        }
        other => panic!("a one-phase commit answered {other}"),
    };
    // A repeat, or an insert of the same, answers the record and moves nothing again.
    for op in [
        one_phase(&first),
        Op::Transfer(tid("q1"), TransferOp::Insert(first.clone())),
    ] {
        let again = one(s, op).await;
        assert!(
            matches!(&again, Reply::Unchanged(t) if t.state == if committed { TransferState::Done } else { TransferState::Pending }),
            "a repeat answered {again}"
        );
    }
    let balances = (get(s, "a").await.balance, get(s, "b").await.balance);
    assert_eq!(balances, if committed { (70, 30) } else { (100, 0) });
    assert_eq!(
        one(s, one_phase(&claimed("q1", "b", 31))).await,
        Reply::Refused(Code::IdExistsWithDifferentBody)
    );
    // A leg whose prepare would be refused (too much, no such account, too late): the
    // insert, claimed by its submitter, and nothing moves.
    let mut late = (*claimed("q4", "b", 1)).clone();
    late.deadline = PAST;
    for r in [
        claimed("q2", "b", 1_000),
        claimed("q3", "ghost", 1),
        Arc::new(late),
    ] {
        match one(s, one_phase(&r)).await {
            Reply::Transfer(t) => assert_eq!(*t, *r, "the insert of {}", r.id()),
            other => panic!("{}: a refused one-phase commit answered {other}", r.id()),
        }
    }
    assert_eq!(
        (get(s, "a").await.balance, get(s, "b").await.balance),
        balances
    );
    committed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use std::sync::Arc;
    use xfer_core::ManualClock;

    #[tokio::test(flavor = "current_thread")]
    async fn memory_store_conforms() {
        let new = || MemoryStore::new(Arc::new(ManualClock::at(Timestamp(10_000))));
        run_all(new).await;
        run_one_phase_committing(|| std::future::ready(new())).await;
        run_events(|| std::future::ready(new())).await;
        run_timelines(|| std::future::ready(new())).await;
    }
}
