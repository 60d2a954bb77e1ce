//! Golden scripts: every single-record operation one transfer performs, with the store's
//! answer, printed and compared with `tests/golden/*.txt`. They are the protocol's readable
//! specification: a change in behaviour shows up as a diff in these files.
//!
//! Run with `UPDATE_GOLDEN=1` to rewrite the files after an intended change, then read the
//! diff before committing it.
//!
//! The zombie tests pause an executor before its decide, let a sweeper take the transfer
//! over (a new epoch) and wake the executor in the middle of the sweeper's run: every write
//! the zombie still makes is refused or changes nothing.
//!
//! The crash-point tests at the bottom stop the executor after each operation in turn (the
//! operation applied, its reply lost, the process gone) and let a sweeper finish the
//! transfer, before and after its deadline: one test per crash point.

use std::collections::VecDeque;
use std::fmt::Write;
use xfer_core::{
    AccountId, Amount, AssetCode, IntentState, LowerBound, OwnerId, Posting, Timestamp, TransferId,
    TransferKind, TransferSpec, TransferState,
};
use xfer_engine::{Config, Machine, Outcome, Request, Router};
use xfer_store::{AccountOp, MemoryShard, Op, Reply, TransferOp};

const CFG: Config = Config {
    lease_ms: 1_000,
    skew_ms: 100,
    claim_grace_ms: 1_000,
};

/// Two shards, a clock, and a log of every operation.
struct Bench {
    shards: Vec<MemoryShard>,
    router: Router,
    now: u64,
    log: String,
    step: usize,
    /// Every operation sent through [`Bench::send`], with its reply.
    sent: Vec<(Op, Reply)>,
}

fn acct(s: &str) -> AccountId {
    AccountId::new(s).unwrap()
}

fn tid(s: &str) -> TransferId {
    TransferId::new(s).unwrap()
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}

fn owner(s: &str) -> OwnerId {
    OwnerId::new(s).unwrap()
}

fn spec(id: &str, postings: &[(&str, &str, u64)], kind: TransferKind) -> TransferSpec {
    TransferSpec {
        id: tid(id),
        postings: postings
            .iter()
            .map(|(f, t, a)| Posting {
                from: acct(f),
                to: acct(t),
                asset: usd(),
                amount: Amount::new(*a, "amount").unwrap(),
            })
            .collect(),
        metadata: String::new(),
        kind,
        refund_of: None,
        timeout_ms: 2_000,
    }
}

/// How `m` stopped, for the log.
fn outcome_text(m: &Machine) -> String {
    match m.outcome() {
        Some(Outcome::Finished(r)) => format!(
            "finished {}{}",
            r.state,
            r.reason
                .as_ref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default()
        ),
        Some(Outcome::Held(_)) => "held".to_string(),
        Some(Outcome::Left(r)) => format!("left to its owner: {} epoch={}", r.state, r.epoch),
        Some(Outcome::Rejected(r)) => format!("rejected: {r}"),
        Some(other) => format!("{other:?}"),
        None => "still running".to_string(),
    }
}

/// One executor driven an operation at a time, so that a test can pause it between any two
/// of its operations and run another one meanwhile.
struct Actor {
    who: &'static str,
    m: Machine,
    /// The requests it made and has not sent yet, in the order it made them.
    queue: VecDeque<Request>,
    /// Every operation it sent, in order.
    sent: Vec<Op>,
}

impl Actor {
    fn new(who: &'static str, (m, reqs): (Machine, Vec<Request>)) -> Actor {
        Actor {
            who,
            m,
            queue: reqs.into(),
            sent: Vec::new(),
        }
    }
}

