//! What a run measured, and how it is printed.

use clap::ValueEnum;

/// What was measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BenchReport {
    /// The workload's name.
    pub workload: String,
    /// `library`, `http`, or `postgres-native` / `redis-native` (the baselines).
    pub via: String,
    /// `embedded` or `postgres` (xfer's shards), or `-` for the baseline.
    pub store: String,
    /// Transfers answered in the window.
    pub transfers: u64,
    /// Of which `done`.
    pub done: u64,
    /// Of which `canceled`.
    pub canceled: u64,
    /// Failed requests' transfers.
    pub errors: u64,
    /// The window, in seconds.
    pub seconds: f64,
    /// Transfers per second.
    pub per_second: f64,
    /// Request latency percentiles, ms: p50, p99, p99.9 (submit to the answer: done or
    /// canceled; held for holds).
    pub latency_ms: [f64; 3],
    /// Submit-to-decided percentiles, ms (the commit point written), per transfer; only
    /// when driving the engine as a library.
    pub decided_ms: Option<[f64; 3]>,
    /// CPU seconds (user + system) in the window.
    pub cpu_seconds: f64,
    /// CPU per transfer, µs.
    pub cpu_us_per_transfer: f64,
    /// CPU of the whole machine (every process: xfer, the database server, the load) per
    /// transfer, µs; time the hypervisor took from this machine (steal) counts as busy.
    pub machine_cpu_us_per_transfer: f64,
    /// The whole machine's idle share of the window (idle and waiting for I/O), percent.
    pub machine_idle_percent: f64,
    /// The share of the window the hypervisor gave this machine's CPUs to others (steal,
    /// in /proc/stat), percent: a run with much of it measured a slower machine, not xfer.
    pub machine_steal_percent: f64,
    /// The embedded store's log syncs (group commits, each a write and an `fdatasync`) per
    /// second; `None` on other stores.
    pub log_syncs_per_second: Option<f64>,
    /// Bytes this process wrote to storage (`write_bytes` of `/proc/self/io`: the log and
    /// the checkpoint tables, fjall's compactions included) per transfer; only on the
    /// embedded store (elsewhere the database server writes).
    pub written_bytes_per_transfer: Option<f64>,
    /// Peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// Resident memory at the window's end less at its start, MiB: memory the process
    /// touched for the first time during the window (net of what it gave back). The kernel
    /// zeroes each new page, and on a virtual machine the hypervisor may have to back it
    /// first, which can cost milliseconds per MiB (`docs/benchmarks.md`): a run that grows
    /// much pays for it in the CPU per transfer, once.
    pub rss_growth_mib: f64,
}

/// xfer's figures and, with `--baseline`, the baseline's from the same run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRun {
    /// xfer.
    pub xfer: BenchReport,
    /// The baseline, if asked for.
    pub baseline: Option<BenchReport>,
}

/// The name a value has on the command line (`multi-asset`).
pub(crate) fn name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string())
}

/// Prints a run: one `result:` line per report, and the ratio when there is a baseline.
pub fn print(run: &BenchRun) {
    for r in std::iter::once(&run.xfer).chain(&run.baseline) {
        println!(
            "result: workload={} via={} store={} transfers={} per_second={:.0} done={} canceled={} errors={} \
             latency_ms p50={:.2} p99={:.2} p999={:.2} decided_ms {} cpu_s={:.1} cpu_us_per_transfer={:.1} \
             machine_cpu_us_per_transfer={:.1} machine_idle_pct={:.1} machine_steal_pct={:.1} log_syncs_per_s={} \
             written_bytes_per_transfer={} peak_rss_mib={:.0} rss_growth_mib={:.0}",
            r.workload, r.via, r.store, r.transfers, r.per_second, r.done, r.canceled, r.errors,
            r.latency_ms[0], r.latency_ms[1], r.latency_ms[2],
            r.decided_ms.map_or("-".to_string(), |d| format!("p50={:.2} p99={:.2} p999={:.2}", d[0], d[1], d[2])),
            r.cpu_seconds, r.cpu_us_per_transfer, r.machine_cpu_us_per_transfer, r.machine_idle_percent, r.machine_steal_percent,
            r.log_syncs_per_second.map_or("-".to_string(), |v| format!("{v:.0}")),
            r.written_bytes_per_transfer.map_or("-".to_string(), |v| format!("{v:.0}")),
            r.peak_rss_mib,
            r.rss_growth_mib
        );
    }
    if let Some(b) = &run.baseline {
        println!(
            "compare: xfer {:.0} transfers/s vs {} {:.0} transfers/s: {:.2}x",
            run.xfer.per_second,
            b.via,
            b.per_second,
            run.xfer.per_second / b.per_second.max(f64::MIN_POSITIVE)
        );
    }
}
