//! The differential check every database backend runs: random account steps, with amounts
//! and bounds drawn around 2^53 (where a double stops being exact) and 2^63 (where an i64
//! overflows), through the Memory store (the reference: Rust integers) and the backend,
//! requiring the same reply to every step and the same accounts at the end. A store that
//! does its arithmetic in another number type (Lua's doubles, SQL decimals, BSON) is held
//! to the Rust rules this way.

use crate::conformance::FUTURE;
use crate::event::FeedPosition;
use crate::op::{AccountOp, Op, Reply, TransferOp};
use crate::shard::MemoryStore;
use crate::store::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use xfer_core::amount::AMOUNT_MAX;
use xfer_core::{
    AccountId, Amount, AssetCode, LowerBound, OwnerId, Posting, Rng, SystemClock, Timestamp,
    TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};

/// Runs `steps` random batches of 1 to 8 account steps from `seed` on `store` (a fresh
/// shard) and on a Memory store, and panics at the first reply or account that differs.
pub async fn same_as_memory<S: Store + ?Sized>(store: &S, seed: u64, steps: u64) {
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(seed);
    for step in 0..steps {
        let batch: Vec<Op> = (0..1 + rng.below(8)).map(|_| op(&mut rng, step)).collect();
        let want = memory.execute(batch.clone()).await.unwrap();
        let got = store.execute(batch.clone()).await.unwrap();
        for ((o, w), g) in batch.iter().zip(&want).zip(&got) {
            assert_eq!(g, w, "seed {seed} step {step}: {o}");
        }
    }
    let want = memory.accounts(None, 100).await.unwrap();
    let got = store.accounts(None, 100).await.unwrap();
    assert_eq!(got, want, "seed {seed}: the accounts at the end");
    assert!(
        want.iter().any(|a| a.balance.unsigned_abs() > 1 << 53),
        "seed {seed}: the run reached balances past 2^53"
    );
}

fn amount(rng: &mut Rng) -> u64 {
    let max = i64::MAX as u64;
    match rng.below(7) {
        0 => rng.below(1_000),
        5 => 999_999_999_999_990 + rng.below(20), // 15 digits and 16: Lua's double path's bound
        1 => (1u64 << 53) - 2 + rng.below(5),
        2 => (1u64 << 62) + rng.below(1_000),
        3 => max - rng.below(3),
        4 => rng.below(max),
        _ => 9_999_999 + rng.below(3), // limb boundaries of the Lua arithmetic
    }
}

fn bound(rng: &mut Rng) -> LowerBound {
    match rng.below(5) {
        0 => LowerBound::Unbounded,
        1 => LowerBound::Bounded(0),
        2 => LowerBound::Bounded(-(amount(rng) as i64)),
        3 => LowerBound::Bounded(i64::MIN + rng.below(3) as i64),
        _ => LowerBound::Bounded(rng.below(100) as i64),
    }
}

fn op(rng: &mut Rng, step: u64) -> Op {
    let account = AccountId::new(&format!("a{}", rng.below(4))).unwrap();
    let usd = AssetCode::new("USD", "asset").unwrap();
    let transfer = TransferId::new(&format!("t{}", rng.below(step / 2 + 1))).unwrap();
    let op = match rng.below(10) {
        0 => AccountOp::Create {
            asset: usd,
            lower_bound: bound(rng),
        },
        1..=4 => {
            let (debit, credit) = match rng.below(3) {
                0 => (amount(rng), 0),
                1 => (0, amount(rng)),
                _ => (amount(rng), amount(rng)),
            };
            AccountOp::Prepare {
                transfer,
                asset: usd,
                debit,
                credit,
                deadline: FUTURE,
                horizon: FUTURE,
            }
        }
        5 => AccountOp::Post {
            transfer,
            asset: usd,
        },
        6 => {
            // Parts within the intent, at its edge, and above it (refused).
            let part = |rng: &mut Rng| match rng.below(3) {
                0 => 0,
                1 => rng.below(1_000),
                _ => amount(rng),
            };
            AccountOp::PostPart {
                transfer,
                asset: usd,
                debit: part(rng),
                credit: part(rng),
            }
        }
        7 => AccountOp::Release {
            transfer,
            asset: usd,
            horizon: FUTURE,
        },
        8 => AccountOp::SetLowerBound {
            lower_bound: bound(rng),
        },
        _ => AccountOp::Get,
    };
    Op::Account(account, op)
}

