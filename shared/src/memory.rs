//! Process resource readings: the peak resident set size and CPU time.

/// Peak resident set size of this process in bytes (`VmHWM`), or 0 where unavailable.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let kib = line.strip_prefix("VmHWM:")?.trim().strip_suffix("kB")?;
                kib.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU time (user and system) this process has used so far, all threads together.
pub fn process_cpu_time() -> std::time::Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(std::time::Duration::ZERO, |usage| {
        let to_duration = |t: nix::sys::time::TimeVal| {
            std::time::Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
        };
        to_duration(usage.user_time()) + to_duration(usage.system_time())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_plausible_peak() {
        let rss = super::peak_rss_bytes();
        if cfg!(target_os = "linux") {
            assert!(rss > 1 << 20, "{rss}");
        }
    }
}
