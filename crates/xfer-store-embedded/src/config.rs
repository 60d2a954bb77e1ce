//! [`EmbeddedConfig`]: an embedded store's settings.

use crate::log::LogConfig;

/// Settings of an embedded store.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedConfig {
    /// How many shards (fixed when the directory is created).
    pub shards: u16,
    /// Log segment size.
    pub log: LogConfig,
    /// Checkpoint after this many bytes of log: bounds replay at start-up.
    pub checkpoint_bytes: u64,
    /// Run the checkpointer thread (tests turn it off and call
    /// [`Embedded::checkpoint`](crate::Embedded::checkpoint)).
    pub background_checkpoints: bool,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            shards: 4,
            // Small segments: a checkpoint frees whole segments, so the log stays near
            // `checkpoint_bytes` and recovery reads little more than it replays.
            log: LogConfig {
                segment_bytes: 8 << 20,
            },
            // Every 32 MiB of log rather than 8: a checkpoint writes each account changed
            // since the last one once, and each account's history entries as one run, so
            // fewer checkpoints write fewer keys per transfer, and fjall flushes and
            // compacts fewer; replay at open reads up to 32 MiB more (`docs/benchmarks.md`).
            checkpoint_bytes: 32 << 20,
            background_checkpoints: true,
        }
    }
}
