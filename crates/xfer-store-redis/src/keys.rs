//! Key names of one shard: every key carries the shard's hash tag `{prefix}`, so all of a
//! shard's keys are in one Cluster slot (see `functions.lua` for what each key holds).

use xfer_core::{AccountId, TransferId};

/// The key names of one shard.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    tag: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            tag: format!("{{{prefix}}}"),
        }
    }

    pub(crate) fn account(&self, id: &AccountId) -> String {
        format!("{}:a:{id}", self.tag)
    }

    pub(crate) fn history(&self, id: &AccountId) -> String {
        format!("{}:h:{id}", self.tag)
    }

    pub(crate) fn transfer(&self, id: &TransferId) -> String {
        format!("{}:t:{id}", self.tag)
    }

    pub(crate) fn accounts(&self) -> String {
        format!("{}:accounts", self.tag)
    }

    pub(crate) fn transfers(&self) -> String {
        format!("{}:transfers", self.tag)
    }

    pub(crate) fn due(&self) -> String {
        format!("{}:due", self.tag)
    }

    pub(crate) fn tombs(&self) -> String {
        format!("{}:tombs", self.tag)
    }

    /// The history counter of the layout before lists (xfer_6 and older); only `destroy`
    /// touches it now.
    pub(crate) fn seq(&self) -> String {
        format!("{}:seq", self.tag)
    }

    /// The layout version a store has brought the shard's older data to.
    pub(crate) fn layout(&self) -> String {
        format!("{}:layout", self.tag)
    }

    pub(crate) fn events(&self) -> String {
        format!("{}:events", self.tag)
    }

    pub(crate) fn events_dropped(&self) -> String {
        format!("{}:events_dropped", self.tag)
    }

    /// The asset catalog: a hash of code → scale.
    pub(crate) fn assets(&self) -> String {
        format!("{}:assets", self.tag)
    }

    /// Account metadata: a hash of account id → its map as a JSON object.
    pub(crate) fn metadata(&self) -> String {
        format!("{}:metadata", self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_carries_the_shard_tag() {
        let k = Keys::new("xfer_shard_3");
        let a = AccountId::new("cash:alice").unwrap();
        let t = TransferId::new("t-1").unwrap();
        for key in [
            k.account(&a),
            k.history(&a),
            k.transfer(&t),
            k.accounts(),
            k.transfers(),
            k.due(),
            k.tombs(),
            k.seq(),
            k.layout(),
            k.events(),
            k.events_dropped(),
            k.assets(),
            k.metadata(),
        ] {
            assert!(key.starts_with("{xfer_shard_3}:"), "{key}");
        }
    }
}