impl Bench {
    /// Accounts `alice` (funded with 100 by a direct setup write) and `bob`, on two shards.
    fn new() -> Bench {
        let mut b = Bench {
            shards: vec![MemoryShard::new(), MemoryShard::new()],
            router: Router::hash(2),
            now: 1_000,
            log: String::new(),
            step: 0,
            sent: Vec::new(),
        };
        for (id, lb) in [
            ("issuer", LowerBound::Unbounded),
            ("alice", LowerBound::default()),
            ("bob", LowerBound::default()),
        ] {
            b.apply_quiet(Op::Account(
                acct(id),
                AccountOp::Create {
                    asset: usd(),
                    lower_bound: lb,
                },
            ));
        }
        let (m, reqs) = Machine::submit(
            spec(
                "funding",
                &[("issuer", "alice", 100)],
                TransferKind::Transfer,
            ),
            owner("setup"),
            Timestamp(b.now),
            CFG,
        )
        .unwrap();
        b.drive_quiet(m, reqs);
        b
    }

    fn apply_quiet(&mut self, op: Op) -> xfer_store::Reply {
        let s = self.router.shard_of_op(&op).unwrap();
        self.shards[s].apply(&op, Timestamp(self.now))
    }

    fn drive_quiet(&mut self, mut m: Machine, reqs: Vec<Request>) -> Machine {
        let mut queue: VecDeque<Request> = reqs.into();
        while let Some(r) = queue.pop_front() {
            let reply = self.apply_quiet(r.op);
            queue.extend(m.on_reply(r.tag, reply, Timestamp(self.now)));
        }
        m
    }

    fn note(&mut self, line: &str) {
        writeln!(self.log, "-- {line}").unwrap();
    }

    /// Runs `m` to the end, or until `crash_after` operations were applied (the last reply
    /// is then lost with the executor). Logs every operation.
    fn drive(&mut self, mut m: Machine, reqs: Vec<Request>, crash_after: Option<usize>) -> Machine {
        let mut queue: VecDeque<Request> = reqs.into();
        let mut applied = 0;
        while let Some(r) = queue.pop_front() {
            let s = self.router.shard_of_op(&r.op).unwrap();
            let op_text = r.op.to_string();
            let reply = self.shards[s].apply(&r.op, Timestamp(self.now));
            self.step += 1;
            applied += 1;
            writeln!(
                self.log,
                "{:>3} s{s} {op_text}\n        => {reply}",
                self.step
            )
            .unwrap();
            if crash_after == Some(applied) {
                self.note(&format!(
                    "executor {} crashes; the reply above is lost",
                    m.phase_name()
                ));
                return m;
            }
            queue.extend(m.on_reply(r.tag, reply, Timestamp(self.now)));
        }
        self.note(&format!("outcome: {}", outcome_text(&m)));
        m
    }

    /// Sends `op` on behalf of `who` (named in the log), outside any machine.
    fn send(&mut self, who: &str, op: &Op) -> Reply {
        let s = self.router.shard_of_op(op).unwrap();
        let reply = self.shards[s].apply(op, Timestamp(self.now));
        self.step += 1;
        writeln!(
            self.log,
            "{:>3} s{s} [{who}] {op}\n        => {reply}",
            self.step
        )
        .unwrap();
        self.sent.push((op.clone(), reply.clone()));
        reply
    }

    /// Sends the next request `a` made and hands it the reply.
    fn step(&mut self, a: &mut Actor) -> Reply {
        let r = a.queue.pop_front().expect("a request to send");
        let reply = self.send(a.who, &r.op);
        a.queue
            .extend(a.m.on_reply(r.tag, reply.clone(), Timestamp(self.now)));
        a.sent.push(r.op);
        reply
    }

    /// Steps `a` until it makes no more requests; logs its outcome.
    fn run(&mut self, a: &mut Actor) {
        while !a.queue.is_empty() {
            self.step(a);
        }
        self.note(&format!("{}: {}", a.who, outcome_text(&a.m)));
    }

    fn balances(&mut self) {
        for id in ["alice", "bob"] {
            let s = self.router.shard_of_account(&acct(id), None).unwrap();
            let a = self.shards[s].account(&acct(id)).unwrap().clone();
            let intents: Vec<String> = a
                .intents
                .iter()
                .map(|(t, i)| format!("{t}:{:?}", i.state))
                .collect();
            writeln!(
                self.log,
                "   {id}: balance={} reserved={} incoming={} intents=[{}]",
                a.balance,
                a.reserved,
                a.incoming,
                intents.join(" ")
            )
            .unwrap();
        }
    }

