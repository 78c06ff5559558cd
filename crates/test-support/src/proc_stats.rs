//! What `/proc` says of a process: CPU seconds, peak RSS, children (Linux only). The benchmarks'
//! counters and the private servers' CPU time read these.

use std::sync::OnceLock;

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`, 100 on Linux).
pub(crate) fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Fields of `/proc/<pid>/stat` after the command name (the first is field 3, `state`).
pub(crate) fn proc_stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// User + system CPU seconds `pid` has used so far (all its threads), from `/proc/<pid>/stat`;
/// `None` when it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = proc_stat_fields(pid)?;
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after `state` (field 3).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Peak resident set size of `pid` so far, in KiB (`VmHWM` of `/proc/<pid>/status`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The ids of `parent`'s child processes (a scan of `/proc/*/stat` for the parent id).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            proc_stat_fields(pid)
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                .is_some_and(|ppid| ppid == parent)
        })
        .collect()
}
