//! Retrying: how long to wait after a failed store call, how often to try, and how waiting
//! happens.
//!
//! [`RetryPolicy`] is plain data with a pure [`RetryPolicy::backoff_ms`]: exponential from
//! `backoff_ms_min`, doubling per failed attempt, capped at `backoff_ms_max`, and at most
//! `attempts_max` attempts in a row. No randomness: an optional jitter draws from an
//! [`Rng`] the caller seeds, so a simulator seed still replays exactly.
//!
//! Waiting goes through the [`Sleeper`] trait so tests and the simulator control time:
//! [`TokioSleeper`] really waits (the one place the engine calls `tokio::time::sleep`),
//! [`ManualSleeper`] moves a [`ManualClock`] forward and returns at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use xfer_core::{ManualClock, Rng};
use xfer_store::BoxFuture;

/// Default for [`RetryPolicy::attempts_max`].
pub const ATTEMPTS_MAX_DEFAULT: u32 = 8;
/// Default for [`RetryPolicy::backoff_ms_min`].
pub const BACKOFF_MS_MIN_DEFAULT: u64 = 10;
/// Default for [`RetryPolicy::backoff_ms_max`].
pub const BACKOFF_MS_MAX_DEFAULT: u64 = 1_000;

/// Exponential backoff with a cap and a bound on attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The most failed attempts in a row before giving up (at least 1).
    pub attempts_max: u32,
    /// The wait after the first failure.
    pub backoff_ms_min: u64,
    /// The longest wait between two attempts.
    pub backoff_ms_max: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: ATTEMPTS_MAX_DEFAULT,
            backoff_ms_min: BACKOFF_MS_MIN_DEFAULT,
            backoff_ms_max: BACKOFF_MS_MAX_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// The wait after the `failures`-th failure in a row (1-based):
    /// `min(backoff_ms_min * 2^(failures-1), backoff_ms_max)`, never overflowing.
    pub fn backoff_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1);
        let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
        self.backoff_ms_min
            .saturating_mul(factor)
            .min(self.backoff_ms_max)
    }

    /// True while another attempt is allowed after `failures` failures in a row.
    pub fn allows(&self, failures: u32) -> bool {
        failures < self.attempts_max
    }
}

/// A way to wait. Implementations must not read the wall clock except through time they
/// own (see `clippy.toml`).
pub trait Sleeper: Send + Sync {
    /// Completes after `ms` milliseconds of this sleeper's time.
    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()>;
}

/// Real waiting on the tokio timer (needs a runtime with time enabled).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    #[allow(clippy::disallowed_methods)] // Reason: the one real sleep of the engine.
    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// Waiting as moving a [`ManualClock`] forward: returns at once, time has passed.
#[derive(Clone, Debug)]
pub struct ManualSleeper(pub Arc<ManualClock>);

impl Sleeper for ManualSleeper {
    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()> {
        self.0.advance_ms(ms);
        Box::pin(std::future::ready(()))
    }
}

/// A [`RetryPolicy`] with the [`Sleeper`] that carries out its waits.
pub struct Retry {
    policy: RetryPolicy,
    sleeper: Arc<dyn Sleeper>,
    /// When present, each wait is drawn from `[backoff / 2, backoff]`.
    jitter: Option<Mutex<Rng>>,
}

impl Retry {
    /// Waits as `policy` says, through `sleeper`, without jitter.
    pub fn new(policy: RetryPolicy, sleeper: Arc<dyn Sleeper>) -> Retry {
        Retry {
            policy,
            sleeper,
            jitter: None,
        }
    }

    /// The same, drawing each wait from `[backoff / 2, backoff]` with `rng` (so executors
    /// that failed together do not retry together).
    pub fn with_jitter(mut self, rng: Rng) -> Retry {
        self.jitter = Some(Mutex::new(rng));
        self
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The sleeper (also used for the sweeper's interval).
    pub fn sleeper(&self) -> &Arc<dyn Sleeper> {
        &self.sleeper
    }

    /// The wait after the `failures`-th failure in a row, jitter applied.
    pub fn wait_ms(&self, failures: u32) -> u64 {
        let ms = self.policy.backoff_ms(failures);
        match &self.jitter {
            // A poisoned lock only means another thread panicked mid-draw: the state is a
            // plain u64, still usable.
            Some(rng) => {
                let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
                rng.range(ms / 2, ms)
            }
            None => ms,
        }
    }

    /// Waits after the `failures`-th failure in a row.
    pub async fn pause(&self, failures: u32) {
        let ms = self.wait_ms(failures);
        self.sleeper.sleep(ms).await;
    }
}

impl std::fmt::Debug for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retry")
            .field("policy", &self.policy)
            .field("jitter", &self.jitter.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{Clock, Timestamp};

    fn policy() -> RetryPolicy {
        RetryPolicy {
            attempts_max: 4,
            backoff_ms_min: 10,
            backoff_ms_max: 100,
        }
    }

    #[test]
    fn backoff_doubles_then_caps() {
        let got: Vec<u64> = (1..=6).map(|n| policy().backoff_ms(n)).collect();
        assert_eq!(got, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(policy().backoff_ms(u32::MAX), 100, "no overflow");
        assert_eq!(policy().backoff_ms(0), 10);
    }

    #[test]
    fn attempts_are_bounded() {
        assert!(policy().allows(3));
        assert!(!policy().allows(4));
    }

    #[test]
    fn jitter_is_deterministic_and_in_range() {
        let sleeper: Arc<dyn Sleeper> = Arc::new(TokioSleeper);
        let a = Retry::new(policy(), sleeper.clone()).with_jitter(Rng::new(7));
        let b = Retry::new(policy(), sleeper).with_jitter(Rng::new(7));
        for n in 1..10 {
            let (x, y) = (a.wait_ms(n), b.wait_ms(n));
            assert_eq!(x, y, "same seed, same waits");
            let full = policy().backoff_ms(n);
            assert!(
                (full / 2..=full).contains(&x),
                "{x} outside [{}, {full}]",
                full / 2
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn manual_sleeper_moves_the_clock() {
        let clock = Arc::new(ManualClock::at(Timestamp(5)));
        let retry = Retry::new(policy(), Arc::new(ManualSleeper(clock.clone())));
        retry.pause(2).await;
        assert_eq!(clock.now(), Timestamp(25));
    }
}
