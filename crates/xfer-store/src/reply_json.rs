//! The JSON in which server-side steps (PostgreSQL's functions, MySQL's procedures)
//! answer: one object per reply, tagged by `r` (`{"r": "prepare", "o": "prepared"}`,
//! `{"r": "transfer", ...the record}`), and the records as rows of their tables.
//!
//! The domain types' own serde shapes are reused for what a database only stores (a
//! transfer's spec, a cancel reason). Timestamps are milliseconds.

use crate::op::{Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
use crate::record::one_phase_reply;
use serde::Deserialize;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, AccountStatus, AssetCode, CancelReason, Code, Intent, IntentState,
    LowerBound, OwnerId, RefundLink, Timeline, Timestamp, TransferId, TransferRecord, TransferSpec,
    TransferState,
};

/// A row of the transfers table, as JSON.
#[derive(Deserialize)]
struct TransferRow {
    spec: TransferSpec,
    state: TransferState,
    created_at: u64,
    updated_at: u64,
    deadline: u64,
    hold_expires_at: Option<u64>,
    owner: Option<OwnerId>,
    lease_until: u64,
    epoch: u64,
    reason: Option<CancelReason>,
    refunded_by: Option<TransferId>,
    /// Its refunds as `RefundLink`'s JSON, oldest first; none in a row written before
    /// partial refunds.
    #[serde(default)]
    refunds: Option<Vec<RefundLink>>,
    /// Its steps as `Step`'s JSON, oldest first; none in a row written before timelines.
    #[serde(default)]
    timeline: Option<Timeline>,
    /// Of a hold captured in part, each posting's captured amount; none otherwise.
    #[serde(default)]
    captured: Option<Vec<xfer_core::Amount>>,
    /// Its escalation, as `Escalation`'s JSON; none unless escalated.
    #[serde(default)]
    escalation: Option<xfer_core::Escalation>,
}

impl From<TransferRow> for TransferRecord {
    fn from(r: TransferRow) -> TransferRecord {
        let timeline = r.timeline;
        let record = TransferRecord {
            spec: r.spec.into(),
            state: r.state,
            created_at: Timestamp(r.created_at),
            updated_at: Timestamp(r.updated_at),
            deadline: Timestamp(r.deadline),
            hold_expires_at: r.hold_expires_at.map(Timestamp),
            owner: r.owner,
            lease_until: Timestamp(r.lease_until),
            epoch: r.epoch,
            reason: r.reason,
            refunded_by: r.refunded_by,
            refunds: r.refunds.unwrap_or_default(),
            captured: r.captured.unwrap_or_default(),
            escalation: r.escalation,
            timeline: Timeline::default(),
        };
        TransferRecord {
            timeline: timeline.unwrap_or_else(|| crate::timeline::derived(&record)),
            ..record
        }
    }
}

/// An account row with its intents, as JSON; intents as `[transfer, debit, credit, state,
/// horizon]`.
#[derive(Deserialize)]
struct AccountRow {
    id: AccountId,
    asset: AssetCode,
    balance: i64,
    reserved: i64,
    incoming: i64,
    lower_bound: Option<i64>,
    status: AccountStatus,
    intents: Vec<(TransferId, u64, u64, IntentState, u64)>,
}

