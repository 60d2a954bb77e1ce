//! The guarantees of SPEC §3, checked against the stores' records. Some are checked at
//! every step (no overdraft, stable decisions), some periodically (conservation), the rest
//! at the end of the run once the run is at rest (termination, atomicity, idempotency,
//! no leaks, history, acknowledged outcomes).

use crate::workload::{Told, Workload};
use std::collections::BTreeMap;
use xfer_core::{
    Account, AccountId, AccountStatus, AssetCode, Code, IntentState, Timestamp, TransferId,
    TransferRecord, TransferState,
};
use xfer_engine::Router;
use xfer_store::MemoryShard;

/// Every guarantee a checker judges, by the name violations carry.
pub const GUARANTEES: [&str; 13] = [
    "conservation",
    "no_overdraft",
    "atomicity",
    "stable_decisions",
    "termination",
    "idempotency",
    "no_leaks",
    "history",
    "acknowledged",
    "durable",
    "events",
    "timeline",
    "escalation",
];

/// A broken guarantee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which guarantee (SPEC §3's names, snake_case).
    pub guarantee: &'static str,
    /// What was seen.
    pub detail: String,
    /// Simulated time, in milliseconds.
    pub at_ms: u64,
}

/// Collects violations and what it needs to judge them.
#[derive(Default)]
pub struct Checker {
    /// Every violation seen, in order.
    pub violations: Vec<Violation>,
    /// When each transfer became terminal (simulated time).
    pub terminal_at: BTreeMap<TransferId, u64>,
    /// How far apart two writers' clocks may be: a timeline's times, each its writer's,
    /// may go back by as much from one writer to the next.
    pub clock_skew_ms: u64,
    /// The transfer no retry can finish (the `poison` fault), if any.
    pub poisoned: Option<TransferId>,
}

impl Checker {
    /// Records a violation of `guarantee`.
    pub fn record(&mut self, guarantee: &'static str, at_ms: u64, detail: String) {
        // A few of each kind: enough to read, and every broken guarantee stays visible.
        if self
            .violations
            .iter()
            .filter(|v| v.guarantee == guarantee)
            .count()
            < 5
        {
            self.violations.push(Violation {
                guarantee,
                detail,
                at_ms,
            });
        }
    }

    /// Guarantee 2, after every account write: `balance - reserved >= lower_bound`, and the
    /// record's sums are non-negative.
    pub fn after_account_write(&mut self, a: Option<&Account>, at_ms: u64) {
        let Some(a) = a else { return };
        if !a.is_within_bound() {
            let detail = format!(
                "{}: balance {} - reserved {} below {:?}",
                a.id, a.balance, a.reserved, a.lower_bound
            );
            self.record("no_overdraft", at_ms, detail);
        }
        if a.reserved < 0 || a.incoming < 0 {
            self.record(
                "no_leaks",
                at_ms,
                format!("{}: reserved {} incoming {}", a.id, a.reserved, a.incoming),
            );
        }
        if let Err(e) = a.check_sums() {
            self.record("no_leaks", at_ms, e);
        }
    }

    /// Guarantee 4, after every transfer write: the state moved along the diagram only.
    pub fn after_transfer_write(
        &mut self,
        before: Option<TransferState>,
        after: Option<&TransferRecord>,
        at_ms: u64,
    ) {
        let Some(after) = after else { return };
        if let Some(before) = before {
            if before != after.state && !before.can_become(after.state) {
                let detail = format!("{}: {} became {}", after.id(), before, after.state);
                self.record("stable_decisions", at_ms, detail);
            }
        }
        if after.state.is_terminal() {
            self.terminal_at.entry(after.id().clone()).or_insert(at_ms);
        }
        if let Err(e) = timeline_fits(after, self.clock_skew_ms) {
            self.record("timeline", at_ms, format!("{}: {e}", after.id()));
        }
    }

