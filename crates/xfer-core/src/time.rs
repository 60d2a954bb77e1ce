//! Time as data. The protocol compares timestamps but never reads a clock: every caller
//! passes `now` from its own clock, and each store stamps its own operations. Clocks may
//! disagree by at most the configured skew bound (see `docs/protocol.md`).

use std::fmt;

/// Milliseconds since an epoch chosen by the clock that produced it.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The earliest instant; a lease that ends here has always expired.
    pub const ZERO: Timestamp = Timestamp(0);
    /// Never: used for "no expiry" in indexes.
    pub const NEVER: Timestamp = Timestamp(u64::MAX);

    /// `self + ms`, saturating at [`Timestamp::NEVER`].
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// `self - ms`, saturating at zero.
    pub fn minus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// Milliseconds since the clock's epoch.
    pub fn as_ms(self) -> u64 {
        self.0
    }

    /// Milliseconds as a signed 64-bit integer, as databases store them: past `i64::MAX`
    /// (only [`Timestamp::NEVER`] and its neighbours, which no clock reaches) saturates.
    pub fn as_i64_ms(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A source of time. The protocol takes `now` as an argument; drivers read it from a
/// `Clock` so tests and the simulator can move time by hand.
pub trait Clock: Send + Sync {
    /// The current instant on this clock.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock, in milliseconds since the Unix epoch. The one place
/// xfer reads real time.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // Reason: this is the clock module.
    fn now(&self) -> Timestamp {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(since.as_millis() as u64)
    }
}

/// A clock that moves only when told to: for tests.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicU64);

impl ManualClock {
    /// A clock showing `t`.
    pub fn at(t: Timestamp) -> ManualClock {
        ManualClock(std::sync::atomic::AtomicU64::new(t.0))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }
}