fn refund_amount(rng: &mut Rng) -> u64 {
    match rng.below(6) {
        0 => (1 << 53) - 2 + rng.below(5),
        1 => AMOUNT_MAX - rng.below(3),
        2 => 9_999_999 + rng.below(3),
        3 => (1 << 62) + rng.below(1_000),
        4 => (1 << 63) - (1 << 11) + rng.below(3),
        _ => 1 + rng.below(AMOUNT_MAX),
    }
}

fn refunded_original(id: &str, rng: &mut Rng) -> TransferRecord {
    let posting = |from: &str, to: &str, n| Posting {
        from: AccountId::new(from).expect("valid"),
        to: AccountId::new(to).expect("valid"),
        asset: AssetCode::new("USD", "asset").expect("valid"),
        amount: Amount::new(n, "amount").expect("valid"),
    };
    let postings: Vec<Posting> = (0..1 + rng.below(3))
        .map(|i| posting(&format!("a{i}"), &format!("b{i}"), refund_amount(rng)))
        .collect();
    let mut r = TransferRecord::accept(plain_spec(id, postings), Timestamp(1_000), 100);
    r.state = TransferState::Done;
    if rng.below(3) == 0 {
        // A hold captured in part: refunds are judged against what it captured.
        r.captured = r
            .spec
            .postings
            .iter()
            .map(|p| Amount::new(1 + rng.below(p.amount.units()), "amount").expect("valid"))
            .collect();
    }
    r.accepted()
}

/// A plain transfer `id` of `postings`.
fn plain_spec(id: &str, postings: Vec<Posting>) -> TransferSpec {
    TransferSpec {
        id: TransferId::new(id).expect("valid"),
        postings: postings.into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 1_000,
    }
}

/// A refund's amount of `full`: often what the links before left, or one more, or all.
fn refund_part(rng: &mut Rng, full: u64, left: u64) -> u64 {
    let n = match rng.below(7) {
        0 => left,
        1 => left.saturating_add(1),
        2 => full,
        6 => full.saturating_add(1),
        3 => 1 + rng.below(full),
        4 => 1 + rng.below(left.max(1)),
        _ => left / (1 + rng.below(4)),
    };
    n.clamp(1, AMOUNT_MAX)
}

/// Random refund links (partial, whole, too much, repeats, replacing others, past the limit)
/// on done originals of one to three postings whose amounts sit around 2^53 (where a double
/// stops being exact), 10^7 (Lua's decimal limbs), 2^62 and 2^63, through the Memory store
/// and `store` (a fresh shard), requiring the same reply to every link and the same
/// records at the end; every kind of answer must have come up.
pub async fn refund_links_same_as_memory<S: Store + ?Sized>(store: &S, seed: u64) {
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for o in 0..12 {
        let id = TransferId::new(&format!("o{o}")).expect("valid");
        let orig = refunded_original(id.as_str(), &mut rng);
        let insert = vec![Op::Transfer(
            id.clone(),
            TransferOp::Insert(Arc::new(orig.clone())),
        )];
        let want = memory.execute(insert.clone()).await.unwrap();
        assert_eq!(store.execute(insert).await.unwrap(), want, "insert {id}");
        let moved = orig.moved_postings().into_owned();
        let mut left: Vec<u64> = moved.iter().map(|p| p.amount.units()).collect();
        for step in 0..60u64 {
            let full = moved.iter().map(|p| p.amount.units());
            // Every other original mostly takes small refunds, which reach the limit.
            let tiny = o % 2 == 1 && rng.below(6) > 0;
            let amounts: Vec<u64> = full
                .zip(&left)
                .map(|(f, l)| match tiny {
                    true => 1 + rng.below(3),
                    false => refund_part(&mut rng, f, *l),
                })
                .collect();
            let mut postings = orig.spec.reversed_postings();
            for (p, a) in postings.iter_mut().zip(&amounts) {
                p.amount = Amount::new(*a, "amount").expect("valid");
            }
            let (pool, replaced) = if o % 2 == 1 {
                (40, rng.below(8) / 7)
            } else {
                (24, rng.below(4))
            };
            let replacing = (0..replaced)
                .map(|_| TransferId::new(&format!("r{}", rng.below(pool))).expect("valid"))
                .collect();
            let op = TransferOp::LinkRefund {
                refund: TransferId::new(&format!("r{}", rng.below(pool))).expect("valid"),
                replacing,
                postings,
                now: Timestamp(2_000 + step),
            };
            let batch = vec![Op::Transfer(id.clone(), op)];
            let want = memory.execute(batch.clone()).await.unwrap();
            let got = store.execute(batch.clone()).await.unwrap();
            assert_eq!(got, want, "{id} step {step}: {}", batch[0]);
            *seen.entry(link_outcome(&want[0])).or_default() += 1;
            if let Reply::Transfer(r) = &want[0] {
                let taken = r.refunded_units();
                left = moved
                    .iter()
                    .zip(taken)
                    .map(|(p, t)| p.amount.units() - t)
                    .collect();
            }
        }
        let get = vec![Op::Transfer(id.clone(), TransferOp::Get)];
        let want = memory.execute(get.clone()).await.unwrap();
        assert_eq!(store.execute(get).await.unwrap(), want, "{id} at the end");
    }
    for o in [
        "linked",
        "repeat",
        "refund_must_reverse_original",
        "original_already_refunded",
        "refund_exceeds_original",
        "too_many_refunds",
    ] {
        assert!(seen.contains_key(o), "no {o}: {seen:?}");
    }
}

