//! The seeds a seeded simulation runs, and running them on the machine's cores.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The seeds to run: `OURIOS_SIM_SEED=S` replays one, else `OURIOS_SIM_SEEDS=N` (or `default`)
/// runs 1 to N.
pub fn sim_seeds(default: u64) -> Vec<u64> {
    match std::env::var("OURIOS_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("OURIOS_SIM_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("OURIOS_SIM_SEEDS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(default);
            (1..=n).collect()
        }
    }
}

/// Runs `run` for every seed on two threads, each taking the next seed not yet run. A seed's
/// schedule depends on the seed alone, so which thread runs it changes nothing. A panicking
/// seed stops both threads from taking more and fails the caller with its message.
pub fn run_seeds(seeds: &[u64], run: impl Fn(u64) + Sync) {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let _flag = FlagOnPanic(&failed);
                while !failed.load(Ordering::Relaxed) {
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    run(seed);
                }
            });
        }
    });
}

/// Sets its flag when dropped by a panicking thread.
struct FlagOnPanic<'a>(&'a AtomicBool);

impl Drop for FlagOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}
