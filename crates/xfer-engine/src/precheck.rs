//! The check before a submit writes anything: in one read round trip per shard, whether
//! each transfer already exists and whether every account it names exists, is open and
//! holds its asset. A new transfer that fails it is refused before its record is written,
//! so bad input changes nothing; an existing id is answered from its record (idempotency
//! wins over the check). Pure: the executor sends [`Reads::ops`] and hands the replies to
//! [`Reads::refusals`].

use std::collections::BTreeMap;
use xfer_core::{AccountId, AccountStatus, AssetCode, Code, Rejection, TransferSpec};
use xfer_store::{AccountOp, Op, Reply, TransferOp};

/// The reads that check `specs`: each transfer, then each account once.
pub(crate) struct Reads<'a> {
    specs: &'a [TransferSpec],
    /// Where each account's read is among the ops.
    accounts: BTreeMap<&'a AccountId, usize>,
}

impl<'a> Reads<'a> {
    /// The reads for `specs`, and the ops that make them.
    pub(crate) fn of(specs: &'a [TransferSpec]) -> (Reads<'a>, Vec<Op>) {
        let mut accounts: BTreeMap<&AccountId, usize> = BTreeMap::new();
        let mut ops: Vec<Op> = specs
            .iter()
            .map(|s| Op::Transfer(s.id.clone(), TransferOp::Get))
            .collect();
        for p in specs.iter().flat_map(|s| &s.postings) {
            for a in [&p.from, &p.to] {
                accounts.entry(a).or_insert_with(|| {
                    ops.push(Op::Account(a.clone(), AccountOp::Get));
                    ops.len() - 1
                });
            }
        }
        (Reads { specs, accounts }, ops)
    }

    /// For each spec, `Some(rejection)` if it must not be written: it does not exist yet
    /// and one of its accounts is missing, closed or holds another asset.
    pub(crate) fn refusals(&self, replies: &[Reply]) -> Vec<Option<Rejection>> {
        self.specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if !matches!(replies[i], Reply::NotFound) {
                    return None; // exists: the submit answers it (same body or conflict)
                }
                s.postings.iter().enumerate().find_map(|(k, p)| {
                    [(&p.from, "from"), (&p.to, "to")]
                        .into_iter()
                        .find_map(|(a, side)| {
                            let field = format!("postings[{k}].{side}");
                            account_problem(&replies[self.accounts[a]], a, &p.asset, field)
                        })
                })
            })
            .collect()
    }
}

/// Why account `id`, read as `reply`, cannot take part in a posting of `asset`.
fn account_problem(
    reply: &Reply,
    id: &AccountId,
    asset: &AssetCode,
    field: String,
) -> Option<Rejection> {
    let missing = || {
        Some(Rejection::new(
            Code::AccountNotFound,
            field.clone(),
            format!("no account {id}"),
        ))
    };
    match reply {
        Reply::Account(a) => match a.status {
            AccountStatus::Unopened => missing(),
            AccountStatus::Closed => Some(Rejection::new(
                Code::AccountClosed,
                field,
                format!("{id} is closed"),
            )),
            AccountStatus::Open if &a.asset != asset => Some(Rejection::new(
                Code::AssetMismatch,
                field,
                format!("{id} holds {}, not {asset}", a.asset),
            )),
            AccountStatus::Open => None,
        },
        _ => missing(),
    }
}