    /// A machine reported something the protocol forbids.
    pub fn machine_violation(&mut self, detail: String, at_ms: u64) {
        self.record("atomicity", at_ms, detail);
    }

    /// A sweeper started to recover `id` again after it was escalated.
    pub fn retried_escalated(&mut self, id: &TransferId, at_ms: u64) {
        let detail = format!("{id}: escalated, and a sweeper recovers it again");
        self.record("escalation", at_ms, detail);
    }

    /// Guarantee 1: per asset, balances plus the open intents of transfers decided
    /// `applied` (counted as posted) sum to zero: money only moves, and enters from issuers
    /// that go negative by as much.
    pub fn conservation(&mut self, shards: &[&MemoryShard], router: &Router, at_ms: u64) {
        let mut totals: BTreeMap<AssetCode, i128> = BTreeMap::new();
        for a in shards.iter().flat_map(|s| s.accounts()) {
            let mut t = a.balance as i128;
            // A sum: the intents' order does not matter.
            for (tid, i) in a
                .intents
                .unordered()
                .filter(|(_, i)| i.state == IntentState::Open)
            {
                let shard = &shards[router.shard_of_transfer(tid)];
                let Some(r) = shard
                    .transfer(tid)
                    .filter(|r| matches!(r.state, TransferState::Applied | TransferState::Done))
                else {
                    continue;
                };
                // Decided: the intent will move what the transfer moves of this account (of
                // a hold captured in part, its captured part).
                let part = r.captured_legs().and_then(|legs| {
                    legs.into_iter()
                        .find(|l| l.account == a.id)
                        .map(|l| (l.debit, l.credit))
                });
                let (debit, credit) = part.unwrap_or((i.debit, i.credit));
                t += credit as i128 - debit as i128;
            }
            *totals.entry(a.asset.clone()).or_default() += t;
        }
        for (asset, total) in totals {
            if total != 0 {
                self.record(
                    "conservation",
                    at_ms,
                    format!("{asset}: balances sum to {total}, not 0"),
                );
            }
        }
    }

    /// The end-of-run checks, before tombstones are pruned. `due_ms` gives each transfer's
    /// termination deadline in simulated time.
    pub fn at_rest(
        &mut self,
        shards: &[&MemoryShard],
        router: &Router,
        workload: &Workload,
        due_ms: &dyn Fn(&TransferRecord) -> u64,
        at_ms: u64,
    ) {
        self.judge(shards, router, Some(workload), due_ms, at_ms);
    }

    /// The end-of-run checks that need only the records (no simulated clients): every
    /// transfer terminal, atomicity, history, refunds, conservation. For real processes
    /// (`xfer-sim crash`), where the caller checks the acknowledged outcomes.
    pub fn at_rest_state(&mut self, shards: &[&MemoryShard], router: &Router, at_ms: u64) {
        self.judge(shards, router, None, &|_| u64::MAX, at_ms);
    }

    fn judge(
        &mut self,
        shards: &[&MemoryShard],
        router: &Router,
        workload: Option<&Workload>,
        due_ms: &dyn Fn(&TransferRecord) -> u64,
        at_ms: u64,
    ) {
        let transfers: BTreeMap<&TransferId, &TransferRecord> = shards
            .iter()
            .flat_map(|s| s.transfers())
            .map(|r| (r.id(), r))
            .collect();
        let accounts: BTreeMap<&AccountId, &Account> = shards
            .iter()
            .flat_map(|s| s.accounts())
            .map(|a| (&a.id, a))
            .collect();
        self.termination(&transfers, due_ms, at_ms);
        self.atomicity(&transfers, &accounts, at_ms);
        self.history(&transfers, &accounts, at_ms);
        if let Some(w) = workload {
            self.idempotency(&transfers, w, at_ms);
        }
        self.refunds(&transfers, at_ms);
        self.conservation(shards, router, at_ms);
    }

