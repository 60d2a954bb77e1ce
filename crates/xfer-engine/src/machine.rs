//! The protocol of SPEC §3 as a state machine with no I/O: one [`Machine`] drives one
//! transfer for one owner. It never reads a clock, never draws a random number and never
//! waits: a driver feeds it replies and the time (`now`) and sends the [`Request`]s it
//! returns. The tokio [`Executor`](crate::Executor) and the simulator are two such drivers.
//!
//! ```text
//!  submit ─▶ Inserting ─────────┬─▶ (Linking: refunds) ─▶ Preparing ─▶ Deciding ─┬─▶ Posting ─▶ Finishing
//!  (id exists) └─▶ Claiming ─────┤                                                  ├─▶ Releasing ─▶ Finishing
//!  recover ───────▶ Claiming ────┘                                                  └─▶ (held: stop)
//!  capture / void ─────────────────────────────────▶ Posting / Releasing
//!  capture in part ─▶ ReadingHold ─▶ capture
//! ```
//!
//! A new transfer is inserted already claimed by its submitter (`pending`, epoch 1, leased),
//! so the insert is also the claim; only when the id exists (a repeat, a record accepted
//! with `?wait=false`) does the machine claim it with a compare-and-set of its own.
//!
//! Every request is idempotent, so a driver may resend any outstanding request as often as
//! it likes (a lost reply, a timeout); replies to requests of an earlier phase are ignored.
//! The one write that commits or cancels is `Decide`, a compare-and-set on the transfer's
//! state and epoch; everything before it can be undone, everything after it is forced.
//! See `docs/protocol.md` for the crash-point analysis.

use std::sync::Arc;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{
    Amount, CancelReason, Code, Leg, Legs, OwnerId, Rejection, Timestamp, TransferId, TransferKind,
    TransferRecord, TransferSpec, TransferState, POSTINGS_MAX,
};
use xfer_store::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};

/// Timing parameters shared by every executor and sweeper of a deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a claim lasts before a sweeper may take the transfer over.
    pub lease_ms: u64,
    /// The bound on the difference between any two clocks (processes and stores).
    pub skew_ms: u64,
    /// How long a transfer inserted unclaimed (`initial`: accepted with `?wait=false`) waits
    /// for its claim before a sweeper runs it. A submitting executor inserts claimed.
    pub claim_grace_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease_ms: 5_000,
            skew_ms: 500,
            claim_grace_ms: 5_000,
        }
    }
}

/// One operation the machine wants sent, tagged to match its reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Pass back with the reply.
    pub tag: u32,
    /// What to execute.
    pub op: Op,
}

/// How a machine stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The transfer is terminal (`done` or `canceled`); here is its record.
    Finished(TransferRecord),
    /// A hold, prepared and waiting for capture or void.
    Held(TransferRecord),
    /// Somebody else runs the transfer now (their claim is live, or they took it over); the
    /// record as last seen. Not an error: the transfer goes on without this machine.
    Left(TransferRecord),
    /// Refused before anything changed.
    Rejected(Rejection),
    /// No such transfer.
    NotFound,
    /// A store answered something the protocol forbids (a released intent at post, a
    /// posted one at release): a broken invariant that needs a human.
    Violation(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Inserting,
    Claiming,
    /// A capture in part: reading the hold to check the amounts against its postings.
    ReadingHold(Vec<Amount>),
    /// A capture: of each posting the amount asked, or none for every posting whole.
    Capturing(Vec<Amount>),
    Voiding,
    /// Refund: linking the original to this transfer, possibly replacing canceled refunds.
    Linking {
        replacing: Vec<TransferId>,
    },
    /// Refund: the refunds linked before leave too little; reading the original.
    ReadingOriginal(Code),
    /// Refund: reading the refunds linked to the original (`left`, the next last) to see
    /// which were canceled, so that their links may be replaced; `code` refused the link.
    ReadingRivals {
        left: Vec<TransferId>,
        canceled: Vec<TransferId>,
        code: Code,
    },
    /// Each leg's prepare; done when none waits for its reply.
    Preparing,
    Deciding,
    /// Each leg's post; done when none waits for its reply.
    Posting,
    /// Each leg's release; done when none waits for its reply.
    Releasing,
    Finishing,
    Stopped(Box<Outcome>),
}

/// Drives one transfer. See the module docs.
#[derive(Clone, Debug)]
pub struct Machine {
    cfg: Config,
    owner: OwnerId,
    id: TransferId,
    phase: Phase,
    /// What the next steps need of the last record a store answered (none before one did).
    seen: Option<Seen>,
    legs: Legs,
    /// The tag of the current phase's first request: its `i`-th has tag `phase_tag + i`,
    /// and in a phase of one request per leg the `i`-th is leg `i`'s.
    phase_tag: u32,
    /// The current phase's requests still waiting for a reply: bit `i` for its `i`-th. A
    /// phase makes at most one request per leg, and a transfer has at most [`LEGS_MAX`]
    /// legs, so the set fits in the machine itself: asking whether a reply is wanted (the
    /// driver does, for every reply and every resend) reads no other memory.
    waiting: u128,
    next_tag: u32,
    /// Where the phase functions put the requests they make: during one call of
    /// [`Machine::on_reply_into`] or [`Machine::on_tick_into`], the caller's own list
    /// (swapped in and back), so that no step allocates a list of its own; empty between
    /// calls.
    sink: Vec<Request>,
    /// Started by [`Machine::recover`] (only mutants care).
    recovering: bool,
    /// Asked for the one-phase commit: its answer is the decision.
    one_phase: bool,
}

