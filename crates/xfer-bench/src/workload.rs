//! The workloads: which accounts and assets each transfer names.

use crate::args::*;
use crate::ids::*;
use xfer_core::{
    AccountId, Amount, AssetCode, Posting, Postings, Rng, TransferId, TransferKind, TransferSpec,
};

/// An asset the workloads use; a posting names its asset by this, not by its code, so
/// that the clients find its names by place rather than by comparing text, a call to
/// libc's `memcmp` for three bytes (`docs/benchmarks.md#bench-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BenchAsset {
    Usd,
    Points,
    Sku,
    Quota,
}

impl BenchAsset {
    /// Every asset, in the order of their places.
    const ALL: [BenchAsset; 4] = [
        BenchAsset::Usd,
        BenchAsset::Points,
        BenchAsset::Sku,
        BenchAsset::Quota,
    ];

    /// Its asset code.
    pub(crate) fn code(self) -> &'static str {
        match self {
            BenchAsset::Usd => "USD",
            BenchAsset::Points => "POINTS",
            BenchAsset::Sku => "SKU-1",
            BenchAsset::Quota => "QUOTA-1",
        }
    }
}

use BenchAsset::{Points, Quota, Sku, Usd};
/// How long the holds workload's holds last before they expire.
pub(crate) const HOLD_TTL_MS: u64 = 60_000;

pub(crate) fn acct(asset: &str, i: u64) -> String {
    format!("{}-{i}", asset.to_ascii_lowercase())
}

pub(crate) fn posting(from: String, to: String, asset: &str, amount: u64) -> Posting {
    Posting {
        from: AccountId::new(&from).expect("valid id"),
        to: AccountId::new(&to).expect("valid id"),
        asset: AssetCode::new(asset, "asset").expect("valid asset"),
        amount: Amount::new(amount, "amount").expect("positive"),
    }
}

/// The names a workload's transfers use, made once: the clients pick accounts by number
/// and write each id digit by digit after its asset's prefix: cheaper than formatting and
/// validating two ids and an asset code per posting with `format!`, and than reading them
/// from a table of every account's id, whose two reads per posting miss the cache
/// (`docs/benchmarks.md#bench-clients`).
pub(crate) struct Names {
    /// (asset code, its accounts' ids up to the number: the code in lower case and "-")
    /// for each asset, at its place in [`BenchAsset::ALL`].
    pub(crate) assets: [(AssetCode, IdText); BenchAsset::ALL.len()],
}

impl Names {
    pub(crate) fn new() -> Names {
        let assets = BenchAsset::ALL.map(|asset| {
            let code = AssetCode::new(asset.code(), "asset").expect("valid asset");
            let mut prefix = IdText::default();
            for b in asset.code().to_ascii_lowercase().bytes() {
                prefix.push(b);
            }
            prefix.push(b'-');
            (code, prefix)
        });
        Names { assets }
    }

    /// A posting of `amount` of `asset` from account number `from` to number `to`.
    pub(crate) fn posting(&self, asset: BenchAsset, from: u64, to: u64, amount: u64) -> Posting {
        let (code, prefix) = &self.assets[asset as usize];
        let account = |n: u64| {
            let mut text = prefix.clone();
            text.decimal(n);
            AccountId::new(text.as_str()).expect("a bench id is valid")
        };
        Posting {
            from: account(from),
            to: account(to),
            asset: code.clone(),
            amount: Amount::new(amount, "amount").expect("positive"),
        }
    }
}

/// The assets a workload uses.
pub(crate) fn assets(w: Workload) -> &'static [BenchAsset] {
    match w {
        Workload::Uniform | Workload::Hot | Workload::Holds => &[Usd],
        Workload::MultiAsset => &[Usd, Points],
        Workload::FlashSale => &[Usd, Sku, Quota],
    }
}

/// One transfer of the workload.
pub(crate) fn next_spec(
    a: &BenchArgs,
    names: &Names,
    rng: &mut Rng,
    id: TransferId,
) -> TransferSpec {
    let n = a.accounts;
    let pair = |rng: &mut Rng| {
        let from = rng.below(n);
        (from, (from + 1 + rng.below(n - 1)) % n)
    };
    // Built in place: one posting needs no list of its own (`Postings`).
    let postings = match a.workload {
        Workload::Uniform | Workload::Holds => {
            let (f, t) = pair(rng);
            Postings::from_buf([names.posting(Usd, f, t, 1 + rng.below(100))])
        }
        Workload::Hot => {
            let (mut f, mut t) = pair(rng);
            if rng.below(100) < a.hot_percent {
                match a.hot_side {
                    HotSide::Debit => (f, t) = (0, 1 + rng.below(n - 1)),
                    HotSide::Credit => (f, t) = (1 + rng.below(n - 1), 0),
                }
            }
            Postings::from_buf([names.posting(Usd, f, t, 1 + rng.below(100))])
        }
        Workload::MultiAsset => {
            let (f, t) = pair(rng);
            Postings::from_iter([
                names.posting(Usd, f, t, 1 + rng.below(100)),
                names.posting(Points, f, t, 1 + rng.below(100)),
            ])
        }
        Workload::FlashSale => {
            // Shopper u buys one item from the shop's stock (account 0 of SKU), pays the
            // shop (USD account 0), and spends one unit of their quota.
            let u = 1 + rng.below(n - 1);
            Postings::from_iter([
                names.posting(Sku, 0, u, 1),
                names.posting(Usd, u, 0, 999),
                names.posting(Quota, u, 0, 1),
            ])
        }
    };
    TransferSpec {
        id,
        postings,
        metadata: String::new(),
        kind: match a.workload {
            Workload::Holds => TransferKind::Hold {
                ttl_ms: HOLD_TTL_MS,
            },
            _ => TransferKind::Transfer,
        },
        refund_of: None,
        timeout_ms: a.timeout_ms,
    }
}