    fn account(&self, id: &str) -> xfer_core::Account {
        let s = self.router.shard_of_account(&acct(id), None).unwrap();
        self.shards[s].account(&acct(id)).unwrap().clone()
    }

    fn transfer(&self, id: &str) -> xfer_core::TransferRecord {
        self.shards[self.router.shard_of_transfer(&tid(id))]
            .transfer(&tid(id))
            .unwrap()
            .clone()
    }

    fn submit(&mut self, s: TransferSpec, crash_after: Option<usize>) -> Machine {
        let (m, reqs) = Machine::submit(s, owner("exec-1"), Timestamp(self.now), CFG).unwrap();
        self.drive(m, reqs, crash_after)
    }

    fn sweep(&mut self, who: &str) {
        let due: Vec<_> = self
            .shards
            .iter()
            .flat_map(|s| s.scan_due(Timestamp(self.now), 100))
            .collect();
        self.note(&format!("{who} sweeps at t{}: {} due", self.now, due.len()));
        for r in due {
            let (m, reqs) = Machine::recover(r.id().clone(), owner(who), Timestamp(self.now), CFG);
            self.drive(m, reqs, None);
        }
    }

    fn check(&self, name: &str) {
        let path = format!("{}/tests/golden/{name}.txt", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &self.log).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != self.log {
            panic!("{path} differs (UPDATE_GOLDEN=1 rewrites it):\n--- got ---\n{}\n--- want ---\n{want}", self.log);
        }
    }
}

#[test]
fn transfer_done() {
    let mut b = Bench::new();
    b.note("alice pays bob 30: insert (its claim), prepare both, decide, post both, finish");
    b.submit(
        spec("t1", &[("alice", "bob", 30)], TransferKind::Transfer),
        None,
    );
    b.balances();
    b.note("the same id and body again answers with the finished transfer and applies nothing");
    b.submit(
        spec("t1", &[("alice", "bob", 30)], TransferKind::Transfer),
        None,
    );
    b.note("the same id with another body is refused");
    b.submit(
        spec("t1", &[("alice", "bob", 31)], TransferKind::Transfer),
        None,
    );
    b.balances();
    assert_eq!(
        (b.account("alice").balance, b.account("bob").balance),
        (70, 30)
    );
    b.check("transfer_done");
}

#[test]
fn transfer_refused_releases_everything() {
    let mut b = Bench::new();
    b.note("alice cannot pay 500: the refusal decides a cancel; every leg is released");
    b.submit(
        spec("t1", &[("alice", "bob", 500)], TransferKind::Transfer),
        None,
    );
    b.balances();
    assert_eq!(b.transfer("t1").state, TransferState::Canceled);
    assert_eq!(
        (b.account("alice").balance, b.account("bob").incoming),
        (100, 0)
    );
    b.check("transfer_refused");
}

#[test]
fn hold_capture_and_void() {
    let mut b = Bench::new();
    b.note("a hold stops at held with its amounts reserved");
    b.submit(
        spec(
            "h1",
            &[("alice", "bob", 40)],
            TransferKind::Hold { ttl_ms: 10_000 },
        ),
        None,
    );
    b.balances();
    b.note("capture posts it");
    let (m, reqs) = Machine::capture(tid("h1"), owner("exec-2"), Timestamp(b.now), CFG);
    b.drive(m, reqs, None);
    b.note("a second hold is voided and released");
    b.submit(
        spec(
            "h2",
            &[("alice", "bob", 10)],
            TransferKind::Hold { ttl_ms: 10_000 },
        ),
        None,
    );
    let (m, reqs) = Machine::void(tid("h2"), owner("exec-2"), Timestamp(b.now), CFG);
    b.drive(m, reqs, None);
    b.note("a third hold expires: the sweeper cancels it after its expiry");
    b.submit(
        spec(
            "h3",
            &[("alice", "bob", 5)],
            TransferKind::Hold { ttl_ms: 10_000 },
        ),
        None,
    );
    b.now += 10_001;
    b.sweep("sweeper");
    b.balances();
    assert_eq!(b.transfer("h1").state, TransferState::Done);
    assert_eq!(b.transfer("h2").state, TransferState::Canceled);
    assert_eq!(b.transfer("h3").state, TransferState::Canceled);
    assert_eq!(
        (b.account("alice").balance, b.account("alice").reserved),
        (60, 0)
    );
    b.check("hold");
}