/// What a machine keeps of the transfer's record: the few fields its next steps read. The
/// record itself stays the store's, shared with the answer: a copy kept here would copy the
/// whole record for every answer taken, and the answer's `Arc` kept here would make the
/// store's next write to the record copy it under the shard's lock. A machine that stops with the record
/// copies it then, from the answer in hand.
#[derive(Clone, Debug)]
struct Seen {
    epoch: u64,
    deadline: Timestamp,
    hold: bool,
    /// A refund's original and postings (its link is made, and made again, from them).
    refund: Option<(TransferId, Vec<xfer_core::Posting>)>,
}

impl Seen {
    fn of(rec: &TransferRecord) -> Seen {
        Seen {
            epoch: rec.epoch,
            deadline: rec.deadline,
            hold: matches!(rec.spec.kind, TransferKind::Hold { .. }),
            refund: rec
                .spec
                .refund_of
                .as_ref()
                .map(|original| (original.clone(), rec.spec.postings.to_vec())),
        }
    }
}

/// The most legs (accounts) a transfer has: each posting names two.
const LEGS_MAX: usize = 2 * POSTINGS_MAX;
const _: () = assert!(
    LEGS_MAX <= u128::BITS as usize,
    "a phase's requests fit `waiting`"
);

impl Machine {
    /// Starts a new transfer: validates `spec` and asks to insert it.
    pub fn submit(
        spec: TransferSpec,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
    ) -> Result<(Machine, Vec<Request>), Rejection> {
        Machine::submit_placed(spec, owner, now, cfg, false)
    }

    /// As [`Machine::submit`]; `local` says that every account the transfer names lives on
    /// its record's shard ([`Router::is_local`](crate::Router::is_local)). A plain transfer
    /// (no hold, no refund) so placed asks for the one-phase commit
    /// ([`TransferOp::OnePhase`]): the store answers the record `done`, or inserts it
    /// pending where it cannot commit it at once, and the two phases go on from there.
    pub fn submit_placed(
        spec: TransferSpec,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
        local: bool,
    ) -> Result<(Machine, Vec<Request>), Rejection> {
        let legs = spec.validate()?;
        let one_phase =
            local && matches!(spec.kind, TransferKind::Transfer) && spec.refund_of.is_none();
        let lease_until = now.plus_ms(cfg.lease_ms);
        let record = Arc::new(TransferRecord::accept_claimed(
            spec,
            now,
            owner.clone(),
            lease_until,
        ));
        let mut m = Machine::blank(record.id().clone(), owner, cfg);
        m.legs = legs;
        m.one_phase = one_phase;
        let op = if one_phase {
            TransferOp::OnePhase(record)
        } else {
            TransferOp::Insert(record)
        };
        let insert = Op::Transfer(m.id.clone(), op);
        m.enter(Phase::Inserting);
        m.request(insert);
        Ok(m.started())
    }

    /// Takes over `id` (a sweeper, or a re-drive): claims it and finishes whatever state it
    /// is in.
    pub fn recover(
        id: TransferId,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
    ) -> (Machine, Vec<Request>) {
        let mut m = Machine::blank(id, owner, cfg);
        m.recovering = true;
        m.claim(now);
        m.started()
    }

    /// Captures the hold `id` and posts it.
    pub fn capture(
        id: TransferId,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
    ) -> (Machine, Vec<Request>) {
        Machine::settle_hold(id, owner, now, cfg, Phase::Capturing(Vec::new()))
    }

    /// Captures `amounts` of the hold `id`, one per posting in order (each at most the
    /// posting's), and posts them, giving the rest back in the same posts. Reads the hold
    /// first: the amounts are checked against its postings before anything is written
    /// (`capture_exceeds_hold`), and amounts that take every posting whole capture it as
    /// [`Machine::capture`] does.
    pub fn capture_part(
        id: TransferId,
        amounts: Vec<Amount>,
        owner: OwnerId,
        cfg: Config,
    ) -> (Machine, Vec<Request>) {
        let mut m = Machine::blank(id, owner, cfg);
        m.whole(Phase::ReadingHold(amounts), TransferOp::Get);
        m.started()
    }

    /// Voids the hold `id` and releases it.
    pub fn void(
        id: TransferId,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
    ) -> (Machine, Vec<Request>) {
        Machine::settle_hold(id, owner, now, cfg, Phase::Voiding)
    }

    fn settle_hold(
        id: TransferId,
        owner: OwnerId,
        now: Timestamp,
        cfg: Config,
        phase: Phase,
    ) -> (Machine, Vec<Request>) {
        let mut m = Machine::blank(id, owner, cfg);
        m.settle(phase, now);
        m.started()
    }

    /// Asks for the capture or void of `phase`, taking the hold over.
    fn settle(&mut self, phase: Phase, now: Timestamp) {
        let (owner, lease_until) = (self.owner.clone(), now.plus_ms(self.cfg.lease_ms));
        let op = match &phase {
            Phase::Capturing(amounts) if !amounts.is_empty() => TransferOp::CapturePart {
                owner,
                now,
                lease_until,
                amounts: amounts.clone(),
            },
            Phase::Capturing(_) => TransferOp::Capture {
                owner,
                now,
                lease_until,
            },
            _ => TransferOp::Void {
                owner,
                now,
                lease_until,
            },
        };
        self.whole(phase, op);
    }

    /// A new machine and the first requests it made.
    fn started(mut self) -> (Machine, Vec<Request>) {
        let first = std::mem::take(&mut self.sink);
        (self, first)
    }

