//! A store wrapper that makes every GET (and HEAD) take a round trip and a transfer time, so a
//! benchmark on a local directory shows what request counts cost against a remote store.

use std::sync::Arc;
use std::time::Duration;

use object_store::{GetResult, ObjectStore};
use ourios_compaction::store::hooked::{GetRequest, HookedStore, Inner, StoreHooks, StoreResult};

/// Delays each read: `round_trip`, plus its bytes at `bytes_per_second` when set.
#[derive(Debug)]
pub struct Latency {
    round_trip: Duration,
    bytes_per_second: Option<u64>,
}

impl Latency {
    /// How long a read of `bytes` takes.
    fn delay(&self, bytes: u64) -> Duration {
        let transfer = self
            .bytes_per_second
            .filter(|&rate| rate > 0)
            .map_or(Duration::ZERO, |rate| {
                Duration::from_secs_f64(bytes as f64 / rate as f64)
            });
        self.round_trip + transfer
    }
}

#[async_trait::async_trait]
impl StoreHooks for Latency {
    const NAME: &'static str = "LatencyStore";

    /// Delays each GET, after it returned, by its time (a HEAD by the round trip).
    async fn get(&self, inner: &Inner, get: GetRequest<'_>) -> StoreResult<GetResult> {
        let (result, bytes) = get.forward_sized(inner).await?;
        tokio::time::sleep(self.delay(bytes.unwrap_or(0))).await;
        Ok(result)
    }
}

/// A store whose reads take the time of [`Latency`].
pub type LatencyStore = HookedStore<Latency>;

/// Wraps `inner` so each GET (and HEAD) takes `round_trip` plus its transfer time.
pub fn latency_store(
    inner: Arc<dyn ObjectStore>,
    round_trip: Duration,
    bytes_per_second: Option<u64>,
) -> LatencyStore {
    HookedStore::wrap(
        inner,
        Arc::new(Latency {
            round_trip,
            bytes_per_second,
        }),
    )
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test]
    async fn reads_take_a_round_trip_and_their_transfer_time() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = Path::from("a");
        inner
            .put(&key, PutPayload::from(vec![0u8; 1000]))
            .await
            .expect("put");
        let latency = Latency {
            round_trip: Duration::from_millis(30),
            bytes_per_second: Some(10_000),
        };
        assert_eq!(latency.delay(1000), Duration::from_millis(130));
        let store = latency_store(inner, Duration::from_millis(30), Some(10_000));
        let t = std::time::Instant::now();
        let bytes = store.get_range(&key, 0..500).await.expect("get");
        assert_eq!(bytes.len(), 500);
        assert!(t.elapsed() >= Duration::from_millis(80));
        let unlimited = Latency {
            round_trip: Duration::ZERO,
            bytes_per_second: None,
        };
        assert_eq!(unlimited.delay(1 << 30), Duration::ZERO);
    }
}
