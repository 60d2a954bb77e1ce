//! Whether what the server acknowledges survives a crash: InnoDB's log flushed at every
//! commit (`innodb_flush_log_at_trx_commit = 1`), and where the binary log is on, synced at
//! every commit too (`sync_binlog = 1`), or a crash can lose or split committed
//! transactions.

/// A server's settings, as read at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// Where it lives (host and database).
    pub server: String,
    /// `@@version`.
    pub version: String,
    /// `@@innodb_flush_log_at_trx_commit`.
    pub flush_log_at_commit: String,
    /// `@@log_bin`: `1` or `ON` when the binary log is on.
    pub log_bin: String,
    /// `@@sync_binlog`.
    pub sync_binlog: String,
}

impl Durability {
    /// True when every commit the server acknowledges is on disk.
    pub fn is_durable(&self) -> bool {
        let binlog_on = matches!(self.log_bin.as_str(), "1" | "ON");
        self.flush_log_at_commit == "1" && (!binlog_on || self.sync_binlog == "1")
    }

    /// What an operator must be told when the settings are weaker.
    pub fn warning(&self) -> Option<String> {
        (!self.is_durable()).then(|| {
            format!(
                "MySQL at {} has innodb_flush_log_at_trx_commit={} log_bin={} sync_binlog={}: \
                 transfers it acknowledges can be LOST if it stops (a crash, a kill, a power \
                 cut). Set innodb_flush_log_at_trx_commit = 1, and sync_binlog = 1 where the \
                 binary log is on",
                self.server, self.flush_log_at_commit, self.log_bin, self.sync_binlog
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(flush: &str, log_bin: &str, sync: &str) -> Durability {
        Durability {
            server: "mysql 127.0.0.1/x".into(),
            version: "10.11".into(),
            flush_log_at_commit: flush.into(),
            log_bin: log_bin.into(),
            sync_binlog: sync.into(),
        }
    }

    #[test]
    fn only_a_log_flushed_at_every_commit_is_durable() {
        assert!(settings("1", "0", "0").is_durable());
        assert!(settings("1", "1", "1").is_durable());
        assert!(settings("1", "OFF", "0").warning().is_none());
        let lossy = [
            ("2", "0", "0"),
            ("0", "0", "0"),
            ("1", "1", "0"),
            ("1", "ON", "100"),
        ];
        for (flush, bin, sync) in lossy {
            let w = settings(flush, bin, sync).warning().expect("a warning");
            assert!(
                w.contains("LOST") && w.contains(&format!("sync_binlog={sync}")),
                "{w}"
            );
        }
    }
}