#[test]
fn refund_links_its_original_once() {
    let mut b = Bench::new();
    b.submit(
        spec("t1", &[("alice", "bob", 30)], TransferKind::Transfer),
        None,
    );
    b.log.clear();
    b.step = 0;
    b.note("refund r1 of t1: link the original, then run the reversed postings");
    let mut r = spec("r1", &[("bob", "alice", 30)], TransferKind::Transfer);
    r.refund_of = Some(tid("t1"));
    b.submit(r, None);
    b.note("a second refund r2 of t1 finds the link taken by a done refund and cancels");
    let mut r = spec("r2", &[("bob", "alice", 30)], TransferKind::Transfer);
    r.refund_of = Some(tid("t1"));
    b.submit(r, None);
    b.balances();
    assert_eq!(b.transfer("r1").state, TransferState::Done);
    assert_eq!(b.transfer("r2").state, TransferState::Canceled);
    assert_eq!(b.transfer("t1").refunded_by, Some(tid("r1")));
    assert_eq!(b.account("alice").balance, 100);
    b.check("refund");
}

/// The "hanging" anomaly: a prepare overtaken by the cancel that releases its account.
#[test]
fn late_prepare_finds_the_tombstone() {
    let mut b = Bench::new();
    b.note("t1 = alice->bob 30 and carol->bob 1; carol does not exist, so t1 cancels");
    b.note("the prepare for alice is held back in the network meanwhile");
    let s = spec(
        "t1",
        &[("alice", "bob", 30), ("carol", "bob", 1)],
        TransferKind::Transfer,
    );
    let (mut m, reqs) = Machine::submit(s, owner("exec-1"), Timestamp(b.now), CFG).unwrap();
    let mut queue: VecDeque<Request> = reqs.into();
    let mut delayed = None;
    while let Some(r) = queue.pop_front() {
        let is_alice_prepare =
            matches!(&r.op, Op::Account(a, AccountOp::Prepare { .. }) if a.as_str() == "alice");
        if is_alice_prepare && delayed.is_none() {
            b.note("(alice's prepare is delayed)");
            delayed = Some(r.op.clone());
            continue;
        }
        let s = b.router.shard_of_op(&r.op).unwrap();
        let text = r.op.to_string();
        let reply = b.shards[s].apply(&r.op, Timestamp(b.now));
        b.step += 1;
        writeln!(b.log, "{:>3} s{s} {text}\n        => {reply}", b.step).unwrap();
        queue.extend(m.on_reply(r.tag, reply, Timestamp(b.now)));
    }
    b.note(
        "the delayed prepare lands after the cancel: it finds the released mark and does nothing",
    );
    let op = delayed.unwrap();
    let s = b.router.shard_of_op(&op).unwrap();
    let reply = b.shards[s].apply(&op, Timestamp(b.now));
    writeln!(b.log, "  * s{s} {op}\n        => {reply}").unwrap();
    b.note("past the horizon the mark is pruned; the deadline now refuses the same prepare");
    // Past the end of the pruner's bucket too (`xfer_store::shard::prune_at`).
    b.now += 2_200 + xfer_store::shard::PRUNE_BUCKET_MS;
    let pruned = b.shards[s].prune(Timestamp(b.now), 100);
    writeln!(b.log, "  * s{s} prune => {pruned} dropped").unwrap();
    let reply = b.shards[s].apply(&op, Timestamp(b.now));
    writeln!(b.log, "  * s{s} {op}\n        => {reply}").unwrap();
    b.balances();
    let alice = b.account("alice");
    assert_eq!((alice.reserved, alice.open_intents()), (0, 0));
    assert_eq!(b.transfer("t1").state, TransferState::Canceled);
    b.check("late_prepare");
}

// --- zombies ----------------------------------------------------------------------------