    fn termination(
        &mut self,
        transfers: &BTreeMap<&TransferId, &TransferRecord>,
        due_ms: &dyn Fn(&TransferRecord) -> u64,
        at_ms: u64,
    ) {
        for (id, r) in transfers {
            // The poisoned transfer ends escalated; nothing else is ever escalated.
            let poisoned = self.poisoned.as_ref() == Some(*id);
            if poisoned != r.escalation.is_some() {
                let detail = format!(
                    "{id}: {} {}, escalated: {:?}",
                    if poisoned {
                        "poisoned,"
                    } else {
                        "not poisoned,"
                    },
                    r.state,
                    r.escalation
                );
                self.record("escalation", at_ms, detail);
            }
            if poisoned {
                continue;
            }
            if !r.state.is_terminal() {
                self.record(
                    "termination",
                    at_ms,
                    format!("{id} still {} (owner {:?})", r.state, r.owner),
                );
                continue;
            }
            let (done_at, due) = (self.terminal_at.get(*id).copied().unwrap_or(0), due_ms(r));
            if done_at > due {
                self.record(
                    "termination",
                    at_ms,
                    format!("{id} terminal at {done_at} ms, due by {due} ms"),
                );
            }
        }
    }

    /// Guarantee 3: a done transfer's intents are all posted, a canceled one's never.
    fn atomicity(
        &mut self,
        transfers: &BTreeMap<&TransferId, &TransferRecord>,
        accounts: &BTreeMap<&AccountId, &Account>,
        at_ms: u64,
    ) {
        for (id, r) in transfers {
            for leg in r.spec.validate().unwrap_or_default() {
                let intent = accounts
                    .get(&leg.account)
                    .and_then(|a| a.intents.get(id))
                    .map(|i| i.state);
                let bad = match r.state {
                    // A missing intent is a pruned tombstone; the history replay checks amounts.
                    TransferState::Done => intent.is_some_and(|i| i != IntentState::Posted),
                    TransferState::Canceled => intent.is_some_and(|i| i != IntentState::Released),
                    _ => false,
                };
                if bad {
                    let detail = format!(
                        "{id} is {} but its intent on {} is {intent:?}",
                        r.state, leg.account
                    );
                    self.record("atomicity", at_ms, detail);
                }
            }
        }
    }

    /// Guarantee 8: replaying the done transfers from zero gives every balance.
    fn history(
        &mut self,
        transfers: &BTreeMap<&TransferId, &TransferRecord>,
        accounts: &BTreeMap<&AccountId, &Account>,
        at_ms: u64,
    ) {
        let mut replay: BTreeMap<&AccountId, i128> = BTreeMap::new();
        for r in transfers
            .values()
            .filter(|r| r.state == TransferState::Done)
        {
            // What each posting moved: a hold captured in part moved its captured amounts.
            for (i, p) in r.spec.postings.iter().enumerate() {
                let units = r.captured.get(i).unwrap_or(&p.amount).units() as i128;
                *replay.entry(&p.from).or_default() -= units;
                *replay.entry(&p.to).or_default() += units;
            }
        }
        for (id, a) in accounts {
            let expected = replay.get(id).copied().unwrap_or(0);
            if a.balance as i128 != expected {
                self.record(
                    "history",
                    at_ms,
                    format!("{id}: balance {} but replay gives {expected}", a.balance),
                );
            }
        }
    }

