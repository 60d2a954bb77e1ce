//! The declared assets as this process knows them: a [`Catalog`] (code → scale) read from
//! the catalog shard, and the [`CatalogCache`] the service keeps of it. A declaration never
//! changes, so a cached one is never stale; a code the cache lacks may have been declared
//! by another process since, so it is read again before an input is refused for it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use xfer_core::{Amount, Asset, AssetCode, Code, Rejection};

/// Declared assets by code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    by_code: BTreeMap<AssetCode, Asset>,
}

impl Catalog {
    /// A catalog of `assets`.
    pub fn new(assets: impl IntoIterator<Item = Asset>) -> Catalog {
        Catalog {
            by_code: assets.into_iter().map(|a| (a.code.clone(), a)).collect(),
        }
    }

    /// The declaration of `code`, if any.
    pub fn get(&self, code: &AssetCode) -> Option<&Asset> {
        self.by_code.get(code)
    }

    /// Every declaration, in code order.
    pub fn iter(&self) -> impl Iterator<Item = &Asset> {
        self.by_code.values()
    }

    /// `units` of `code` as a decimal in its scale, if `code` is declared.
    pub fn decimal(&self, code: &AssetCode, units: i128) -> Option<String> {
        self.get(code).map(|a| a.format(units))
    }

    /// A declared asset, or `asset_not_declared` naming `field`.
    pub fn require(&self, code: &AssetCode, field: &str) -> Result<&Asset, Rejection> {
        self.get(code).ok_or_else(|| {
            Rejection::new(
                Code::AssetNotDeclared,
                field,
                format!("{code} is not a declared asset: declare it first (POST /v1/assets)"),
            )
        })
    }

    /// An amount of `code` given as decimal text (`"12.34"`), in minor units; refused when
    /// `code` is not declared (no scale to read it in) or the text has more decimals than
    /// the scale.
    pub fn parse_amount(
        &self,
        code: &AssetCode,
        text: &str,
        field: &str,
    ) -> Result<Amount, Rejection> {
        let asset = self.get(code).ok_or_else(|| {
            Rejection::new(
                Code::AssetNotDeclared,
                field,
                format!(
                    "{text:?} is a decimal, and {code} has no declared scale to read it in: \
                     declare it (POST /v1/assets) or give an integer of minor units"
                ),
            )
        })?;
        asset.parse_amount(text, field)
    }
}

/// The service's copy of the catalog: every declaration it has seen, each never changed.
#[derive(Debug, Default)]
pub struct CatalogCache {
    held: RwLock<Arc<Catalog>>,
}

impl CatalogCache {
    /// The catalog as last read.
    pub fn get(&self) -> Arc<Catalog> {
        self.held.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Keeps what `catalog`, read from the store just now, adds to what is held. Merged,
    /// not replaced: a declaration added while the read was under way stays, and none is
    /// ever dropped.
    pub fn set(&self, catalog: Catalog) {
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**held).clone();
        next.by_code.extend(catalog.by_code);
        *held = Arc::new(next);
    }

    /// Adds one declaration the store answered.
    pub fn add(&self, asset: Asset) {
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**held).clone();
        next.by_code.insert(asset.code.clone(), asset);
        *held = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> AssetCode {
        AssetCode::new(s, "asset").unwrap()
    }

    #[test]
    fn decimals_are_read_and_shown_in_the_declared_scale() {
        let c = Catalog::new([Asset::new("USD", 2).unwrap(), Asset::new("JPY", 0).unwrap()]);
        let usd = code("USD");
        assert_eq!(
            c.parse_amount(&usd, "12.34", "amount").unwrap().units(),
            1234
        );
        assert_eq!(c.parse_amount(&usd, "12", "amount").unwrap().units(), 1200);
        let e = c.parse_amount(&usd, "12.345", "amount").unwrap_err();
        assert_eq!(
            (e.code, e.field.as_str()),
            (Code::AmountHasTooManyDecimals, "amount")
        );
        let e = c.parse_amount(&code("JPY"), "1.5", "p").unwrap_err();
        assert_eq!(e.code, Code::AmountHasTooManyDecimals);
        let e = c
            .parse_amount(&code("EUR"), "1.50", "postings[0].amount")
            .unwrap_err();
        assert_eq!(
            (e.code, e.field.as_str()),
            (Code::AssetNotDeclared, "postings[0].amount")
        );
        assert_eq!(c.decimal(&usd, -5).as_deref(), Some("-0.05"));
        assert_eq!(c.decimal(&code("JPY"), 500).as_deref(), Some("500"));
        assert_eq!(c.decimal(&code("EUR"), 5), None);
    }

    #[test]
    fn the_cache_adds_and_merges_what_it_reads() {
        let cache = CatalogCache::default();
        let before = cache.get();
        cache.add(Asset::new("USD", 2).unwrap());
        assert!(
            before.get(&code("USD")).is_none(),
            "a snapshot never changes"
        );
        assert_eq!(cache.get().get(&code("USD")).map(|a| a.scale), Some(2));
        // A read that began before USD was added does not drop it.
        cache.set(Catalog::new([Asset::new("BTC", 8).unwrap()]));
        let codes: Vec<_> = cache.get().iter().map(|a| a.code.to_string()).collect();
        assert_eq!(codes, ["BTC", "USD"]);
    }
}
