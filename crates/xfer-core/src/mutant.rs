//! Mutants: known-bad variants of the protocol, compiled only with the `mutants` feature.
//! The simulator turns one on and must report a broken guarantee; a mutant it cannot catch
//! means a checker or a fault is missing. Without the feature [`active`] is a constant
//! `None` and every mutant branch compiles away.

/// A deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// Prepare adds the credit straight to the balance (seed 003's flaw).
    CreditAtPrepare,
    /// Prepare reserves a debit without checking that it is available.
    DebitWithoutBalanceCheck,
    /// Post applies the amounts again even if the intent is already posted.
    DoublePost,
    /// Prepares ignore the deadline and tombstones; releases leave no mark.
    NoLatePrepareDefence,
    /// Recovery cancels an `applied` transfer whose deadline passed.
    CancelAfterApplied,
    /// Claim overwrites the state without comparing it.
    ClaimWithoutCas,
    /// Release marks the intent released but gives back nothing.
    ReleaseIgnoresAmount,
    /// Release moves an open intent's amounts into the balance, as a post would.
    ReleasePosts,
    /// The transfer is finished once any one post is acknowledged, not all of them.
    FinishAfterFirstPost,
    /// Recovery leaves `pending` transfers alone.
    SweeperIgnoresPending,
    /// Inserting an existing id with another body replaces the body.
    InsertOverwritesBody,
    /// A duplicate submission is answered with the stored state as if it were final.
    DuplicateAnswersStaleState,
    /// Tombstones are never dropped.
    TombstonesNeverPruned,
    /// Tombstones are dropped before their horizon.
    PruneIgnoresHorizon,
    /// The driver hands out outcomes without waiting for the log to be durable.
    AckBeforeSync,
    /// The driver reports a decision whose answer is not durable yet.
    ReportUndurableDecision,
    /// A one-phase commit of a transfer whose record exists moves the amounts again.
    OnePhaseIgnoresRecord,
    /// A record written done (a one-phase commit) makes only its `accepted` event.
    OnePhaseSkipsDoneEvent,
    /// A take-over (a claim or settle that keeps the state, new owner and epoch) adds no
    /// step to the record's timeline.
    TimelineSkipsTakeover,
    /// A refund link checks each amount against the original's but not the sum of the
    /// refunds already linked.
    RefundSumUnchecked,
    /// Extending a hold answers as if the expiry moved, and leaves it where it was.
    ExtendForgotten,
    /// A post of a hold captured in part moves the whole intent, as if captured whole.
    CapturePostsWhole,
    /// Sweepers do not skip an escalated transfer: they retry it every pass, forever.
    EscalationIgnored,
}

impl Mutant {
    /// Every mutant, in a stable order.
    pub const ALL: [Mutant; 23] = [
        Mutant::CreditAtPrepare,
        Mutant::DebitWithoutBalanceCheck,
        Mutant::DoublePost,
        Mutant::NoLatePrepareDefence,
        Mutant::CancelAfterApplied,
        Mutant::ClaimWithoutCas,
        Mutant::ReleaseIgnoresAmount,
        Mutant::ReleasePosts,
        Mutant::FinishAfterFirstPost,
        Mutant::SweeperIgnoresPending,
        Mutant::InsertOverwritesBody,
        Mutant::DuplicateAnswersStaleState,
        Mutant::TombstonesNeverPruned,
        Mutant::PruneIgnoresHorizon,
        Mutant::AckBeforeSync,
        Mutant::ReportUndurableDecision,
        Mutant::OnePhaseIgnoresRecord,
        Mutant::OnePhaseSkipsDoneEvent,
        Mutant::TimelineSkipsTakeover,
        Mutant::RefundSumUnchecked,
        Mutant::ExtendForgotten,
        Mutant::CapturePostsWhole,
        Mutant::EscalationIgnored,
    ];