/// The zombie race of SPEC §3. exec-1 submits alice->bob 30 (its insert is its claim, epoch
/// 1), has both prepares acknowledged, makes its decide (epoch 1 -> applied) and pauses
/// before sending it. Its lease lapses; the sweeper finds t1 due one lease later (`late`
/// false: before the deadline) or past the deadline plus the skew (`late` true), re-claims
/// it (epoch 2) and sends its first `sweeper_first` operations (the claim included). Then
/// exec-1 wakes and sends the decide it holds: refused, the epoch is no longer its own, and
/// exec-1 stops. The sweeper finishes; then every operation exec-1 ever sent lands again
/// (a duplicating network, a driver resending blindly) and changes nothing. Returns the
/// final state, after checking that the transfer ended once, by the sweeper, with nothing
/// leaked.
fn zombie_race(late: bool, sweeper_first: usize) -> (TransferState, Bench) {
    let mut b = Bench::new();
    b.note(&format!(
        "alice pays bob 30; exec-1 pauses before its decide; the sweeper takes over {} the \
         deadline; exec-1 wakes after the sweeper's first {sweeper_first} operation{}",
        if late { "after" } else { "before" },
        if sweeper_first == 1 { "" } else { "s" }
    ));
    let mut zombie = Actor::new(
        "exec-1",
        Machine::submit(
            spec("t1", &[("alice", "bob", 30)], TransferKind::Transfer),
            owner("exec-1"),
            Timestamp(b.now),
            CFG,
        )
        .unwrap(),
    );
    for _ in 0..3 {
        b.step(&mut zombie); // insert (claimed, epoch 1), prepare alice, prepare bob
    }
    let held = zombie.queue.front().map(|r| r.op.clone());
    assert!(
        zombie.queue.len() == 1
            && matches!(
                &held,
                Some(Op::Transfer(
                    _,
                    TransferOp::Decide {
                        epoch: 1,
                        to: TransferState::Applied,
                        ..
                    }
                ))
            ),
        "exec-1 holds exactly its decide: {:?}",
        zombie.queue
    );
    b.note(&format!(
        "every prepare acknowledged, exec-1 makes its decide ({}) and pauses (GC, a stopped \
         VM) before sending it",
        held.unwrap()
    ));

    let lease_until = b.transfer("t1").lease_until;
    b.now = if late {
        b.transfer("t1").deadline.0 + CFG.skew_ms + 1
    } else {
        lease_until.0 + 1
    };
    let due: Vec<_> = b
        .shards
        .iter()
        .flat_map(|s| s.scan_due(Timestamp(b.now), 100))
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(due, [tid("t1")], "the lapsed lease makes t1 due");
    b.note(&format!(
        "exec-1's lease ended at {lease_until}; the sweeper sweeps at t{}: {} due",
        b.now,
        due.len()
    ));
    let mut sweeper = Actor::new(
        "sweeper",
        Machine::recover(tid("t1"), owner("sweeper"), Timestamp(b.now), CFG),
    );
    for _ in 0..sweeper_first {
        b.step(&mut sweeper);
    }
    let taken = b.transfer("t1");
    assert_eq!(
        (taken.epoch, taken.owner.clone()),
        (2, Some(owner("sweeper"))),
        "the sweeper holds t1"
    );
    assert!(
        !sweeper.queue.is_empty(),
        "the sweeper is still running when exec-1 wakes"
    );

    b.note(&format!(
        "exec-1 wakes while t1 is {} epoch={} under the sweeper and sends the decide it holds",
        taken.state, taken.epoch
    ));
    match b.step(&mut zombie) {
        Reply::Unchanged(rec) => assert_eq!(
            (rec.state, rec.epoch),
            (taken.state, 2),
            "the zombie's decide changed nothing"
        ),
        other => panic!("the zombie's decide (epoch 1) was not refused: {other}"),
    }
    assert!(
        zombie.queue.is_empty() && zombie.m.on_tick(Timestamp(b.now)).is_empty(),
        "exec-1 makes no more requests"
    );
    assert!(
        matches!(zombie.m.outcome(), Some(Outcome::Left(r)) if r.epoch == 2),
        "exec-1 stops, leaving t1 to the sweeper: {:?}",
        zombie.m.outcome()
    );
    let why = if taken.state == TransferState::Pending {
        "epoch 1 is not the record's 2".to_string()
    } else {
        format!(
            "the record is {}, not pending, and its epoch is 2",
            taken.state
        )
    };
    b.note(&format!(
        "the compare-and-set refuses it ({why}); exec-1 stops, {}, and makes no more requests",
        outcome_text(&zombie.m)
    ));

    b.note("the sweeper goes on, unaware of exec-1");
    b.run(&mut sweeper);
    let end = b.transfer("t1");
    assert!(
        matches!(sweeper.m.outcome(), Some(Outcome::Finished(r)) if r.state == end.state),
        "the sweeper finished t1: {:?}",
        sweeper.m.outcome()
    );

    b.note(
        "every operation exec-1 ever sent lands again (duplicated in the network, resent \
         blindly): each is refused or an idempotent repeat; nothing changes",
    );
    let before = (b.transfer("t1"), b.account("alice"), b.account("bob"));
    for op in zombie.sent.clone() {
        let reply = b.send("exec-1", &op);
        assert!(
            !matches!(reply, Reply::Transfer(_)),
            "exec-1's {op} changed t1: {reply}"
        );
    }
    assert_eq!(
        (b.transfer("t1"), b.account("alice"), b.account("bob")),
        before,
        "exec-1's resent operations changed nothing"
    );
    b.balances();

    // The transfer ended once, decided and finished by the sweeper's epoch (a finished
    // record has no owner).
    assert!(end.state.is_terminal(), "t1 is {}", end.state);
    assert_eq!(end.epoch, 2);
    let changed = |what: fn(&TransferOp) -> bool| -> Vec<(u64, TransferState)> {
        b.sent
            .iter()
            .filter_map(|(op, reply)| match (op, reply) {
                (Op::Transfer(_, t), Reply::Transfer(rec)) if what(t) => {
                    Some((rec.epoch, rec.state))
                }
                _ => None,
            })
            .collect()
    };
    let decided = if end.state == TransferState::Done {
        TransferState::Applied
    } else {
        TransferState::Canceling
    };
    assert_eq!(
        changed(|t| matches!(t, TransferOp::Decide { .. })),
        [(2, decided)],
        "one decide took effect: the sweeper's"
    );
    assert_eq!(
        changed(|t| matches!(t, TransferOp::Finish { .. })),
        [(2, end.state)],
        "one finish took effect: the sweeper's"
    );
    let (alice, bob) = (b.account("alice"), b.account("bob"));
    match end.state {
        TransferState::Done => assert_eq!((alice.balance, bob.balance), (70, 30)),
        _ => assert_eq!((alice.balance, bob.balance), (100, 0)),
    }
    for a in [&alice, &bob] {
        assert_eq!(
            (a.reserved, a.incoming, a.open_intents()),
            (0, 0, 0),
            "{} leaks",
            a.id
        );
    }
    (end.state, b)
}

