//! Decoded-bytes accounting: a gauge of what the engine holds, with its peak.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Current and peak decoded bytes held by one compaction (batches, key rows, indices).
///
/// The engine charges bytes when it takes a batch into memory and releases them when it
/// drops it; tests read the peak to assert the memory bound, and a finished job must
/// leave the gauge at zero.
#[derive(Debug, Clone, Default)]
pub struct MemoryGauge {
    inner: Arc<GaugeCells>,
}

#[derive(Debug, Default)]
struct GaugeCells {
    current: AtomicU64,
    peak: AtomicU64,
}

impl MemoryGauge {
    /// A gauge at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Charges `bytes`, updating the peak.
    pub fn add(&self, bytes: u64) {
        let now = self.inner.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.inner.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Releases `bytes` charged earlier.
    pub fn sub(&self, bytes: u64) {
        // Saturating: a release is never larger than what was charged, but a bug here must
        // not wrap the gauge and hide itself.
        let _ = self
            .inner
            .current
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_sub(bytes))
            });
    }

    /// Bytes held now.
    pub fn current(&self) -> u64 {
        self.inner.current.load(Ordering::Relaxed)
    }

    /// The most bytes held at once.
    pub fn peak(&self) -> u64 {
        self.inner.peak.load(Ordering::Relaxed)
    }
}

/// Bytes charged to a gauge for as long as this value lives.
#[derive(Debug)]
pub struct Charge {
    gauge: MemoryGauge,
    bytes: u64,
}

impl Charge {
    /// Charges `bytes` to `gauge` until dropped.
    pub fn new(gauge: &MemoryGauge, bytes: u64) -> Self {
        gauge.add(bytes);
        Self {
            gauge: gauge.clone(),
            bytes,
        }
    }

    /// The bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.gauge.sub(self.bytes);
    }
}

/// Bytes of memory a batch holds: the capacity of every distinct allocation behind its
/// arrays, counted once even when several arrays share one (as IPC and Parquet readers do).
pub fn batch_memory_bytes(batch: &arrow_array::RecordBatch) -> u64 {
    arrays_memory_bytes(batch.columns())
}

/// [`batch_memory_bytes`] of some arrays. Buffers are told apart by address, so one shared
/// by several arrays counts once; a batch holds a few dozen, so they are sorted rather than
/// hashed.
pub fn arrays_memory_bytes<'a>(arrays: impl IntoIterator<Item = &'a arrow_array::ArrayRef>) -> u64 {
    let mut buffers = Vec::new();
    for column in arrays {
        add_array_data(&column.to_data(), &mut buffers);
    }
    buffers.sort_unstable();
    buffers.dedup_by_key(|(address, _)| *address);
    buffers.iter().map(|&(_, capacity)| capacity).sum()
}

/// Pushes the address and capacity of each buffer of `data` and its children.
fn add_array_data(data: &arrow_data::ArrayData, buffers: &mut Vec<(usize, u64)>) {
    let mut add = |buffer: &arrow_buffer::Buffer| {
        buffers.push((
            buffer.data_ptr().as_ptr() as usize,
            buffer.capacity() as u64,
        ));
    };
    for buffer in data.buffers() {
        add(buffer);
    }
    if let Some(nulls) = data.nulls() {
        add(nulls.buffer());
    }
    for child in data.child_data() {
        add_array_data(child, buffers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_peak_and_returns_to_zero() {
        let g = MemoryGauge::new();
        {
            let _a = Charge::new(&g, 10);
            let _b = Charge::new(&g, 5);
            assert_eq!(g.current(), 15);
        }
        let _c = Charge::new(&g, 3);
        assert_eq!(g.peak(), 15);
        drop(_c);
        assert_eq!(g.current(), 0);
    }

    #[test]
    fn a_buffer_shared_by_arrays_counts_once() {
        use std::sync::Arc;
        let names: arrow_array::ArrayRef = Arc::new(arrow_array::StringArray::from(vec![
            Some("a"),
            None,
            Some("bc"),
        ]));
        let one = arrays_memory_bytes([&names]);
        assert!(one > 0);
        // Offsets, values and validity, each counted by its capacity.
        let data = names.to_data();
        let expected: u64 = (data
            .buffers()
            .iter()
            .map(|b| b.capacity() as u64)
            .sum::<u64>())
            + data.nulls().map_or(0, |n| n.buffer().capacity() as u64);
        assert_eq!(one, expected);
        let again = Arc::clone(&names);
        assert_eq!(arrays_memory_bytes([&names, &again]), one);
        let other: arrow_array::ArrayRef =
            Arc::new(arrow_array::StringArray::from(vec!["a", "bc"]));
        assert!(arrays_memory_bytes([&names, &other]) > one);
    }
}