    /// Its command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::CreditAtPrepare => "credit-at-prepare",
            Mutant::DebitWithoutBalanceCheck => "debit-without-balance-check",
            Mutant::DoublePost => "double-post",
            Mutant::NoLatePrepareDefence => "no-late-prepare-defence",
            Mutant::CancelAfterApplied => "cancel-after-applied",
            Mutant::ClaimWithoutCas => "claim-without-cas",
            Mutant::ReleaseIgnoresAmount => "release-ignores-amount",
            Mutant::ReleasePosts => "release-posts",
            Mutant::FinishAfterFirstPost => "finish-after-first-post",
            Mutant::SweeperIgnoresPending => "sweeper-ignores-pending",
            Mutant::InsertOverwritesBody => "insert-overwrites-body",
            Mutant::DuplicateAnswersStaleState => "duplicate-answers-stale-state",
            Mutant::TombstonesNeverPruned => "tombstones-never-pruned",
            Mutant::PruneIgnoresHorizon => "prune-ignores-horizon",
            Mutant::AckBeforeSync => "ack-before-sync",
            Mutant::ReportUndurableDecision => "report-undurable-decision",
            Mutant::OnePhaseIgnoresRecord => "one-phase-ignores-record",
            Mutant::OnePhaseSkipsDoneEvent => "one-phase-skips-done-event",
            Mutant::TimelineSkipsTakeover => "timeline-skips-takeover",
            Mutant::RefundSumUnchecked => "refund-sum-unchecked",
            Mutant::ExtendForgotten => "extend-forgotten",
            Mutant::CapturePostsWhole => "capture-posts-whole",
            Mutant::EscalationIgnored => "escalation-ignored",
        }
    }

    /// What it breaks, in one line.
    pub fn description(self) -> &'static str {
        match self {
            Mutant::CreditAtPrepare => "credit posted at prepare, before the decision",
            Mutant::DebitWithoutBalanceCheck => "debit prepared without the balance check",
            Mutant::DoublePost => "post without the intent check (double post)",
            Mutant::NoLatePrepareDefence => {
                "no defence against late prepares (no deadline, no tombstones)"
            }
            Mutant::CancelAfterApplied => "cancel allowed after applied",
            Mutant::ClaimWithoutCas => "claim without compare-and-set",
            Mutant::ReleaseIgnoresAmount => "release that ignores the intent's amount",
            Mutant::ReleasePosts => "release that posts the intent instead of giving it back",
            Mutant::FinishAfterFirstPost => "finish once the first post is acknowledged",
            Mutant::SweeperIgnoresPending => "recovery that leaves pending transfers alone",
            Mutant::InsertOverwritesBody => "insert of an existing id overwrites its body",
            Mutant::TombstonesNeverPruned => "tombstones are never dropped",
            Mutant::PruneIgnoresHorizon => "tombstones dropped before their horizon",
            Mutant::AckBeforeSync => "outcomes told before the log is durable",
            Mutant::ReportUndurableDecision => "a decision reported before it is durable",
            Mutant::OnePhaseIgnoresRecord => "a repeated one-phase commit moves the amounts again",
            Mutant::OnePhaseSkipsDoneEvent => "a one-phase commit makes no `done` event",
            Mutant::TimelineSkipsTakeover => "a take-over adds no timeline step",
            Mutant::RefundSumUnchecked => "a refund link ignores the refunds linked before",
            Mutant::ExtendForgotten => "extending a hold answers but keeps the old expiry",
            Mutant::CapturePostsWhole => "a hold captured in part posts its whole amounts",
            Mutant::EscalationIgnored => "sweepers recover escalated transfers again every pass",
            Mutant::DuplicateAnswersStaleState => {
                "a duplicate submission is told the stored state as final"
            }
        }
    }

    /// Looks a mutant up by [`Mutant::name`].
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(feature = "mutants")]
mod active_mutant {
    use super::Mutant;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static ACTIVE: AtomicUsize = AtomicUsize::new(0);

    /// Turns `m` on for the whole process (the simulator runs one mutant per process).
    pub fn set(m: Option<Mutant>) {
        let v = m.map_or(0, |m| {
            Mutant::ALL.iter().position(|x| *x == m).expect("listed") + 1
        });
        ACTIVE.store(v, Ordering::Relaxed);
    }

    /// The mutant in force, if any.
    pub fn active() -> Option<Mutant> {
        match ACTIVE.load(Ordering::Relaxed) {
            0 => None,
            v => Some(Mutant::ALL[v - 1]),
        }
    }
}

#[cfg(feature = "mutants")]
pub use active_mutant::{active, set};

/// The mutant in force: always `None` without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub fn active() -> Option<Mutant> {
    None
}

/// True when `m` is the mutant in force.
#[inline(always)]
pub fn is(m: Mutant) -> bool {
    active() == Some(m)
}