    /// Guarantee 6: one record per id, with a body that was submitted; a client told of a
    /// body conflict really sent a different body, and one told an outcome was told the
    /// record's.
    fn idempotency(
        &mut self,
        transfers: &BTreeMap<&TransferId, &TransferRecord>,
        workload: &Workload,
        at_ms: u64,
    ) {
        for (id, r) in transfers {
            let Some(subs) = workload.submissions.get(*id) else {
                self.record(
                    "idempotency",
                    at_ms,
                    format!("{id} exists but was never submitted"),
                );
                continue;
            };
            if !subs.iter().any(|s| s.spec.same_body(&r.spec)) {
                self.record(
                    "idempotency",
                    at_ms,
                    format!("{id} holds a body nobody submitted"),
                );
            }
            for s in subs {
                let same = s.spec.same_body(&r.spec);
                match &s.told {
                    Some(Told::Rejected(Code::IdExistsWithDifferentBody)) if same => {
                        self.record(
                            "idempotency",
                            at_ms,
                            format!("{id}: same body told it differs"),
                        );
                    }
                    Some(Told::State(st)) if !same => {
                        self.record(
                            "idempotency",
                            at_ms,
                            format!("{id}: a different body was told {st}"),
                        );
                    }
                    Some(Told::State(st)) if st.is_terminal() && *st != r.state => {
                        self.record(
                            "acknowledged",
                            at_ms,
                            format!("{id}: client told {st}, record says {}", r.state),
                        );
                    }
                    _ => {}
                }
            }
        }
        for (id, subs) in &workload.submissions {
            if !transfers.contains_key(id) {
                if let Some(s) = subs.iter().find(|s| matches!(s.told, Some(Told::State(_)))) {
                    self.record(
                        "acknowledged",
                        at_ms,
                        format!("{id}: client told {:?}, record is gone", s.told),
                    );
                }
            }
        }
    }

    /// A done transfer's done refunds take back at most what it moved, posting by posting,
    /// and each is linked on its record (only a canceled refund's link may be replaced).
    fn refunds(&mut self, transfers: &BTreeMap<&TransferId, &TransferRecord>, at_ms: u64) {
        let mut done_refunds: BTreeMap<&TransferId, Vec<&TransferRecord>> = BTreeMap::new();
        for r in transfers
            .values()
            .filter(|r| r.state == TransferState::Done)
        {
            if let Some(orig) = &r.spec.refund_of {
                done_refunds.entry(orig).or_default().push(r);
            }
        }
        for (orig, refunds) in done_refunds {
            let Some(original) = transfers.get(orig) else {
                self.record("idempotency", at_ms, format!("{orig} refunded but absent"));
                continue;
            };
            let links = original.refund_links();
            let unlinked: Vec<&TransferId> = refunds
                .iter()
                .map(|r| r.id())
                .filter(|id| !links.iter().any(|l| l.refund == **id))
                .collect();
            let mut taken = vec![0u64; original.spec.postings.len()];
            for r in &refunds {
                for (t, p) in taken.iter_mut().zip(r.spec.postings.iter()) {
                    *t = t.saturating_add(p.amount.units());
                }
            }
            let moved: Vec<u64> = original
                .moved_postings()
                .iter()
                .map(|p| p.amount.units())
                .collect();
            let over = taken.iter().zip(&moved).any(|(t, m)| t > m);
            if over || !unlinked.is_empty() {
                let ids: Vec<&TransferId> = refunds.iter().map(|r| r.id()).collect();
                self.record(
                    "idempotency",
                    at_ms,
                    format!("{orig} moved {moved:?}, its done refunds {ids:?} take back {taken:?}; not linked: {unlinked:?}"),
                );
            }
        }
    }

    /// A capture told `hold_expired` at `told_at`, sent after the client was told the hold
    /// expires at `until`: the store judged it by clocks at most `skew_ms` ahead of
    /// `told_at`, so before `until` less the skew the extension must have held.
    pub fn capture_after_extension(
        &mut self,
        id: &TransferId,
        until: Timestamp,
        told_at: u64,
        skew_ms: u64,
    ) {
        if told_at + skew_ms < until.as_ms() {
            let detail =
                format!("{id}: extended to {until}, a capture told hold_expired at t{told_at}");
            self.record("acknowledged", told_at, detail);
        }
    }

