//! Refunds: a new transfer that moves back all or part of a done one, linked to it. How
//! much each refund takes back, and that the refunds of one transfer never take back more
//! than it moved, is the protocol's (`TransferOp::LinkRefund`); here a request is read and,
//! when those rules would refuse it, refused before anything is written.

use crate::answer::Answer;
use crate::service::Service;
use crate::wire::TIMEOUT_MS_DEFAULT;
use xfer_core::{
    Amount, Code, Posting, Rejection, TransferId, TransferKind, TransferRecord, TransferSpec,
    TransferState,
};
use xfer_engine::ExecError;
use xfer_store::record::link_refund;

/// How much a refund moves back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefundAmounts {
    /// Every posting whole.
    Whole,
    /// Of a transfer of one posting, this much (`amount`).
    One(Amount),
    /// Of each posting, in order (`amounts`).
    Each(Vec<Amount>),
    /// What the refunds not canceled left of every posting (the console's blank form);
    /// everything when none is linked.
    Left,
}

impl RefundAmounts {
    /// The field a refusal of these amounts names.
    fn field(&self) -> &'static str {
        match self {
            RefundAmounts::Whole | RefundAmounts::Left => "original",
            RefundAmounts::One(_) => "amount",
            RefundAmounts::Each(_) => "amounts",
        }
    }

    /// `original`'s postings reversed with these amounts, or what is wrong with them.
    pub fn postings(&self, original: &TransferRecord) -> Result<Vec<Posting>, Rejection> {
        let mut postings = original.reversed_postings();
        let n = postings.len();
        let amounts: Vec<Amount> = match self {
            RefundAmounts::Whole | RefundAmounts::Left => return Ok(postings),
            RefundAmounts::One(a) if n == 1 => vec![*a],
            RefundAmounts::One(_) => {
                return Err(Rejection::new(
                    Code::RefundMustReverseOriginal,
                    "amount",
                    format!(
                        "{} has {n} postings: give `amounts`, one for each, in order",
                        original.spec.id
                    ),
                ))
            }
            RefundAmounts::Each(each) if each.len() == n => each.clone(),
            RefundAmounts::Each(each) => {
                return Err(Rejection::new(
                    Code::RefundMustReverseOriginal,
                    "amounts",
                    format!(
                        "{} amounts for {n} postings: give one for each, in order",
                        each.len()
                    ),
                ))
            }
        };
        for (i, (p, a)) in postings.iter_mut().zip(amounts).enumerate() {
            if a > p.amount {
                let field = match self {
                    RefundAmounts::One(_) => "amount".to_string(),
                    _ => format!("amounts[{i}]"),
                };
                return Err(Rejection::new(
                    Code::RefundExceedsOriginal,
                    &field,
                    format!(
                        "{} is more than the {} it moved",
                        a.units(),
                        p.amount.units()
                    ),
                ));
            }
            p.amount = a;
        }
        Ok(postings)
    }
}

impl Service {
    /// Refunds the done transfer `original`, as the caller read it, with a new transfer
    /// `refund_id` of its reversed postings with `amounts`, linked both ways, waiting for its
    /// outcome. Refused before anything is written when the original is not done, or when
    /// the refunds linked to it, less those that were canceled, leave too little (or no
    /// room for another).
    pub async fn refund(
        &self,
        original: &TransferRecord,
        refund_id: TransferId,
        amounts: RefundAmounts,
        metadata: String,
    ) -> Result<Answer, ExecError> {
        let amounts = match amounts {
            RefundAmounts::Left => self.left_of(original).await?,
            other => other,
        };
        let postings = amounts.postings(original)?;
        let refused = |code: Code, live: Option<&[u64]>| {
            let field = match code {
                Code::RefundExceedsOriginal => amounts.field(),
                _ => "original",
            };
            refusal(code, field, original, live)
        };
        if let Err(code) = link_refund(original, &refund_id, &[], &postings) {
            if code == Code::OriginalIsNotDone {
                return Err(refused(code, None).into());
            }
            // A resubmission is answered from its record. Otherwise the links of canceled
            // refunds may be replaced, as the protocol does when it links.
            if !self.exists(&refund_id).await? {
                let canceled = self.canceled_refunds(original).await?;
                if let Err(code) = link_refund(original, &refund_id, &canceled, &postings) {
                    let live = original.refunded_units_except(&canceled);
                    return Err(refused(code, Some(&live)).into());
                }
            }
        }
        let spec = TransferSpec {
            id: refund_id,
            postings: postings.into(),
            metadata,
            kind: TransferKind::Transfer,
            refund_of: Some(original.spec.id.clone()),
            timeout_ms: TIMEOUT_MS_DEFAULT,
        };
        spec.validate()?;
        self.submit(vec![spec], true)
            .await
            .pop()
            .expect("one answer")
    }

