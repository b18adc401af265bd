//! A store wrapper that counts read requests and the bytes they return (query statistics).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::{GetResult, ObjectStore};

use crate::store::hooked::{GetRequest, HookedStore, Inner, StoreHooks, StoreResult};

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
impl StoreHooks for ReadCounters {
    const NAME: &'static str = "CountingStore";

    /// Counts each GET that returned, with its bytes; a HEAD is not a read.
    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let (result, bytes) = get.forward_sized(inner).await?;
        if let Some(bytes) = bytes {
            self.record(1, bytes);
        }
        Ok(result)
    }
}

/// Wraps a store and counts every read that goes through it.
pub type CountingStore = HookedStore<ReadCounters>;

impl CountingStore {
    /// Wraps `inner`; the counters are shared with the caller.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Self, Arc<ReadCounters>) {
        let counters = Arc::new(ReadCounters::default());
        (Self::wrap(inner, Arc::clone(&counters)), counters)
    }
}
