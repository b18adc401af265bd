//! A store wrapper that counts read requests and the bytes they return (query statistics).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::ObjectStore;

use crate::store::observed::{ObservedStore, ReadObserver};

/// Counts of the read requests made through a [`CountingStore`].
#[derive(Debug, Default)]
pub struct ReadCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl ReadCounters {
    /// GET requests made (a ranged GET counts once; coalesced ranges count as one).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Bytes those requests returned.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn record(&self, requests: u64, bytes: u64) {
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl ReadObserver for Arc<ReadCounters> {
    async fn on_get(&self, bytes: Option<u64>) {
        if let Some(bytes) = bytes {
            self.record(1, bytes);
        }
    }
}

/// Wraps a store and counts every read that goes through it.
pub type CountingStore = ObservedStore<Arc<ReadCounters>>;

impl CountingStore {
    /// Wraps `inner`; the counters are shared with the caller.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<ReadCounters>) {
        let counters = Arc::new(ReadCounters::default());
        (Self::wrap(inner, Arc::clone(&counters)), counters)
    }
}