    async fn exists(&self, id: &TransferId) -> Result<bool, ExecError> {
        match self.get_transfer(id).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(Code::TransferNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The refunds linked to `original` that were canceled. One not found counts as live,
    /// as the engine counts it: only a refund read `canceled` may lose its link.
    async fn canceled_refunds(
        &self,
        original: &TransferRecord,
    ) -> Result<Vec<TransferId>, ExecError> {
        let mut canceled = Vec::new();
        for link in original.refund_links().iter() {
            let state = match self.get_transfer(&link.refund).await {
                Ok(r) => Some(r.state),
                Err(e) if e.code() == Some(Code::TransferNotFound) => None,
                Err(e) => return Err(e),
            };
            if state == Some(TransferState::Canceled) {
                canceled.push(link.refund.clone());
            }
        }
        Ok(canceled)
    }

    /// [`RefundAmounts::Left`] of `original`: what its refunds not canceled left of each
    /// posting; everything when none is linked, or when nothing is left of one (refused
    /// then, the totals in the message).
    async fn left_of(&self, original: &TransferRecord) -> Result<RefundAmounts, ExecError> {
        if original.refund_links().is_empty() {
            return Ok(RefundAmounts::Whole);
        }
        let taken = self.refunded_live(original).await?;
        let each: Option<Vec<Amount>> = original
            .moved_postings()
            .iter()
            .zip(&taken)
            .map(|(p, t)| Amount::new(p.amount.units().saturating_sub(*t), "amounts").ok())
            .collect();
        Ok(each.map_or(RefundAmounts::Whole, RefundAmounts::Each))
    }

    /// How much of each of `original`'s postings its refunds take back, less those that
    /// were canceled (a new refund may replace their links): what is left to refund is the
    /// rest.
    pub async fn refunded_live(&self, original: &TransferRecord) -> Result<Vec<u64>, ExecError> {
        let canceled = self.canceled_refunds(original).await?;
        Ok(original.refunded_units_except(&canceled))
    }
}

/// The rejection of a refund of `original` for `code`, naming `field`; `live`: what its
/// refunds not canceled take back.
fn refusal(code: Code, field: &str, original: &TransferRecord, live: Option<&[u64]>) -> Rejection {
    let id = &original.spec.id;
    let message = match code {
        Code::OriginalIsNotDone => {
            format!(
                "{id} is {}; only a done transfer can be refunded",
                original.state
            )
        }
        Code::OriginalAlreadyRefunded => {
            let by: Vec<String> = original
                .refund_links()
                .iter()
                .map(|l| l.refund.to_string())
                .collect();
            format!("{id} is refunded whole by {}", by.join(", "))
        }
        Code::TooManyRefunds => format!(
            "{id} has {} refunds linked, the most one transfer may have",
            xfer_core::REFUNDS_MAX
        ),
        _ => {
            let moved: Vec<u64> = original
                .moved_postings()
                .iter()
                .map(|p| p.amount.units())
                .collect();
            let taken = live.map_or_else(|| original.refunded_units(), <[u64]>::to_vec);
            format!(
                "{id} moved {moved:?} and its refunds not canceled take back {taken:?}: this one would take back more than it moved"
            )
        }
    };
    Rejection::new(code, field, message)
}
