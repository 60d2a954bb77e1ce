//! Which shard holds a record. Transfers go by a hash of their id; accounts by the first
//! rule that matches (an id prefix such as `points:`, or an asset such as `POINTS`), else by
//! a hash of their id over all shards. Rules name a set of shards and hash within it, so
//! `points:*` can live on Redis shards and `cash:*` on PostgreSQL shards.
//!
//! The hash is FNV-1a 64: stable across processes, versions and platforms, which a
//! placement function must be (a record must be found where it was put).

use xfer_core::{AccountId, AssetCode, TransferId, TransferSpec};
use xfer_store::Op;

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// Account ids that start with this prefix.
    Prefix(String),
    /// Accounts of this asset (the op must name the asset; see [`Router::shard_of_op`]).
    Asset(AssetCode),
}

/// A placement rule: matching accounts live on one of `shards`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// What it matches.
    pub matches: Match,
    /// The shards (indexes) its accounts are spread over by hash.
    pub shards: Vec<usize>,
}

/// Why a record could not be placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// An asset rule exists and the operation names no asset.
    AssetNeeded(AccountId),
}

/// Places records on `shards` shards.
#[derive(Clone, Debug)]
pub struct Router {
    shards: usize,
    rules: Vec<Rule>,
}

impl Router {
    /// Hash placement over `shards` shards (at least one).
    pub fn hash(shards: usize) -> Router {
        assert!(shards > 0, "a router needs at least one shard");
        Router {
            shards,
            rules: Vec::new(),
        }
    }

    /// Adds a rule, checked in the order added. Panics on a shard index out of range (a
    /// configuration error caught at start-up).
    pub fn with_rule(mut self, rule: Rule) -> Router {
        assert!(!rule.shards.is_empty(), "a rule needs at least one shard");
        assert!(
            rule.shards.iter().all(|s| *s < self.shards),
            "rule shard out of range: {rule:?}"
        );
        self.rules.push(rule);
        self
    }

    /// How many shards there are.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The shard of a transfer record.
    pub fn shard_of_transfer(&self, id: &TransferId) -> usize {
        (fnv1a(id.as_bytes()) % self.shards as u64) as usize
    }

    /// The shard of an account record; `asset` is needed only when asset rules exist.
    pub fn shard_of_account(
        &self,
        id: &AccountId,
        asset: Option<&AssetCode>,
    ) -> Result<usize, RouteError> {
        let h = fnv1a(id.as_bytes());
        for rule in &self.rules {
            let hit = match &rule.matches {
                Match::Prefix(p) => id.as_str().starts_with(p.as_str()),
                Match::Asset(a) => match asset {
                    Some(x) => x == a,
                    None => return Err(RouteError::AssetNeeded(id.clone())),
                },
            };
            if hit {
                return Ok(rule.shards[(h % rule.shards.len() as u64) as usize]);
            }
        }
        Ok((h % self.shards as u64) as usize)
    }

    /// Whether every account `spec` names lives on its record's shard: one atomic step
    /// there can then do the whole transfer ([`TransferOp::OnePhase`](xfer_store::TransferOp)).
    pub fn is_local(&self, spec: &TransferSpec) -> bool {
        let home = self.shard_of_transfer(&spec.id);
        spec.postings.iter().all(|p| {
            [&p.from, &p.to]
                .into_iter()
                .all(|a| self.shard_of_account(a, Some(&p.asset)) == Ok(home))
        })
    }

    /// The shard an op must be sent to.
    pub fn shard_of_op(&self, op: &Op) -> Result<usize, RouteError> {
        match op {
            Op::Transfer(id, _) => Ok(self.shard_of_transfer(id)),
            Op::Account(id, _) => self.shard_of_account(id, op.asset()),
        }
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn rules_place_by_prefix_then_asset_then_hash() {
        let points = AssetCode::new("POINTS", "asset").unwrap();
        let r = Router::hash(4)
            .with_rule(Rule {
                matches: Match::Prefix("cash:".into()),
                shards: vec![0, 1],
            })
            .with_rule(Rule {
                matches: Match::Asset(points.clone()),
                shards: vec![3],
            });
        for i in 0..50 {
            let cash = AccountId::new(&format!("cash:{i}")).unwrap();
            assert!(r.shard_of_account(&cash, None).unwrap() <= 1);
            let p = AccountId::new(&format!("p{i}")).unwrap();
            assert_eq!(r.shard_of_account(&p, Some(&points)).unwrap(), 3);
        }
        let x = AccountId::new("x").unwrap();
        assert_eq!(
            r.shard_of_account(&x, None),
            Err(RouteError::AssetNeeded(x.clone()))
        );
        let spread: std::collections::BTreeSet<_> = (0..100)
            .map(|i| r.shard_of_transfer(&TransferId::new(&format!("t{i}")).unwrap()))
            .collect();
        assert_eq!(spread.len(), 4, "transfers spread over every shard");
    }
}