    /// Guarantee 7, after the horizon: nothing reserved, nothing incoming, no intent or
    /// tombstone left, no placeholder left.
    pub fn no_leaks(&mut self, shards: &[MemoryShard], at_ms: u64) {
        for a in shards.iter().flat_map(|s| s.accounts()) {
            if a.reserved != 0
                || a.incoming != 0
                || !a.intents.is_empty()
                || a.status == AccountStatus::Unopened
            {
                let open = a.open_intents();
                let detail = format!(
                    "{}: reserved {} incoming {} intents {} (open {open}) {:?}",
                    a.id,
                    a.reserved,
                    a.incoming,
                    a.intents.len(),
                    a.status
                );
                self.record("no_leaks", at_ms, detail);
            }
        }
    }

    /// The change feed, at rest: each transfer's events are the changes its record shows
    /// it went through, in order, each once (`accepted` first; `held` before a hold is
    /// settled; its end, `done` or `canceled`, once it is terminal; a `refunded` naming
    /// its refund when linked), and no event names a transfer no shard holds.
    pub fn events(&mut self, shards: &[MemoryShard], at_ms: u64) {
        let feeds = shards
            .iter()
            .map(|s| s.events_after(xfer_store::FeedPosition::START, usize::MAX))
            .collect();
        self.feed(shards.iter().flat_map(|s| s.transfers()), feeds, at_ms);
    }

    /// [`Checker::events`] over `transfers` and each shard's feed, read whole.
    pub fn feed<'a>(
        &mut self,
        transfers: impl Iterator<Item = &'a TransferRecord>,
        feeds: Vec<Vec<xfer_store::Event>>,
        at_ms: u64,
    ) {
        use xfer_store::EventKind as K;
        let transfers: BTreeMap<&TransferId, &TransferRecord> =
            transfers.map(|r| (r.id(), r)).collect();
        let mut made: BTreeMap<TransferId, Vec<xfer_store::Event>> = BTreeMap::new();
        for (shard, feed) in feeds.into_iter().enumerate() {
            if feed.windows(2).any(|w| w[0].position >= w[1].position) {
                self.record(
                    "events",
                    at_ms,
                    format!("shard {shard}: positions not increasing"),
                );
            }
            for e in feed {
                made.entry(e.transfer.clone()).or_default().push(e);
            }
        }
        // (Their times are the writers' clocks, skewed: their order is the feed's.)
        for t in made.keys() {
            if !transfers.contains_key(t) {
                self.record("events", at_ms, format!("{t}: events without a record"));
            }
        }
        for (t, r) in &transfers {
            let kinds: Vec<K> = made
                .get(*t)
                .map_or_else(Vec::new, |e| e.iter().map(|e| e.kind).collect());
            let reason = r.reason.as_ref();
            let mut want = vec![K::Accepted];
            let held = kinds.contains(&K::Held);
            if held {
                want.push(K::Held);
                match r.state {
                    TransferState::Applied | TransferState::Done => want.push(K::Captured),
                    TransferState::Canceling | TransferState::Canceled => {
                        want.push(if reason == Some(&xfer_core::CancelReason::Voided) {
                            K::Voided
                        } else {
                            K::Expired
                        })
                    }
                    _ => {}
                }
            }
            match r.state {
                TransferState::Done => want.push(K::Done),
                TransferState::Canceled => want.push(K::Canceled),
                _ => {}
            }
            let refunds: Vec<&TransferId> = made
                .get(*t)
                .into_iter()
                .flatten()
                .filter_map(|e| e.refund.as_ref())
                .collect();
            want.extend(refunds.iter().map(|_| K::Refunded));
            let linked = refunds.last().copied() == r.refunded_by.as_ref();
            if kinds != want || !linked {
                let detail = format!(
                    "{t} ({:?}, refunded by {:?}): events {kinds:?}, changes {want:?}",
                    r.state, r.refunded_by
                );
                self.record("events", at_ms, detail);
            }
        }
    }

    /// The history index, once every horizon has passed (late and repeated releases
    /// included): an account lists only transfers that name it, each at most once, and
    /// every done one. (A canceled one is listed where its first write on the account came
    /// before its horizon, which the records no longer show.)
    pub fn history_index(&mut self, shards: &[MemoryShard], at_ms: u64) {
        let transfers: BTreeMap<&TransferId, &TransferRecord> = shards
            .iter()
            .flat_map(|s| s.transfers())
            .map(|r| (r.id(), r))
            .collect();
        let mut done: BTreeMap<&AccountId, Vec<&TransferId>> = BTreeMap::new();
        for r in transfers
            .values()
            .filter(|r| r.state == TransferState::Done)
        {
            for p in &r.spec.postings {
                done.entry(&p.from).or_default().push(r.id());
                done.entry(&p.to).or_default().push(r.id());
            }
        }
        for s in shards {
            for a in s.accounts().filter(|a| a.status != AccountStatus::Unopened) {
                let mut listed: BTreeMap<TransferId, u32> = BTreeMap::new();
                for (_, t) in s.history_entries(&a.id, None, usize::MAX) {
                    *listed.entry(t).or_default() += 1;
                }
                for (t, n) in &listed {
                    let names = transfers.get(t).is_some_and(|r| {
                        r.spec
                            .postings
                            .iter()
                            .any(|p| p.from == a.id || p.to == a.id)
                    });
                    if *n > 1 || !names {
                        let detail = format!("{}: lists {t} {n} time(s), named: {names}", a.id);
                        self.record("history", at_ms, detail);
                    }
                }
                for t in done.get(&a.id).into_iter().flatten() {
                    if !listed.contains_key(*t) {
                        let detail = format!("{}: does not list {t}, done", a.id);
                        self.record("history", at_ms, detail);
                    }
                }
            }
        }
    }
}