fn link_outcome(r: &Reply) -> &'static str {
    match r {
        Reply::Transfer(_) => "linked",
        Reply::Unchanged(_) => "repeat",
        Reply::Refused(code) => code.as_str(),
        _ => "other",
    }
}

/// An expiry no real clock is near: long past, or far ahead at the numbers' boundaries.
fn hold_expiry(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => 1_500 + rng.below(1_000),
        1 => 1_000_000_000_000_000 - 2 + rng.below(4),
        2 => (1 << 53) - 2 + rng.below(4),
        3 => AMOUNT_MAX - rng.below(3),
        _ => 100_000_000_000_000 + rng.below(1 << 40),
    }
}

fn hold_record(id: &str, state: TransferState, hold: Option<u64>) -> TransferRecord {
    let spec = TransferSpec {
        id: TransferId::new(id).expect("valid"),
        postings: vec![Posting {
            from: AccountId::new("a").expect("valid"),
            to: AccountId::new("b").expect("valid"),
            asset: AssetCode::new("USD", "asset").expect("valid"),
            amount: Amount::new(5, "amount").expect("valid"),
        }]
        .into(),
        metadata: String::new(),
        kind: match hold {
            Some(_) => TransferKind::Hold { ttl_ms: 1_000 },
            None => TransferKind::Transfer,
        },
        refund_of: None,
        timeout_ms: 1_000,
    };
    let mut r = TransferRecord::accept(spec, Timestamp(1_000), 100);
    r.state = state;
    r.hold_expires_at = hold.map(Timestamp);
    if state != TransferState::Initial {
        r.epoch = 1;
        r.owner = Some(OwnerId::new("x").expect("valid"));
    }
    r.accepted()
}

/// The expiries the extensions aim at, from the hold's own `e`.
fn extend_until(rng: &mut Rng, e: u64) -> u64 {
    match rng.below(6) {
        0 => e - 1,
        1 => e,
        2 => (e + 1).min(AMOUNT_MAX),
        3 => AMOUNT_MAX - rng.below(2),
        _ => hold_expiry(rng),
    }
}

/// The caller's clock: mostly long before every expiry ahead, else right at `e`.
fn extend_now(rng: &mut Rng, e: u64) -> u64 {
    match rng.below(6) {
        0 => e - 2,
        1 => e - 1,
        2 => e,
        3 => (e + 1).min(AMOUNT_MAX),
        _ => 1_000 + rng.below(100),
    }
}

