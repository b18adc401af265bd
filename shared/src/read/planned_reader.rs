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
            plan: Arc::new(ReadPlan::default()),
            loaded: Vec::new(),
            cursor: 0,
        }
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