    fn blank(id: TransferId, owner: OwnerId, cfg: Config) -> Machine {
        Machine {
            cfg,
            owner,
            id,
            phase: Phase::Inserting,
            seen: None,
            legs: Legs::new(),
            phase_tag: 0,
            waiting: 0,
            next_tag: 0,
            sink: Vec::new(),
            recovering: false,
            one_phase: false,
        }
    }

    /// The transfer this machine drives.
    pub fn id(&self) -> &TransferId {
        &self.id
    }

    /// The outcome, once the machine has stopped.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.phase {
            Phase::Stopped(o) => Some(o.as_ref()),
            _ => None,
        }
    }

    /// The outcome, once the machine has stopped, taken out of it.
    pub fn into_outcome(self) -> Option<Outcome> {
        match self.phase {
            Phase::Stopped(o) => Some(*o),
            _ => None,
        }
    }

    /// True while a reply to `tag` would still be used (a driver resends only these).
    pub fn wants(&self, tag: u32) -> bool {
        self.waiting & self.bit(tag) != 0
    }

    /// True while the machine waits for its decide step's answer, or for its one-phase
    /// commit's (which decides if it commits).
    pub fn is_deciding(&self) -> bool {
        match self.phase {
            Phase::Deciding => true,
            Phase::Inserting => self.one_phase,
            _ => false,
        }
    }

    /// True once the machine's transfer is decided by it: posting, releasing, finishing,
    /// held, or done by its one-phase commit.
    pub fn is_decided(&self) -> bool {
        match &self.phase {
            Phase::Posting | Phase::Releasing | Phase::Finishing => true,
            Phase::Stopped(o) => match o.as_ref() {
                Outcome::Held(_) => true,
                Outcome::Finished(_) => self.one_phase,
                _ => false,
            },
            _ => false,
        }
    }

    /// The current phase's name, for logs and traces.
    pub fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Inserting => "inserting",
            Phase::Claiming => "claiming",
            Phase::ReadingHold(_) | Phase::Capturing(_) => "capturing",
            Phase::Voiding => "voiding",
            Phase::Linking { .. } | Phase::ReadingOriginal(_) | Phase::ReadingRivals { .. } => {
                "linking"
            }
            Phase::Preparing => "preparing",
            Phase::Deciding => "deciding",
            Phase::Posting => "posting",
            Phase::Releasing => "releasing",
            Phase::Finishing => "finishing",
            Phase::Stopped(_) => "stopped",
        }
    }

    /// Time passes without a reply: cancels a prepare phase whose deadline (plus the skew
    /// bound) has passed on this clock.
    pub fn on_tick(&mut self, now: Timestamp) -> Vec<Request> {
        let mut next = Vec::new();
        self.on_tick_into(now, &mut next);
        next
    }

    /// As [`Machine::on_tick`], the requests appended to `out`.
    pub fn on_tick_into(&mut self, now: Timestamp, out: &mut Vec<Request>) {
        std::mem::swap(&mut self.sink, out);
        self.tick(now);
        std::mem::swap(&mut self.sink, out);
    }

    fn tick(&mut self, now: Timestamp) {
        match (&self.phase, &self.seen) {
            (Phase::Preparing, Some(r)) if now >= r.deadline.plus_ms(self.cfg.skew_ms) => self
                .decide(
                    TransferState::Canceling,
                    Some(CancelReason::DeadlinePassed),
                    now,
                ),
            _ => {}
        }
    }

    /// Feeds the reply to request `tag`; returns the requests to send next.
    pub fn on_reply(&mut self, tag: u32, reply: Reply, now: Timestamp) -> Vec<Request> {
        let mut next = Vec::new();
        self.on_reply_into(tag, reply, now, &mut next);
        next
    }

    /// As [`Machine::on_reply`], the requests appended to `out`: a driver that keeps one
    /// list per machine allocates none per step.
    pub fn on_reply_into(
        &mut self,
        tag: u32,
        reply: Reply,
        now: Timestamp,
        out: &mut Vec<Request>,
    ) {
        std::mem::swap(&mut self.sink, out);
        self.reply(tag, reply, now);
        std::mem::swap(&mut self.sink, out);
    }

    fn reply(&mut self, tag: u32, reply: Reply, now: Timestamp) {
        let bit = self.bit(tag);
        if self.waiting & bit == 0 {
            return; // a stale or duplicated reply
        }
        self.waiting &= !bit;
        let leg = tag.wrapping_sub(self.phase_tag) as usize;
        match std::mem::replace(&mut self.phase, Phase::Finishing) {
            Phase::Inserting => self.on_inserted(reply, now),
            Phase::Claiming => self.on_claimed(reply, now),
            Phase::ReadingHold(amounts) => self.on_read_hold(reply, amounts, now),
            Phase::Capturing(amounts) => {
                self.on_captured(reply, now, TransferState::Applied, &amounts)
            }
            Phase::Voiding => self.on_captured(reply, now, TransferState::Canceling, &[]),
            Phase::Linking { replacing } => self.on_linked(reply, replacing, now),
            Phase::ReadingOriginal(code) => self.on_read_original(reply, code, now),
            Phase::ReadingRivals {
                left,
                canceled,
                code,
            } => self.on_read_rival(reply, left, canceled, code, now),
            Phase::Preparing => self.on_prepared(leg, reply, now),
            Phase::Deciding => self.on_decided(reply, now),
            Phase::Posting => self.on_posted(leg, reply, now),
            Phase::Releasing => self.on_released(leg, reply, now),
            Phase::Finishing => self.on_finished(reply),
            Phase::Stopped(o) => self.phase = Phase::Stopped(o),
        }
    }

    // --- phase transitions -------------------------------------------------------------

    /// Enters `phase`: no request of the one before is wanted any more.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.phase_tag = self.next_tag;
        self.waiting = 0;
    }

    /// Asks for `op`: the phase's next request (in a phase of one per leg, the next leg's).
    fn request(&mut self, op: Op) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let bit = self.bit(tag);
        debug_assert_ne!(bit, 0, "more than {LEGS_MAX} requests in one phase");
        self.waiting |= bit;
        self.sink.push(Request { tag, op });
    }

    /// The bit of `tag` in `waiting`: none for a tag of an earlier phase.
    fn bit(&self, tag: u32) -> u128 {
        let i = tag.wrapping_sub(self.phase_tag);
        if i < u128::BITS {
            1 << i
        } else {
            0
        }
    }

    /// Re-enters the same phase keeping the other legs' requests waiting.
    fn stay(&mut self, phase: Phase) {
        self.phase = phase;
    }

    fn stop(&mut self, outcome: Outcome) {
        self.waiting = 0;
        self.phase = Phase::Stopped(Box::new(outcome));
    }

    fn whole(&mut self, phase: Phase, op: TransferOp) {
        let id = self.id.clone();
        self.enter(phase);
        self.request(Op::Transfer(id, op));
    }

    fn claim(&mut self, now: Timestamp) {
        let op = TransferOp::Claim {
            owner: self.owner.clone(),
            now,
            lease_until: now.plus_ms(self.cfg.lease_ms),
        };
        self.whole(Phase::Claiming, op)
    }

    /// Takes what the next steps need from the record a store answered ([`Seen`]).
    fn adopt(&mut self, rec: &TransferRecord) {
        if self.legs.is_empty() {
            // Validated when accepted; a record that no longer validates is corrupt.
            self.legs = rec.spec.validate().unwrap_or_default();
        }
        self.seen = Some(Seen::of(rec));
    }

    /// Continues from the state of `rec`, a record this machine has just taken (its epoch
    /// is ours); the record is copied only where the machine stops with it.
    fn run_from(&mut self, now: Timestamp, rec: Arc<TransferRecord>) {
        let (state, deadline) = (rec.state, rec.deadline);
        let refund_of = rec.spec.refund_of.clone();
        // A hold captured in part posts what each leg captured.
        let parts = (!rec.captured.is_empty() && state == TransferState::Applied)
            .then(|| rec.captured_legs());
        let copy = move || Arc::unwrap_or_clone(rec);
        if self.legs.is_empty() {
            return self.stop(Outcome::Violation(format!(
                "{}: record has no valid postings",
                self.id
            )));
        }
        let past_deadline = now >= deadline.plus_ms(self.cfg.skew_ms);
        match state {
            TransferState::Pending
                if self.recovering && mutant::is(Mutant::SweeperIgnoresPending) =>
            {
                self.stop(Outcome::Left(copy()))
            }
            TransferState::Pending if past_deadline => self.decide(
                TransferState::Canceling,
                Some(CancelReason::DeadlinePassed),
                now,
            ),
            TransferState::Pending => match refund_of {
                Some(original) => self.link(original, Vec::new(), now),
                None => self.prepare_all(),
            },
            TransferState::Applied if past_deadline && mutant::is(Mutant::CancelAfterApplied) => {
                self.decide(
                    TransferState::Canceling,
                    Some(CancelReason::DeadlinePassed),
                    now,
                )
            }
            TransferState::Applied => match parts {
                None => self.post_all(),
                Some(Some(parts)) if parts.len() == self.legs.len() => self.post_parts(parts),
                Some(_) => self.stop(Outcome::Violation(format!(
                    "{}: captured amounts that do not fit its postings",
                    self.id
                ))),
            },
            TransferState::Canceling => self.release_all(),
            TransferState::Held => self.stop(Outcome::Held(copy())),
            TransferState::Done | TransferState::Canceled => self.stop(Outcome::Finished(copy())),
            TransferState::Initial => self.claim(now),
        }
    }

    fn link(&mut self, original: TransferId, replacing: Vec<TransferId>, now: Timestamp) {
        let postings = self
            .seen
            .as_ref()
            .and_then(|s| s.refund.as_ref())
            .expect("a refund links after its claim")
            .1
            .clone();
        let op = TransferOp::LinkRefund {
            refund: self.id.clone(),
            replacing: replacing.clone(),
            postings,
            now,
        };
        self.enter(Phase::Linking { replacing });
        self.request(Op::Transfer(original, op));
    }

    fn prepare_all(&mut self) {
        let deadline = self.seen.as_ref().expect("prepare after claim").deadline;
        let horizon = deadline.plus_ms(self.cfg.skew_ms);
        self.each_leg(Phase::Preparing, |transfer, _, l| AccountOp::Prepare {
            transfer: transfer.clone(),
            asset: l.asset.clone(),
            debit: l.debit,
            credit: l.credit,
            deadline,
            horizon,
        });
    }

    fn post_all(&mut self) {
        self.each_leg(Phase::Posting, |transfer, _, l| AccountOp::Post {
            transfer: transfer.clone(),
            asset: l.asset.clone(),
        });
    }

    /// The posts of a hold captured in part: each leg moves what the captured amounts
    /// make of it, and its intent's rest is given back.
    fn post_parts(&mut self, parts: Legs) {
        self.each_leg(Phase::Posting, |transfer, i, l| AccountOp::PostPart {
            transfer: transfer.clone(),
            asset: l.asset.clone(),
            debit: parts[i].debit,
            credit: parts[i].credit,
        });
    }

    fn release_all(&mut self) {
        let horizon = self
            .seen
            .as_ref()
            .expect("release after claim")
            .deadline
            .plus_ms(self.cfg.skew_ms);
        self.each_leg(Phase::Releasing, |transfer, _, l| AccountOp::Release {
            transfer: transfer.clone(),
            asset: l.asset.clone(),
            horizon,
        });
    }

    /// Enters `phase` with one request per leg, `step` on the leg's account.
    fn each_leg(&mut self, phase: Phase, step: impl Fn(&TransferId, usize, &Leg) -> AccountOp) {
        if self.legs.len() > LEGS_MAX {
            // Validation allows no more; a record that has more is corrupt.
            return self.stop(Outcome::Violation(format!(
                "{}: {} legs, at most {LEGS_MAX}",
                self.id,
                self.legs.len()
            )));
        }
        self.enter(phase);
        for i in 0..self.legs.len() {
            let leg = &self.legs[i];
            let op = Op::Account(leg.account.clone(), step(&self.id, i, leg));
            self.request(op);
        }
    }

    fn decide(&mut self, to: TransferState, reason: Option<CancelReason>, now: Timestamp) {
        let epoch = self.seen.as_ref().expect("decide after claim").epoch;
        self.whole(
            Phase::Deciding,
            TransferOp::Decide {
                epoch,
                to,
                reason,
                now,
            },
        )
    }

    fn finish(&mut self, now: Timestamp) {
        self.whole(Phase::Finishing, TransferOp::Finish { now })
    }

    // --- replies -----------------------------------------------------------------------

    fn on_inserted(&mut self, reply: Reply, now: Timestamp) {
        match reply {
            // Inserted, or the same body was already there: compete for the claim either
            // way; a live claim or a terminal state answers `Unchanged` there.
            Reply::Unchanged(rec) if mutant::is(Mutant::DuplicateAnswersStaleState) => {
                self.stop(Outcome::Finished(Arc::unwrap_or_clone(rec)))
            }
            // Committed in one phase: nothing is left to do.
            Reply::Transfer(rec) if self.one_phase && rec.state == TransferState::Done => {
                self.stop(Outcome::Finished(Arc::unwrap_or_clone(rec)))
            }
            // Inserted now: the record we sent, claimed by us (the insert was the claim).
            Reply::Transfer(rec)
                if rec.state == TransferState::Pending
                    && rec.owner.as_ref() == Some(&self.owner) =>
            {
                self.adopt(&rec);
                self.run_from(now, rec)
            }
            Reply::Transfer(rec) | Reply::Unchanged(rec) => {
                self.adopt(&rec);
                self.claim(now)
            }
            Reply::Refused(code) => self.stop(Outcome::Rejected(Rejection::new(
                code,
                "id",
                format!("{} exists with a different body", self.id),
            ))),
            other => self.unexpected("insert", other),
        }
    }

    fn on_claimed(&mut self, reply: Reply, now: Timestamp) {
        match reply {
            Reply::Transfer(rec) => {
                self.adopt(&rec);
                self.run_from(now, rec)
            }
            Reply::Unchanged(rec) => {
                self.adopt(&rec);
                match rec.state {
                    TransferState::Done | TransferState::Canceled => {
                        self.stop(Outcome::Finished(Arc::unwrap_or_clone(rec)))
                    }
                    TransferState::Held => self.stop(Outcome::Held(Arc::unwrap_or_clone(rec))),
                    // Our own claim whose reply was lost: the lease is ours, carry on.
                    _ if rec.owner.as_ref() == Some(&self.owner) => self.run_from(now, rec),
                    _ => self.stop(Outcome::Left(Arc::unwrap_or_clone(rec))),
                }
            }
            Reply::NotFound => self.stop(Outcome::NotFound),
            other => self.unexpected("claim", other),
        }
    }

    /// The hold read for a capture in part: its postings judge the amounts.
    fn on_read_hold(&mut self, reply: Reply, amounts: Vec<Amount>, now: Timestamp) {
        match reply {
            Reply::Transfer(rec) | Reply::Unchanged(rec) => {
                // A transfer, or a hold settled otherwise, is refused as a capture would be,
                // whatever the amounts.
                if let Some(refusal) = settled_otherwise(&rec, TransferState::Applied) {
                    return self.stop(Outcome::Rejected(refusal));
                }
                let whole = match rec.spec.check_capture(&amounts) {
                    Ok(whole) => whole,
                    Err(refusal) => return self.stop(Outcome::Rejected(refusal)),
                };
                let amounts = if whole { Vec::new() } else { amounts };
                self.settle(Phase::Capturing(amounts), now)
            }
            Reply::NotFound => self.stop(Outcome::NotFound),
            other => self.unexpected("capture/void", other),
        }
    }

    fn on_captured(&mut self, reply: Reply, now: Timestamp, goal: TransferState, asked: &[Amount]) {
        match reply {
            Reply::Transfer(rec) => {
                self.adopt(&rec);
                self.run_from(now, rec)
            }
            Reply::Unchanged(rec) => {
                self.adopt(&rec);
                if let Some(refusal) = settled_otherwise(&rec, goal) {
                    self.stop(Outcome::Rejected(refusal))
                } else if goal == TransferState::Applied
                    && rec.state.is_decided()
                    && rec.captured != asked
                {
                    self.stop(Outcome::Rejected(Rejection::new(
                        Code::HoldAlreadyCaptured,
                        "amounts",
                        format!(
                            "{} was captured with other amounts; a captured hold can only be refunded",
                            self.id
                        ),
                    )))
                } else if rec.state.is_terminal() {
                    self.stop(Outcome::Finished(Arc::unwrap_or_clone(rec)))
                } else if rec.state == goal && rec.owner.as_ref() == Some(&self.owner) {
                    // Our own capture or void whose reply was lost: carry on.
                    self.run_from(now, rec)
                } else {
                    self.stop(Outcome::Left(Arc::unwrap_or_clone(rec)))
                }
            }
            Reply::Refused(code) => {
                let field = if code == Code::HoldExpired {
                    "hold"
                } else {
                    "id"
                };
                self.stop(Outcome::Rejected(Rejection::new(
                    code,
                    field,
                    format!("{} cannot be changed so", self.id),
                )))
            }
            Reply::NotFound => self.stop(Outcome::NotFound),
            other => self.unexpected("capture/void", other),
        }
    }

    fn on_linked(&mut self, reply: Reply, replacing: Vec<TransferId>, now: Timestamp) {
        match reply {
            Reply::Transfer(_) | Reply::Unchanged(_) => self.prepare_all(),
            // The refunds linked before leave too little: if some were canceled, their
            // links may be replaced. A link that replaced some and is still refused ends it.
            Reply::Refused(
                code @ (Code::OriginalAlreadyRefunded
                | Code::RefundExceedsOriginal
                | Code::TooManyRefunds),
            ) if replacing.is_empty() => {
                let original = self.original();
                self.enter(Phase::ReadingOriginal(code));
                self.request(Op::Transfer(original, TransferOp::Get));
            }
            Reply::Refused(code) => self.cancel_refund(code, now),
            Reply::NotFound => self.cancel_refund(Code::TransferNotFound, now),
            other => self.unexpected("link-refund", other),
        }
    }

    fn on_read_original(&mut self, reply: Reply, code: Code, now: Timestamp) {
        match reply {
            Reply::Unchanged(orig) | Reply::Transfer(orig) => {
                let links = orig.refund_links();
                if links.iter().any(|l| l.refund == self.id) {
                    // Linked to us since: the link answers as a repeat.
                    return self.link(self.original(), Vec::new(), now);
                }
                // Read newest first: `left` is taken from its end.
                let left: Vec<TransferId> = links.iter().map(|l| l.refund.clone()).collect();
                self.read_next_rival(left, Vec::new(), code, now)
            }
            _ => self.cancel_refund(code, now),
        }
    }

    fn read_next_rival(
        &mut self,
        mut left: Vec<TransferId>,
        canceled: Vec<TransferId>,
        code: Code,
        now: Timestamp,
    ) {
        match left.pop() {
            Some(rival) => {
                let op = Op::Transfer(rival, TransferOp::Get);
                self.enter(Phase::ReadingRivals {
                    left,
                    canceled,
                    code,
                });
                self.request(op);
            }
            None if canceled.is_empty() => self.cancel_refund(code, now),
            None => self.link(self.original(), canceled, now),
        }
    }

    fn on_read_rival(
        &mut self,
        reply: Reply,
        left: Vec<TransferId>,
        mut canceled: Vec<TransferId>,
        code: Code,
        now: Timestamp,
    ) {
        match reply {
            // A canceled refund can never post: its link may be replaced.
            Reply::Unchanged(r) if r.state == TransferState::Canceled => {
                canceled.push(r.spec.id.clone())
            }
            Reply::Unchanged(_) | Reply::Transfer(_) | Reply::NotFound => {}
            other => return self.unexpected("read-refund", other),
        }
        self.read_next_rival(left, canceled, code, now)
    }

    fn original(&self) -> TransferId {
        self.seen
            .as_ref()
            .and_then(|s| s.refund.as_ref())
            .map(|(original, _)| original.clone())
            .expect("a refund has an original")
    }

    fn cancel_refund(&mut self, code: Code, now: Timestamp) {
        self.decide(
            TransferState::Canceling,
            Some(CancelReason::RefundRefused { code }),
            now,
        )
    }

    fn on_prepared(&mut self, leg: usize, reply: Reply, now: Timestamp) {
        let outcome = match reply {
            Reply::Prepare(o) => o,
            other => return self.unexpected("prepare", other),
        };
        match outcome {
            PrepareOutcome::Prepared
            | PrepareOutcome::AlreadyPrepared
            | PrepareOutcome::AlreadyPosted => {
                // Every leg answered: none waits (`reply` took this one's bit out).
                if self.waiting == 0 {
                    let hold = self.seen.as_ref().is_some_and(|s| s.hold);
                    let to = if hold {
                        TransferState::Held
                    } else {
                        TransferState::Applied
                    };
                    self.decide(to, None, now)
                } else {
                    self.stay(Phase::Preparing)
                }
            }
            // Only a canceling decision leaves a released mark: our decide will find it.
            PrepareOutcome::AlreadyReleased | PrepareOutcome::TooLate => self.decide(
                TransferState::Canceling,
                Some(CancelReason::DeadlinePassed),
                now,
            ),
            PrepareOutcome::Refused(code) => {
                let account = self.legs[leg].account.clone();
                self.decide(
                    TransferState::Canceling,
                    Some(CancelReason::Refused { account, code }),
                    now,
                )
            }
        }
    }

    fn on_decided(&mut self, reply: Reply, now: Timestamp) {
        let my_epoch = self.seen.as_ref().map(|s| s.epoch);
        match reply {
            Reply::Transfer(rec) => {
                self.adopt(&rec);
                self.run_from(now, rec)
            }
            // Same epoch: our own earlier decide whose reply was lost, or a state we follow.
            Reply::Unchanged(rec)
                if Some(rec.epoch) == my_epoch && rec.state != TransferState::Pending =>
            {
                self.adopt(&rec);
                self.run_from(now, rec)
            }
            // Another owner's epoch: a sweeper took over while we were slow. Stop.
            Reply::Unchanged(rec) => self.stop(Outcome::Left(Arc::unwrap_or_clone(rec))),
            other => self.unexpected("decide", other),
        }
    }

    fn on_posted(&mut self, leg: usize, reply: Reply, now: Timestamp) {
        match reply {
            Reply::Post(
                PostOutcome::Posted | PostOutcome::AlreadyPosted | PostOutcome::Missing,
            ) => {
                // This leg answered; the phase is done when none waits.
                if self.waiting == 0 || mutant::is(Mutant::FinishAfterFirstPost) {
                    self.finish(now)
                } else {
                    self.stay(Phase::Posting)
                }
            }
            Reply::Post(PostOutcome::FoundReleased) => {
                let account = &self.legs[leg].account;
                self.stop(Outcome::Violation(format!(
                    "{}: post found a released intent on {account}",
                    self.id
                )))
            }
            other => self.unexpected("post", other),
        }
    }

    fn on_released(&mut self, leg: usize, reply: Reply, now: Timestamp) {
        match reply {
            Reply::Release(
                ReleaseOutcome::Released | ReleaseOutcome::AlreadyReleased | ReleaseOutcome::Marked,
            ) => {
                if self.waiting == 0 {
                    self.finish(now)
                } else {
                    self.stay(Phase::Releasing)
                }
            }
            Reply::Release(ReleaseOutcome::FoundPosted) => {
                let account = &self.legs[leg].account;
                self.stop(Outcome::Violation(format!(
                    "{}: release found a posted intent on {account}",
                    self.id
                )))
            }
            other => self.unexpected("release", other),
        }
    }

    fn on_finished(&mut self, reply: Reply) {
        match reply {
            // The record goes into the outcome, not into the machine as well: a stopped
            // machine reads no more replies (one copy of the record less per transfer).
            Reply::Transfer(rec) | Reply::Unchanged(rec) if rec.state.is_terminal() => {
                self.stop(Outcome::Finished(Arc::unwrap_or_clone(rec)))
            }
            other => self.unexpected("finish", other),
        }
    }

    fn unexpected(&mut self, step: &str, reply: Reply) {
        self.stop(Outcome::Violation(format!(
            "{}: {step} answered {reply}",
            self.id
        )))
    }
}

