//! What the run cost the machine: CPU of the process and of the whole machine, idle and
//! steal shares, bytes written, memory.

/// The whole machine's CPU seconds (all cores, every process), from /proc/stat.
#[derive(Clone, Copy, Default)]
pub(crate) struct MachineTimes {
    /// Busy, steal included.
    pub(crate) busy: f64,
    /// Idle, waiting for I/O included.
    pub(crate) idle: f64,
    /// Taken by the hypervisor for others.
    pub(crate) steal: f64,
}

impl std::ops::Sub for MachineTimes {
    type Output = MachineTimes;
    fn sub(self, before: MachineTimes) -> MachineTimes {
        MachineTimes {
            busy: self.busy - before.busy,
            idle: self.idle - before.idle,
            steal: self.steal - before.steal,
        }
    }
}

pub(crate) fn machine_times() -> MachineTimes {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<f64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal.
            let idle = f.get(3)? + f.get(4)?;
            let busy = f.iter().take(8).sum::<f64>() - idle;
            Some(MachineTimes {
                busy: busy / 100.0,
                idle: idle / 100.0,
                steal: f.get(7)? / 100.0,
            })
        })
        .unwrap_or_default()
}

/// Bytes this process has caused to be written to storage, from /proc/self/io (`None`
/// where the kernel does not say).
pub(crate) fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = io.lines().find(|l| l.starts_with("write_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// This process's CPU seconds (user + system) and its memory, from /proc.
pub(crate) fn usage() -> Usage {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start after ") ".
            let rest = s.rsplit_once(") ")?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mib = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    Usage {
        cpu_seconds: cpu,
        peak_rss_mib: mib("VmHWM:"),
        rss_mib: mib("VmRSS:"),
    }
}

/// What [`usage`] reads.
pub(crate) struct Usage {
    pub(crate) cpu_seconds: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) rss_mib: f64,
}