/// Random extensions of holds whose expiries sit long past, around 10^15, 2^53 and 2^63 - 1
/// (where doubles, text and Int64 part ways), and of transfers in every other state and one
/// absent, through the Memory store and `store` (a fresh shard): the same reply to every
/// step and the same records (with their timelines) at the end; then the same due scans at
/// each expiry below `scan_below` and just before it, and with `feed` the same change feed
/// (an extension adds no event).
pub async fn extensions_same_as_memory<S: Store + ?Sized>(
    store: &S,
    seed: u64,
    scan_below: u64,
    feed: bool,
) {
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let others = [
        TransferState::Initial,
        TransferState::Pending,
        TransferState::Applied,
        TransferState::Canceling,
        TransferState::Done,
        TransferState::Canceled,
    ];
    let mut ids = vec![];
    for h in 0..24usize {
        let id = TransferId::new(&format!("h{h}")).expect("valid");
        let (state, hold) = match h {
            0..=15 => (TransferState::Held, Some(hold_expiry(&mut rng))),
            // Held with no expiry: nothing to extend.
            16 => (TransferState::Held, None),
            _ => (others[(h - 17) % others.len()], Some(hold_expiry(&mut rng))),
        };
        let insert = vec![Op::Transfer(
            id.clone(),
            TransferOp::Insert(Arc::new(hold_record(id.as_str(), state, hold))),
        )];
        let want = memory.execute(insert.clone()).await.unwrap();
        assert_eq!(store.execute(insert).await.unwrap(), want, "insert {id}");
        ids.push(id);
    }
    ids.push(TransferId::new("absent").expect("valid"));
    for step in 0..400u64 {
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let get = vec![Op::Transfer(id.clone(), TransferOp::Get)];
        let e = match &memory.execute(get).await.unwrap()[0] {
            Reply::Unchanged(r) => r.hold_expires_at.map_or(AMOUNT_MAX, |e| e.0),
            _ => AMOUNT_MAX,
        };
        let op = TransferOp::Extend {
            until: Timestamp(extend_until(&mut rng, e)),
            now: Timestamp(extend_now(&mut rng, e)),
        };
        let batch = vec![Op::Transfer(id.clone(), op)];
        let want = memory.execute(batch.clone()).await.unwrap();
        let got = store.execute(batch.clone()).await.unwrap();
        assert_eq!(got, want, "step {step}: {}", batch[0]);
        *seen.entry(extend_outcome(&want[0])).or_default() += 1;
    }
    for o in [
        "extended",
        "unchanged",
        "hold_expired",
        "transfer_is_not_held",
        "not_found",
    ] {
        assert!(seen.contains_key(o), "no {o}: {seen:?}");
    }

    let want = memory.transfers(None, 100).await.unwrap();
    assert_eq!(
        store.transfers(None, 100).await.unwrap(),
        want,
        "at the end"
    );
    // The due index at each expiry and just before it.
    let mut cutoffs: BTreeSet<u64> = [1_099, 1_100].into();
    for e in want.iter().filter_map(|r| r.hold_expires_at) {
        cutoffs.extend([e.0 - 1, e.0].into_iter().filter(|&c| c < scan_below));
    }
    let due = |rs: Vec<TransferRecord>| -> BTreeSet<String> {
        rs.iter().map(|r| r.id().to_string()).collect()
    };
    for at in cutoffs {
        let want = due(memory.scan_due(Timestamp(at), 100).await.unwrap());
        let got = due(store.scan_due(Timestamp(at), 100).await.unwrap());
        assert_eq!(got, want, "due at {at}");
    }
    if !feed {
        return;
    }
    // The inserts' events, and none from an extension.
    let events = |page: crate::event::EventPage| -> Vec<String> {
        let events = page.events.iter();
        events
            .map(|e| format!("{} {:?} {}", e.transfer, e.kind, e.at))
            .collect()
    };
    let want = events(memory.events(FeedPosition::START, 1_000).await.unwrap());
    let got = events(store.events(FeedPosition::START, 1_000).await.unwrap());
    assert_eq!(got, want, "the change feed");
}

fn extend_outcome(r: &Reply) -> &'static str {
    match r {
        Reply::Transfer(_) => "extended",
        Reply::Unchanged(_) => "unchanged",
        Reply::Refused(code) => code.as_str(),
        Reply::NotFound => "not_found",
        _ => "other",
    }
}

/// A one-phase commit of one or two postings among the accounts `a0`..`a3`, of amounts
/// drawn as the account steps' are.
fn one_phase_record(rng: &mut Rng, id: &str) -> Arc<TransferRecord> {
    let account = |n: u64| AccountId::new(&format!("a{n}")).expect("valid");
    let postings: Vec<Posting> = (0..1 + rng.below(2))
        .map(|_| {
            let from = rng.below(4);
            let to = (from + 1 + rng.below(3)) % 4;
            Posting {
                from: account(from),
                to: account(to),
                asset: AssetCode::new("USD", "asset").expect("valid"),
                amount: Amount::new(amount(rng).clamp(1, AMOUNT_MAX), "amount").expect("valid"),
            }
        })
        .collect();
    let owner = OwnerId::new("o").expect("valid");
    let mut r =
        TransferRecord::accept_claimed(plain_spec(id, postings), Timestamp(1_000), owner, FUTURE);
    r.deadline = FUTURE;
    Arc::new(r)
}

