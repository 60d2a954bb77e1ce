//! Whether what the server acknowledges survives: the store asks for `w: "majority"` with
//! journaling on every write, which holds through a crash on any server with a persistent
//! storage engine; an in-memory engine loses everything when it stops.

use mongodb::bson::{Bson, Document};

/// A server's settings, as read at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// Where it lives (hosts and database).
    pub server: String,
    /// `serverStatus.version`.
    pub version: String,
    /// `replica set NAME`, `sharded cluster` (a mongos) or `standalone`.
    pub topology: String,
    /// `serverStatus.storageEngine.name`.
    pub engine: String,
    /// `serverStatus.storageEngine.persistent` (`None`: not said; a mongos says nothing).
    pub persistent: Option<bool>,
}

impl Durability {
    /// The settings `hello` and `serverStatus` answered.
    pub fn from_replies(server: String, hello: &Document, status: &Document) -> Durability {
        let topology = if let Ok(set) = hello.get_str("setName") {
            format!("replica set {set}")
        } else if hello.get_str("msg") == Ok("isdbgrid") {
            "sharded cluster".into()
        } else {
            "standalone".into()
        };
        let engine = status.get_document("storageEngine").ok();
        Durability {
            server,
            version: status.get_str("version").unwrap_or("unknown").into(),
            topology,
            engine: engine
                .and_then(|e| e.get_str("name").ok())
                .unwrap_or("unknown")
                .into(),
            persistent: engine.and_then(|e| match e.get("persistent") {
                Some(Bson::Boolean(b)) => Some(*b),
                _ => None,
            }),
        }
    }

    /// True unless the storage engine says it keeps nothing on disk.
    pub fn is_durable(&self) -> bool {
        self.persistent != Some(false)
    }

    /// What an operator must be told when acknowledged writes can be lost.
    pub fn warning(&self) -> Option<String> {
        (!self.is_durable()).then(|| {
            format!(
                "MongoDB at {} ({}) runs the storage engine {:?}, which is not persistent: \
                 transfers it acknowledges are LOST when it stops. Run a persistent engine \
                 (WiredTiger)",
                self.server, self.topology, self.engine
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::doc;

    #[test]
    fn an_engine_that_keeps_nothing_on_disk_is_warned_about() {
        let hello = doc! {"setName": "rs0"};
        let wired =
            doc! {"version": "7.0.1", "storageEngine": {"name": "wiredTiger", "persistent": true}};
        let d = Durability::from_replies("m".into(), &hello, &wired);
        assert_eq!(
            (d.topology.as_str(), d.is_durable()),
            ("replica set rs0", true)
        );
        assert!(d.warning().is_none());
        let memory =
            doc! {"version": "7.0.1", "storageEngine": {"name": "inMemory", "persistent": false}};
        let d = Durability::from_replies("m".into(), &doc! {"msg": "isdbgrid"}, &memory);
        assert_eq!(d.topology, "sharded cluster");
        let w = d.warning().expect("a warning");
        assert!(w.contains("LOST") && w.contains("inMemory"), "{w}");
    }
}