/// Whether a record's timeline says what happened to it (`xfer_store::timeline`): it starts
/// with the accepted step (`initial` or `pending`, at `created_at`), its last step is the
/// record's state, owner and epoch, epochs never decrease, no time is before the accepted
/// step's by more than the writers' clocks may disagree, each step changes something the
/// one before did not say (a repeat adds none), a terminal state is only followed by refund
/// links, and it is bounded.
pub fn timeline_fits(r: &TransferRecord, clock_skew_ms: u64) -> Result<(), String> {
    let steps = r.timeline.steps();
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
        return Err("no timeline".into());
    };
    if first.at != r.created_at
        || !matches!(first.state, TransferState::Initial | TransferState::Pending)
    {
        return Err(format!(
            "first step {} at {}, accepted at {}",
            first.state, first.at, r.created_at
        ));
    }
    if (last.state, last.owner.as_ref(), last.epoch) != (r.state, r.owner.as_ref(), r.epoch) {
        return Err(format!(
            "last step {} {:?} epoch {}, the record {} {:?} epoch {}",
            last.state, last.owner, last.epoch, r.state, r.owner, r.epoch
        ));
    }
    if steps.len() > xfer_core::TIMELINE_STEPS_MAX {
        return Err(format!("{} steps", steps.len()));
    }
    for w in steps.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if b.epoch < a.epoch {
            return Err(format!("epoch {} after {}", b.epoch, a.epoch));
        }
        // Steps are in the order they were written, each at its writer's clock when it made
        // the op: an op resent unchanged and written late (a zombie's finish after a
        // take-over, a claim after a decision) carries a time before the step before it.
        // No step is written before the transfer was accepted, though.
        if b.at.as_ms() + clock_skew_ms < first.at.as_ms() {
            return Err(format!("time {} before accepted at {}", b.at, first.at));
        }
        if a.state.is_terminal() && (b.state != a.state || b.refund.is_none()) {
            return Err(format!("{} after {}", b.state, a.state));
        }
        if (a.state, &a.owner, a.epoch, &a.refund) == (b.state, &b.owner, b.epoch, &b.refund) {
            return Err(format!("a step repeated: {} epoch {}", b.state, b.epoch));
        }
    }
    Ok(())
}