/// Why a capture (`goal` applied) or a void (`goal` canceling) that left the record as it
/// was is refused: the transfer is no hold, or the hold was settled the other way (captured,
/// voided, expired) or canceled before it was ever held. `None`: the record is where this
/// settle would have put it, so a repeat answers as the first did.
pub(crate) fn settled_otherwise(rec: &TransferRecord, goal: TransferState) -> Option<Rejection> {
    let id = &rec.spec.id;
    let refuse = |code, message: String| Some(Rejection::new(code, "id", message));
    if rec.spec.kind == TransferKind::Transfer {
        return refuse(
            Code::TransferIsNotHeld,
            format!(
                "{id} is a transfer, not a hold: only a hold can be captured, voided or extended"
            ),
        );
    }
    let captured = matches!(rec.state, TransferState::Applied | TransferState::Done);
    let canceled = matches!(
        rec.state,
        TransferState::Canceling | TransferState::Canceled
    );
    match (goal, captured, canceled, &rec.reason) {
        (TransferState::Applied, true, _, _) => None,
        (TransferState::Canceling, _, true, Some(CancelReason::Voided)) => None,
        (_, true, _, _) => refuse(
            Code::HoldAlreadyCaptured,
            format!("{id} was captured; a captured hold can only be refunded"),
        ),
        (_, _, true, Some(CancelReason::Voided)) => refuse(
            Code::HoldAlreadyVoided,
            format!("{id} was voided; its reservation is released"),
        ),
        (_, _, true, Some(CancelReason::Expired)) => Some(Rejection::new(
            Code::HoldExpired,
            "hold",
            format!("{id} expired uncaptured; its reservation is released"),
        )),
        (_, _, true, reason) => refuse(
            Code::TransferIsNotHeld,
            format!(
                "{id} was canceled ({}) before it was held",
                reason
                    .as_ref()
                    .map_or("no reason".to_string(), |r| r.to_string())
            ),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{AccountId, Amount, AssetCode, LowerBound, Posting};
    use xfer_store::MemoryShard;

    fn spec() -> TransferSpec {
        TransferSpec {
            id: TransferId::new("t1").unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: Amount::new(5, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        }
    }

    /// Accounts `a` and `b` on one shard.
    fn bank() -> (Timestamp, OwnerId, MemoryShard) {
        let (now, owner) = (Timestamp(100), OwnerId::new("me").unwrap());
        let mut shard = MemoryShard::new();
        for id in ["a", "b"] {
            let asset = AssetCode::new("USD", "asset").unwrap();
            let op = AccountOp::Create {
                asset,
                lower_bound: LowerBound::Unbounded,
            };
            shard.apply(&Op::Account(AccountId::new(id).unwrap(), op), now);
        }
        (now, owner, shard)
    }

    #[test]
    fn a_new_transfer_is_inserted_claimed_and_prepares_next() {
        let (now, owner, mut shard) = bank();
        let (mut m, reqs) = Machine::submit(spec(), owner.clone(), now, Config::default()).unwrap();
        let insert = shard.apply(&reqs[0].op, now);
        let Reply::Transfer(rec) = &insert else {
            panic!("{insert}")
        };
        assert_eq!(
            (rec.state, rec.owner.as_ref(), rec.epoch),
            (TransferState::Pending, Some(&owner), 1)
        );
        let next = m.on_reply(reqs[0].tag, insert, now);
        assert_eq!(m.phase_name(), "preparing", "no claim of its own");
        assert_eq!(next.len(), 2, "one prepare per leg");
    }

    /// A driver's list keeps what it held (requests waiting to be resent) and gets the
    /// next step's after them; a stale reply adds nothing.
    #[test]
    fn replies_append_to_the_drivers_own_list() {
        let (now, owner, mut shard) = bank();
        let (mut m, reqs) = Machine::submit(spec(), owner, now, Config::default()).unwrap();
        let insert = shard.apply(&reqs[0].op, now);
        let waiting = Request {
            tag: 99,
            op: Op::Transfer(m.id().clone(), TransferOp::Get),
        };
        let mut queue = vec![waiting.clone()];
        m.on_reply_into(reqs[0].tag, insert.clone(), now, &mut queue);
        assert_eq!(
            queue.len(),
            3,
            "the waiting request, then one prepare per leg"
        );
        assert_eq!(queue[0], waiting);
        m.on_reply_into(reqs[0].tag, insert, now, &mut queue);
        assert_eq!(queue.len(), 3, "a stale reply asks for nothing");
        // Both legs must answer before the decision: the first alone leaves it preparing.
        let (a, b) = (queue[1].clone(), queue[2].clone());
        let mut next = Vec::new();
        m.on_reply_into(b.tag, shard.apply(&b.op, now), now, &mut next);
        assert!(next.is_empty(), "{next:?}");
        assert_eq!(m.phase_name(), "preparing");
        m.on_reply_into(a.tag, shard.apply(&a.op, now), now, &mut next);
        assert_eq!(m.phase_name(), "deciding");
        assert_eq!(next.len(), 1, "one decide");
    }

    /// The most legs a transfer can have (every posting between two accounts of its own):
    /// every request of a phase is waited for, answered in any order, and the transfer
    /// ends done; a reply to the phase before is not wanted once the next has begun.
    #[test]
    fn a_transfer_with_the_most_legs_waits_for_every_one() {
        let (now, owner, mut shard) = bank();
        let usd = AssetCode::new("USD", "asset").unwrap();
        let account = |side: &str, i: usize| AccountId::new(&format!("{side}{i}")).unwrap();
        for i in 0..POSTINGS_MAX {
            for side in ["from", "to"] {
                let op = AccountOp::Create {
                    asset: usd.clone(),
                    lower_bound: LowerBound::Unbounded,
                };
                shard.apply(&Op::Account(account(side, i), op), now);
            }
        }
        let mut spec = spec();
        spec.postings = (0..POSTINGS_MAX)
            .map(|i| Posting {
                from: account("from", i),
                to: account("to", i),
                asset: usd.clone(),
                amount: Amount::new(1, "amount").unwrap(),
            })
            .collect();
        let (mut m, mut reqs) = Machine::submit(spec, owner, now, Config::default()).unwrap();
        let mut phases = Vec::new();
        while m.outcome().is_none() {
            phases.push((m.phase_name(), reqs.len()));
            let mut next = Vec::new();
            // Answered last first: the phase goes on only after its first request's reply.
            for r in reqs.iter().rev() {
                assert!(next.is_empty(), "{} went on early", m.phase_name());
                let reply = shard.apply(&r.op, now);
                m.on_reply_into(r.tag, reply, now, &mut next);
            }
            if let Some(r) = reqs.first() {
                assert!(!m.wants(r.tag), "a reply of the phase before");
            }
            reqs = next;
        }
        assert_eq!(
            phases,
            [
                ("inserting", 1),
                ("preparing", LEGS_MAX),
                ("deciding", 1),
                ("posting", LEGS_MAX),
                ("finishing", 1)
            ]
        );
        let Some(Outcome::Finished(rec)) = m.outcome() else {
            panic!("{:?}", m.outcome())
        };
        assert_eq!(rec.state, TransferState::Done);
    }

    /// The story (when a claim still followed every insert): a claim was applied but its
    /// reply lost; the resent claim answered `Unchanged` (the lease is live, and ours), and
    /// the machine stopped with `Left`, abandoning a transfer it owned until the sweeper
    /// took it over a lease later. Now the insert is the claim, and a lost insert reply
    /// leads to the same compare-and-set on our own live lease.
    #[test]
    fn a_lost_insert_reply_does_not_abandon_our_own_transfer() {
        let (now, owner, mut shard) = bank();
        let (mut m, reqs) = Machine::submit(spec(), owner, now, Config::default()).unwrap();
        let _lost = shard.apply(&reqs[0].op, now);
        let resent = shard.apply(&reqs[0].op, now);
        assert!(matches!(resent, Reply::Unchanged(_)), "{resent}");
        let claim = m.on_reply(reqs[0].tag, resent, now).remove(0);
        assert_eq!(m.phase_name(), "claiming");
        // Our claim (the insert) is live: the compare-and-set changes nothing, and the
        // machine sees the lease is its own.
        let claimed = shard.apply(&claim.op, now);
        assert!(matches!(claimed, Reply::Unchanged(_)), "{claimed}");
        let next = m.on_reply(claim.tag, claimed, now);
        assert_eq!(m.phase_name(), "preparing");
        assert_eq!(next.len(), 2, "one prepare per leg");
    }
}
