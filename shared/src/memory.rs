//! Process memory readings: the peak resident set size.

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