impl From<AccountRow> for Account {
    fn from(r: AccountRow) -> Account {
        Account {
            id: r.id,
            asset: r.asset,
            balance: r.balance,
            reserved: r.reserved,
            incoming: r.incoming,
            lower_bound: r
                .lower_bound
                .map_or(LowerBound::Unbounded, LowerBound::Bounded),
            status: r.status,
            intents: r
                .intents
                .into_iter()
                .map(|(t, debit, credit, state, horizon)| {
                    let horizon = Timestamp(horizon);
                    let intent = Intent {
                        debit,
                        credit,
                        state,
                        horizon,
                    };
                    (t, intent)
                })
                .collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum PrepareWord {
    Prepared,
    AlreadyPrepared,
    AlreadyPosted,
    AlreadyReleased,
    TooLate,
    Refused,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum PostWord {
    Posted,
    AlreadyPosted,
    Missing,
    FoundReleased,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReleaseWord {
    Released,
    AlreadyReleased,
    Marked,
    FoundPosted,
}

/// One reply as a step returns it.
#[derive(Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum ReplyRow {
    Account(AccountRow),
    Prepare {
        o: PrepareWord,
        code: Option<Code>,
    },
    Post {
        o: PostWord,
    },
    Release {
        o: ReleaseWord,
    },
    Transfer(TransferRow),
    Unchanged(TransferRow),
    /// An insert found a record of that id: the client compares the bodies.
    Existing(TransferRow),
    /// A one-phase step committed (`record::one_phase_reply`).
    Committed,
    /// A one-phase step that could not commit kept the record as sent, as the insert does.
    Inserted,
    Refused {
        code: Code,
    },
    NotFound,
}

/// Where each op of a batch goes when the batch is sent in the order the SQL stores lock
/// rows in: accounts, then transfers, each by id, so that two batches never wait for each
/// other in a cycle; a record's own ops keep their order (the sort is stable).
pub fn lock_order(ops: &[Op]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| ops[a].record_key().cmp(&ops[b].record_key()));
    order
}

/// The replies to `ops`, in their order, from `answers`, which follow `order`
/// ([`lock_order`]).
pub fn decode_in_order<'a>(
    ops: &[Op],
    order: &[usize],
    answers: impl ExactSizeIterator<Item = &'a str>,
) -> Result<Vec<Reply>, String> {
    if answers.len() != ops.len() {
        return Err(format!("{} replies to {} ops", answers.len(), ops.len()));
    }
    let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
    for (&at, text) in order.iter().zip(answers) {
        replies[at] = Some(decode(&ops[at], text)?);
    }
    Ok(replies.into_iter().flatten().collect())
}

/// Parses the reply to `op`; `Err` says what was wrong with it.
pub fn decode(op: &Op, text: &str) -> Result<Reply, String> {
    let row: ReplyRow = serde_json::from_str(text).map_err(|e| format!("{e} in {text}"))?;
    Ok(match row {
        ReplyRow::Account(a) => Reply::Account(Arc::new(a.into())),
        ReplyRow::Prepare { o, code } => Reply::Prepare(match o {
            PrepareWord::Prepared => PrepareOutcome::Prepared,
            PrepareWord::AlreadyPrepared => PrepareOutcome::AlreadyPrepared,
            PrepareWord::AlreadyPosted => PrepareOutcome::AlreadyPosted,
            PrepareWord::AlreadyReleased => PrepareOutcome::AlreadyReleased,
            PrepareWord::TooLate => PrepareOutcome::TooLate,
            PrepareWord::Refused => PrepareOutcome::Refused(
                code.ok_or_else(|| format!("a refused prepare without a code: {text}"))?,
            ),
        }),
        ReplyRow::Post { o } => Reply::Post(match o {
            PostWord::Posted => PostOutcome::Posted,
            PostWord::AlreadyPosted => PostOutcome::AlreadyPosted,
            PostWord::Missing => PostOutcome::Missing,
            PostWord::FoundReleased => PostOutcome::FoundReleased,
        }),
        ReplyRow::Release { o } => Reply::Release(match o {
            ReleaseWord::Released => ReleaseOutcome::Released,
            ReleaseWord::AlreadyReleased => ReleaseOutcome::AlreadyReleased,
            ReleaseWord::Marked => ReleaseOutcome::Marked,
            ReleaseWord::FoundPosted => ReleaseOutcome::FoundPosted,
        }),
        ReplyRow::Transfer(t) => Reply::Transfer(Arc::new(t.into())),
        ReplyRow::Unchanged(t) => Reply::Unchanged(Arc::new(t.into())),
        ReplyRow::Existing(t) => match op {
            // Same id: the same body (everything but the timeout) is a repeat.
            Op::Transfer(_, TransferOp::Insert(new) | TransferOp::OnePhase(new)) => {
                let found = TransferRecord::from(t);
                if found.spec.same_body(&new.spec) {
                    Reply::Unchanged(Arc::new(found))
                } else {
                    Reply::Refused(Code::IdExistsWithDifferentBody)
                }
            }
            _ => return Err(format!("an existing record answered to {op}: {text}")),
        },
        ReplyRow::Committed | ReplyRow::Inserted => {
            one_phase_reply(op, matches!(row, ReplyRow::Committed))
                .ok_or_else(|| format!("a one-phase step's answer to {op}: {text}"))?
        }
        ReplyRow::Refused { code } => Reply::Refused(code),
        ReplyRow::NotFound => Reply::NotFound,
    })
}

/// Parses an account row with its intents.
pub fn decode_account(text: &str) -> Result<Account, String> {
    serde_json::from_str::<AccountRow>(text)
        .map(Account::from)
        .map_err(|e| format!("{e} in {text}"))
}

/// Parses a transfer row.
pub fn decode_transfer(text: &str) -> Result<TransferRecord, String> {
    serde_json::from_str::<TransferRow>(text)
        .map(TransferRecord::from)
        .map_err(|e| format!("{e} in {text}"))
}
