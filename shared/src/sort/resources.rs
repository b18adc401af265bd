//! Process resources: the allocator's arena limit and trimming, the peak resident set size,
//! CPU time and the open files allowed.

/// Arenas glibc's allocator may create (see [`tune_allocator`]).
pub const ALLOCATOR_ARENAS: i32 = 1;
/// Free memory at the top of an arena beyond this goes back to the system (see
/// [`tune_allocator`]).
pub const ALLOCATOR_TRIM_BYTES: i32 = 16 << 20;
/// Allocations from this size up get mappings of their own (see [`tune_allocator`]).
pub const ALLOCATOR_MMAP_BYTES: i32 = 8 << 20;

/// Tunes glibc's allocator for a process whose resident size must track its live memory.
///
/// By default every thread that meets contention gets an arena of its own (up to eight per
/// core) and memory freed into one arena is not reused by the others; and after large
/// buffers are freed the allocator raises its trim threshold to 64 MB, keeping that much
/// free memory per arena. With the decode, spill, merge and writer threads each keeping its
/// own high-water mark, a partition of wide rows then needs twice its live memory in RSS.
/// One arena ([`ALLOCATOR_ARENAS`]) and a fixed [`ALLOCATOR_TRIM_BYTES`] keep RSS near the
/// live peak: memory one thread frees is reused by the next that allocates, and the
/// per-thread caches keep small allocations off the arena's lock (measured: no slower than
/// two arenas, and 5-40 MB less peak RSS on every stress shape, 38 MB on the 1 GiB wide
/// file). Fixing the trim threshold also fixes the mapping threshold, at 128 KiB unless
/// set: every buffer above it would be a fresh mapping whose pages fault in one by one,
/// about 400,000 faults (a third of a second of CPU) per 3 million rows sorted. At
/// [`ALLOCATOR_MMAP_BYTES`] the run and chunk buffers of a merge, the writer's pages and the
/// upload's parts are reused from the arenas instead: at 8 MiB rather than 1 MiB, a third
/// fewer page faults on the benchmark hour and a fifth less time on the bloat partition, for
/// 0-8 MB more RSS (10-17 MB on a 1 GiB file of wide rows, which stays under 180 MB;
/// `shared/BENCHMARKS.md`, where the instructions go). Binaries call this first thing in
/// `main`; off glibc it does nothing.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters, each to a value its range accepts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ALLOCATOR_ARENAS);
        libc::mallopt(libc::M_TRIM_THRESHOLD, ALLOCATOR_TRIM_BYTES);
        libc::mallopt(libc::M_MMAP_THRESHOLD, ALLOCATOR_MMAP_BYTES);
    }
}

/// Gives every whole free page of the allocator's heap back to the system, not only the free
/// top of the heap that glibc returns by itself (`malloc_trim`); off glibc it does nothing.
///
/// With one arena ([`ALLOCATOR_ARENAS`]) a merge frees its run batches (just under
/// [`ALLOCATOR_MMAP_BYTES`], so they come from the heap) in the order the runs are used up,
/// while small allocations that live to the end of the file (the output's row-group metadata)
/// land between them: the freed batches are not all reused, the heap grows past them and the
/// free pages stay resident. On the bloat partition (`shared/BENCHMARKS.md`, memory) the live heap peaked
/// at 89 MB while the resident set reached 200-260 MB at a 64 MiB budget.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes the arenas' locks itself and only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Calls [`release_free_memory`] each time another `interval_bytes` have passed through a
/// loop that allocates and frees as it goes (a merge), so the resident set follows the live
/// heap at the cost of one walk over the free lists per interval; with a floor
/// ([`MemoryRelease::above`]), only while the resident set is at least that large.
#[derive(Debug)]
pub struct MemoryRelease {
    interval_bytes: u64,
    above_bytes: Option<u64>,
    since_bytes: u64,
    num_releases: u64,
}

impl MemoryRelease {
    /// Releases after every `interval_bytes` noted (0: never).
    pub fn every(interval_bytes: u64) -> Self {
        Self {
            interval_bytes,
            above_bytes: None,
            since_bytes: 0,
            num_releases: 0,
        }
    }

    /// The same, releasing only when the resident set is at least `resident_bytes` (`None`:
    /// whatever it is). Each release hands back pages that the next allocations fault in
    /// again; below the floor they stay for reuse.
    pub fn above(self, resident_bytes: Option<u64>) -> Self {
        Self {
            above_bytes: resident_bytes,
            ..self
        }
    }

    /// How many times free memory was released.
    pub fn num_releases(&self) -> u64 {
        self.num_releases
    }

    /// Notes `bytes` more passing through; releases free memory when the interval is full
    /// (and the resident set is above the floor).
    pub fn note(&mut self, bytes: u64) {
        if self.interval_bytes == 0 {
            return;
        }
        self.since_bytes += bytes;
        if self.since_bytes >= self.interval_bytes {
            self.since_bytes = 0;
            if self
                .above_bytes
                .is_some_and(|floor| resident_bytes() < floor)
            {
                return;
            }
            self.num_releases += 1;
            release_free_memory();
        }
    }
}

/// Resident set size of this process now, in bytes (`/proc/self/statm`), or 0 where
/// unavailable.
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * page_bytes()
}

/// The system's page size.
fn page_bytes() -> u64 {
    #[cfg(unix)]
    // SAFETY: `sysconf` only reads a system setting.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    #[cfg(not(unix))]
    let size = 4096;
    u64::try_from(size).ok().filter(|&n| n > 0).unwrap_or(4096)
}

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

/// Files this process may still open alongside what it holds: half its soft limit on open
/// descriptors (`RLIMIT_NOFILE`), or `None` where unknown or unlimited. A merge opens one
/// file per run.
pub fn open_files_allowance() -> Option<usize> {
    use nix::sys::resource::{Resource, getrlimit};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft == nix::sys::resource::RLIM_INFINITY {
        return None;
    }
    usize::try_from(soft / 2).ok()
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
    use super::MemoryRelease;

    #[test]
    fn releases_once_per_full_interval() {
        let mut release = MemoryRelease::every(100);
        for _ in 0..9 {
            release.note(30);
        }
        // 270 bytes: full at 120 and again at 240 (the count restarts after each release).
        assert_eq!(release.num_releases(), 2);
        let mut never = MemoryRelease::every(0);
        never.note(u64::MAX);
        assert_eq!(never.num_releases(), 0);
    }

    #[test]
    fn releases_only_above_the_floor() {
        let mut below = MemoryRelease::every(100).above(Some(u64::MAX));
        below.note(1_000);
        below.note(1_000);
        assert_eq!(below.num_releases(), 0);
        let mut above = MemoryRelease::every(100).above(Some(0));
        above.note(1_000);
        above.note(1_000);
        assert_eq!(above.num_releases(), 2);
    }

    #[test]
    fn reads_a_plausible_resident_set() {
        let rss = super::resident_bytes();
        if cfg!(target_os = "linux") {
            assert!(rss > 1 << 20, "{rss}");
            assert!(rss <= super::peak_rss_bytes() + (64 << 20), "{rss}");
        }
    }

    #[test]
    fn reads_a_plausible_peak() {
        let rss = super::peak_rss_bytes();
        if cfg!(target_os = "linux") {
            assert!(rss > 1 << 20, "{rss}");
        }
    }
}
