//! The Parquet reader of one stored object: it loads the footer, and serves the decoder's
//! reads from a [`ReadPlan`] when given one, fetching a fetch block at a time.
//!
//! Without a plan every read goes to the store as it comes (a `get_ranges` call, which the
//! store coalesces). With a plan, the first read that falls in a fetch block fetches all of
//! the block's requests (one GET each, concurrently) and later reads of the block are served
//! from them; reaching the next block drops the previous one, so at most the blocks of one
//! read are held. A read the plan does not cover goes to the store as without a plan.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};

use crate::error::{Error, Result};
use crate::read::inspect::parquet_store_error;
use crate::read::read_plan::ReadPlan;

/// GETs of one block in flight at once (as the store's own `get_ranges` does).
const FETCH_CONCURRENCY: usize = 10;

/// Reads one object for the async Parquet reader, through whatever store it is given (the
/// query gives a [`crate::store::counting::CountingStore`], so its statistics count real requests).
pub struct PlannedReader {
    store: Arc<dyn ObjectStore>,
    key: Path,
    size: Option<u64>,
    /// Bytes read from the object's end in the footer's first request (`None`: its last eight
    /// bytes, then the footer, then the page indexes, one request each).
    footer_prefetch: Option<usize>,
    plan: Arc<ReadPlan>,
    /// Fetched blocks: the block's index and the bytes of each of its requests.
    loaded: Vec<(usize, Vec<Bytes>)>,
    /// The block the last fetch was for: the search for the next one starts there.
    cursor: usize,
}

impl PlannedReader {
    /// A reader of `key` without a plan.
    pub fn new(store: Arc<dyn ObjectStore>, key: Path) -> Self {
        Self {
            store,
            key,
            size: None,
            footer_prefetch: None,
            plan: Arc::new(ReadPlan::default()),
            loaded: Vec::new(),
            cursor: 0,
        }
    }

    /// The same reader of an object whose size is known (no HEAD before the footer), whose
    /// footer is loaded with one request for its last `prefetch` bytes: the footer and the page
    /// indexes when they fit, as they do in the job's own runs and outputs (a larger footer
    /// takes one request more).
    pub fn with_footer_prefetch(mut self, size: u64, prefetch: usize) -> Self {
        self.size = Some(size);
        self.footer_prefetch = Some(prefetch);
        self
    }

    /// The same object read by `plan` from now on.
    pub fn with_plan(mut self, plan: ReadPlan) -> Self {
        self.plan = Arc::new(plan);
        self.loaded.clear();
        self.cursor = 0;
        self
    }

    /// Loads the footer and, when present, the page indexes.
    pub async fn load_metadata(&mut self) -> Result<Arc<ParquetMetaData>> {
        let size = match self.size {
            Some(size) => size,
            None => {
                let size = self
                    .store
                    .head(&self.key)
                    .await
                    .map_err(|e| Error::store("head", &self.key, e))?
                    .size;
                self.size = Some(size);
                size
            }
        };
        let metadata = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .with_prefetch_hint(self.footer_prefetch)
            .load_and_finish(&mut *self, size)
            .await
            .map_err(|e| parquet_store_error("get", &self.key, e))?;
        Ok(Arc::new(metadata))
    }

    /// The bytes of `range` if a fetched block holds them.
    fn cached(&self, range: &Range<u64>) -> Option<Bytes> {
        self.loaded.iter().find_map(|(b, data)| {
            let block = &self.plan.blocks[*b];
            let i = block.request_holding(range)?;
            let start = block.requests[i].start;
            let bytes = &data[i];
            let (from, to) = ((range.start - start) as usize, (range.end - start) as usize);
            (to <= bytes.len()).then(|| bytes.slice(from..to))
        })
    }