/// The zombie wakes between the sweeper's claim and its decide, before the deadline: both
/// want `applied`, and only the epoch refuses the zombie's decide (the record is still
/// `pending`). The sweeper's decide commits; the transfer is done once.
#[test]
fn zombie_executor_is_harmless() {
    // Sweeper: claim, prepare alice, prepare bob (both answer AlreadyPrepared), then exec-1.
    let (state, b) = zombie_race(false, 3);
    assert_eq!(state, Done);
    b.check("zombie");
}

/// Past the deadline the sweeper cancels what the zombie wants applied. The zombie wakes
/// after the sweeper's claim and before its cancel (only the epoch refuses its decide: the
/// record is still `pending`), then, in a second run, after the cancel (the decided state
/// refuses it too). Either way it stops, and the transfer is canceled with nothing moved.
#[test]
fn zombie_loses_to_a_sweeper_that_canceled() {
    let (before_cancel, mut b) = zombie_race(true, 1);
    assert_eq!(before_cancel, Canceled, "exec-1 woke before the cancel");
    let (after_cancel, b2) = zombie_race(true, 2);
    assert_eq!(after_cancel, Canceled, "exec-1 woke after the cancel");
    b.log.push_str(&b2.log);
    b.check("zombie_cancel");
}

// --- crash points ------------------------------------------------------------------------

