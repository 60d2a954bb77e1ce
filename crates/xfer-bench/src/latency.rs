//! Latencies: per request, and submit to decided through the engine's decisions.

use xfer_core::TransferId;
use xfer_engine::Decisions;
use xfer_server::metrics::Stopwatch;

/// A distribution of latencies: recorded in microseconds (three significant digits, so
/// a percentile is off by at most 0.1 %), read in milliseconds. A run records one time per
/// transfer, and a histogram keeps its memory and cost the same however long the run
/// (`docs/benchmarks.md#bench-report`).
#[derive(Clone)]
pub(crate) struct Latencies(pub(crate) hdrhistogram::Histogram<u64>);

impl Latencies {
    pub(crate) fn new() -> Latencies {
        Latencies(hdrhistogram::Histogram::new(3).expect("3 significant digits are allowed"))
    }

    pub(crate) fn record(&mut self, seconds: f64) {
        // Grows to take the value (`saturating_record` would clamp it to the range so far).
        self.0
            .record((seconds * 1e6) as u64)
            .expect("auto-resizing histograms take any value");
    }

    pub(crate) fn add(&mut self, other: &Latencies) {
        self.0
            .add(&other.0)
            .expect("auto-resizing histograms take any value");
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// p50, p99 and p99.9, ms (0 when nothing was recorded).
    pub(crate) fn percentiles_ms(&self) -> [f64; 3] {
        [0.5, 0.99, 0.999].map(|q| {
            if self.is_empty() {
                0.0
            } else {
                self.0.value_at_quantile(q) as f64 / 1e3
            }
        })
    }
}

/// Submit-to-decided times of one client's requests.
pub(crate) struct DecidedClock {
    pub(crate) since: std::sync::Mutex<Stopwatch>,
    pub(crate) times: std::sync::Mutex<Latencies>,
}

impl DecidedClock {
    pub(crate) fn new() -> DecidedClock {
        DecidedClock {
            since: std::sync::Mutex::new(Stopwatch::start()),
            times: std::sync::Mutex::new(Latencies::new()),
        }
    }

    /// A request is submitted now.
    pub(crate) fn restart(&self) {
        *self.since.lock().expect("not poisoned") = Stopwatch::start();
    }

    /// The times recorded so far, taken.
    pub(crate) fn take(&self) -> Latencies {
        std::mem::replace(
            &mut *self.times.lock().expect("not poisoned"),
            Latencies::new(),
        )
    }
}

impl Decisions for DecidedClock {
    fn decided(&self, _: &TransferId) {
        let seconds = self.since.lock().expect("not poisoned").seconds();
        self.times.lock().expect("not poisoned").record(seconds);
    }
}