    /// Fetches block `b`: one GET per request.
    async fn fetch_block(&self, b: usize) -> object_store::Result<Vec<Bytes>> {
        let requests = self.plan.blocks[b].requests.clone();
        tracing::debug!(
            key = %self.key,
            block = b,
            row_groups = ?self.plan.blocks[b].row_groups,
            ?requests,
            "fetch block"
        );
        futures::stream::iter(requests)
            .map(|r| {
                let (store, key) = (Arc::clone(&self.store), self.key.clone());
                async move { store.get_range(&key, r).await }
            })
            .buffered(FETCH_CONCURRENCY)
            .try_collect()
            .await
    }

    async fn read(&mut self, ranges: Vec<Range<u64>>) -> object_store::Result<Vec<Bytes>> {
        let mut out: Vec<Option<Bytes>> = ranges.iter().map(|r| self.cached(r)).collect();
        let mut needed: Vec<usize> = ranges
            .iter()
            .zip(&out)
            .filter(|(_, got)| got.is_none())
            .filter_map(|(r, _)| self.plan.block_holding(r, self.cursor))
            .collect();
        needed.sort_unstable();
        needed.dedup();
        if let Some(&last) = needed.last() {
            // Moving on: drop the blocks this read does not need (their slices already
            // handed out stay alive with the decoder).
            self.loaded.retain(|(b, _)| needed.contains(b));
            for b in needed {
                if self.loaded.iter().all(|(have, _)| *have != b) {
                    let data = self.fetch_block(b).await?;
                    self.loaded.push((b, data));
                }
            }
            self.cursor = last;
            for (slot, r) in out.iter_mut().zip(&ranges) {
                if slot.is_none() {
                    *slot = self.cached(r);
                }
            }
        }
        let missing: Vec<Range<u64>> = ranges
            .iter()
            .zip(&out)
            .filter(|(_, got)| got.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        if !missing.is_empty() {
            tracing::debug!(key = %self.key, ?missing, "read outside the plan");
        }
        let mut fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.store.get_ranges(&self.key, &missing).await?
        }
        .into_iter();
        out.into_iter()
            .map(|got| {
                got.or_else(|| fetched.next())
                    .ok_or_else(|| object_store::Error::Generic {
                        store: "planned reader",
                        source: "the store returned fewer ranges than asked for".into(),
                    })
            })
            .collect()
    }
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl AsyncFileReader for PlannedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let mut data = self.read(vec![range]).await.map_err(external)?;
            Ok(data.pop().unwrap_or_default())
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move { self.read(ranges).await.map_err(external) }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            self.load_metadata()
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;
    use crate::store::counting::CountingStore;
    use crate::testing::{parquet_bytes, rows_batch};

    #[tokio::test]
    async fn a_prefetched_footer_comes_in_one_request_with_its_page_indexes() {
        let rows: Vec<_> = (0..5_000)
            .map(|i| (Some(format!("s{}", i % 7)), i, i))
            .collect();
        let bytes = parquet_bytes(&[rows_batch(&rows)], 1_000);
        let size = bytes.len() as u64;
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let key = Path::from("f.parquet");
        memory.put(&key, bytes.into()).await.expect("put");
        let (counting, reads) = CountingStore::new(Arc::clone(&memory));
        let store: Arc<dyn ObjectStore> = Arc::new(counting);

        let plain = PlannedReader::new(Arc::clone(&store), key.clone())
            .load_metadata()
            .await
            .expect("footer");
        let plain_requests = reads.requests();
        assert_eq!(
            plain_requests, 3,
            "the last eight bytes, the footer, the indexes"
        );

        let prefetched = PlannedReader::new(Arc::clone(&store), key)
            .with_footer_prefetch(size, 256 << 10)
            .load_metadata()
            .await
            .expect("footer");
        assert_eq!(reads.requests() - plain_requests, 1);
        assert_eq!(prefetched.num_row_groups(), plain.num_row_groups());
        assert!(plain.page_index().is_some(), "the file has page indexes");
        assert!(
            prefetched.page_index().is_some(),
            "the page indexes came with it"
        );
    }
}