/// Runs alice->bob 30 with the executor dying after `k` operations, then sweeps: once
/// before the deadline (`late` false) or after it (`late` true). Returns the final state.
fn crash_at(k: usize, late: bool) -> (TransferState, Bench) {
    crash_paying(30, k, late)
}

/// As [`crash_at`], for a transfer of `amount` (500 is more than alice has: the cancel path).
fn crash_paying(amount: u64, k: usize, late: bool) -> (TransferState, Bench) {
    let mut b = Bench::new();
    b.note(&format!(
        "alice pays bob {amount}; crash after operation {k}; sweep {} the deadline",
        if late { "after" } else { "before" }
    ));
    b.submit(
        spec("t1", &[("alice", "bob", amount)], TransferKind::Transfer),
        Some(k),
    );
    b.now += if late {
        2_000 + CFG.skew_ms + 1
    } else {
        CFG.lease_ms + 1
    };
    b.sweep("sweeper");
    let t = b.transfer("t1");
    let (alice, bob) = (b.account("alice"), b.account("bob"));
    assert!(
        t.state.is_terminal(),
        "crash {k}: not terminal: {}",
        t.state
    );
    match t.state {
        TransferState::Done => assert_eq!((alice.balance, bob.balance), (70, 30), "crash {k}"),
        _ => assert_eq!((alice.balance, bob.balance), (100, 0), "crash {k}"),
    }
    for a in [&alice, &bob] {
        assert_eq!(
            (a.reserved, a.incoming),
            (0, 0),
            "crash {k}: {} leaks",
            a.id
        );
        assert!(
            a.intents.values().all(|i| i.state != IntentState::Open),
            "crash {k}: open intent on {}",
            a.id
        );
    }
    (t.state, b)
}

macro_rules! crash_point {
    ($name:ident, $k:expr, $before:expr, $after:expr) => {
        #[test]
        fn $name() {
            let (early, mut b) = crash_at($k, false);
            assert_eq!(early, $before, "recovered before the deadline");
            let (late, b2) = crash_at($k, true);
            assert_eq!(late, $after, "recovered after the deadline");
            b.log.push_str(&b2.log);
            b.check(concat!("crash_", stringify!($name)));
        }
    };
}

use TransferState::{Canceled, Done};
// Operations of alice->bob 30: 1 insert (claimed by the submitter), 2-3 prepare, 4 decide,
// 5-6 post, 7 finish.
crash_point!(after_insert, 1, Done, Canceled);
crash_point!(after_first_prepare, 2, Done, Canceled);
crash_point!(after_second_prepare, 3, Done, Canceled);
crash_point!(after_decide, 4, Done, Done);
crash_point!(after_first_post, 5, Done, Done);
crash_point!(after_second_post, 6, Done, Done);
crash_point!(after_finish, 7, Done, Done);

macro_rules! crash_point_cancel {
    ($name:ident, $k:expr) => {
        #[test]
        fn $name() {
            let (early, mut b) = crash_paying(500, $k, false);
            assert_eq!(early, Canceled, "recovered before the deadline");
            let (late, b2) = crash_paying(500, $k, true);
            assert_eq!(late, Canceled, "recovered after the deadline");
            b.log.push_str(&b2.log);
            b.check(concat!("crash_", stringify!($name)));
        }
    };
}

// Operations of alice->bob 500 (refused): 1 insert (claimed), 2 prepare alice (refused),
// 3 prepare bob, 4 decide canceling, 5-6 release, 7 finish.
crash_point_cancel!(cancel_after_insert, 1);
crash_point_cancel!(cancel_after_refused_prepare, 2);
crash_point_cancel!(cancel_after_other_prepare, 3);
crash_point_cancel!(cancel_after_decide, 4);
crash_point_cancel!(cancel_after_first_release, 5);
crash_point_cancel!(cancel_after_second_release, 6);
crash_point_cancel!(cancel_after_finish, 7);