/// One-phase commits (`TransferOp::OnePhase`) of one or two postings among four funded
/// accounts with random bounds, amounts around 10^15 (where the Redis functions stop adding
/// as doubles), 2^53 and 2^63, through the Memory store and `store` (a fresh shard that
/// commits in one phase), with a refund linked to some of the committed, requiring the
/// same reply to every step and the same accounts and records (timelines included) at the
/// end; commits and inserts (a leg refused) must both have come up.
pub async fn one_phase_same_as_memory<S: Store + ?Sized>(store: &S, seed: u64, steps: u64) {
    let memory = MemoryStore::new(Arc::new(SystemClock));
    let mut rng = Rng::new(seed);
    let usd = || AssetCode::new("USD", "asset").expect("valid");
    let mut batches = vec![];
    for n in 0..4 {
        let a = AccountId::new(&format!("a{n}")).expect("valid");
        let funding = TransferId::new(&format!("fund-{n}")).expect("valid");
        batches.push(vec![
            Op::Account(
                a.clone(),
                AccountOp::Create {
                    asset: usd(),
                    lower_bound: bound(&mut rng),
                },
            ),
            Op::Account(
                a.clone(),
                AccountOp::Prepare {
                    transfer: funding.clone(),
                    asset: usd(),
                    debit: 0,
                    credit: amount(&mut rng),
                    deadline: FUTURE,
                    horizon: FUTURE,
                },
            ),
            Op::Account(
                a,
                AccountOp::Post {
                    transfer: funding,
                    asset: usd(),
                },
            ),
        ]);
    }
    for step in 0..steps {
        batches.push(
            (0..1 + rng.below(4))
                .map(|k| {
                    let r = one_phase_record(&mut rng, &format!("p{step}-{k}"));
                    Op::Transfer(r.id().clone(), TransferOp::OnePhase(r))
                })
                .collect(),
        );
    }
    let (mut committed, mut inserted) = (0, 0);
    for (step, batch) in batches.into_iter().enumerate() {
        let want = memory.execute(batch.clone()).await.unwrap();
        let got = store.execute(batch.clone()).await.unwrap();
        let mut refunds = vec![];
        for ((o, w), g) in batch.iter().zip(&want).zip(&got) {
            assert_eq!(g, w, "seed {seed} step {step}: {o}");
            if let Reply::Transfer(t) = w {
                if t.state == TransferState::Done {
                    committed += 1;
                    // Now and then a refund of all of it: a step on a record written in
                    // one phase, its timeline taken up from there.
                    if rng.below(4) == 0 {
                        let op = TransferOp::LinkRefund {
                            refund: TransferId::new(&format!("r-{}", t.id())).expect("valid"),
                            replacing: vec![],
                            postings: t.spec.reversed_postings(),
                            now: Timestamp(2_000 + step as u64),
                        };
                        refunds.push(Op::Transfer(t.id().clone(), op));
                    }
                } else {
                    inserted += 1;
                }
            }
        }
        let want = memory.execute(refunds.clone()).await.unwrap();
        let got = store.execute(refunds.clone()).await.unwrap();
        assert_eq!(got, want, "seed {seed} step {step}: the refund links");
    }
    let want = memory.accounts(None, 100).await.unwrap();
    let got = store.accounts(None, 100).await.unwrap();
    assert_eq!(got, want, "seed {seed}: the accounts at the end");
    // The records as read back: their timelines (some taken up by a refund link) too.
    let want = memory.transfers(None, 10_000).await.unwrap();
    let got = store.transfers(None, 10_000).await.unwrap();
    assert_eq!(got, want, "seed {seed}: the records at the end");
    assert!(
        committed > 0 && inserted > 0,
        "seed {seed}: {committed} committed, {inserted} inserted"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_steps_reach_balances_past_2_pow_53() {
        let store = MemoryStore::new(Arc::new(SystemClock));
        same_as_memory(&store, 1, 400).await;
    }

    /// The generator itself: every seed a backend runs reaches every kind of answer (the
    /// Memory store against itself).
    #[tokio::test(flavor = "current_thread")]
    async fn refund_links_reach_every_answer_on_every_seed() {
        for seed in 1..=12 {
            let store = MemoryStore::new(Arc::new(SystemClock));
            refund_links_same_as_memory(&store, seed).await;
        }
    }

    /// Every seed a backend runs both commits and inserts.
    #[tokio::test(flavor = "current_thread")]
    async fn one_phase_commits_and_inserts_on_every_seed() {
        for seed in 1..=3 {
            let store = MemoryStore::new(Arc::new(SystemClock));
            one_phase_same_as_memory(&store, seed, 150).await;
        }
    }
}
