//! The host's clocks as the protocol uses them: a wall clock for labels and a monotonic clock
//! for durations. Absolute instants that decide deletions come from the store's clock
//! ([`crate::manifest::gc`]), never from these.

use std::sync::Arc;
use std::time::Instant;

/// The clocks one process reads. Tests substitute a virtual clock (skewed, or advanced by a
/// scheduler) to run the real protocol code under any timing.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Wall-clock now, Unix milliseconds (may be skewed from the store's clock).
    fn now_ms(&self) -> i64;
    /// Milliseconds since an arbitrary origin, never going back (durations only).
    fn monotonic_ms(&self) -> u64;
}

/// The system's clocks.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// The system clocks, the monotonic one counted from now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// The system clocks, shared.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(Self::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }

    fn monotonic_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// A point of the monotonic clock after which something must no longer be done.
#[derive(Debug, Clone)]
pub struct Expiry {
    clock: Arc<dyn Clock>,
    at_ms: u64,
}

impl Expiry {
    /// Expires `after` from now on `clock`.
    pub fn after(clock: &Arc<dyn Clock>, after: std::time::Duration) -> Self {
        Self {
            clock: Arc::clone(clock),
            at_ms: clock
                .monotonic_ms()
                .saturating_add(after.as_millis() as u64),
        }
    }

    /// Expires at `at_ms` of `clock`'s monotonic side.
    pub fn at_monotonic(clock: &Arc<dyn Clock>, at_ms: u64) -> Self {
        Self {
            clock: Arc::clone(clock),
            at_ms,
        }
    }

    /// The earlier of two points of the same clock.
    pub fn earlier(self, other: Expiry) -> Expiry {
        if other.at_ms < self.at_ms {
            other
        } else {
            self
        }
    }

    /// True once the point has passed.
    pub fn has_passed(&self) -> bool {
        self.clock.monotonic_ms() >= self.at_ms
    }
}
