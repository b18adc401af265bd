//! Where the writer keeps the finished pages of the open row group: in one scratch file
//! instead of on the heap.
//!
//! A row group's column chunks must each be contiguous in the file, but rows arrive a batch at
//! a time, so every column's finished pages wait until the row group closes. In memory that
//! is the whole row group (up to the 32 MiB threshold, plus the compressor's slack per page);
//! here it is one file shared by all columns, emptied each time the last page is taken back.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::arrow::arrow_writer::{PageKey, PageStore, PageStoreArgs, PageStoreFactory};
use parquet::errors::{ParquetError, Result};

/// The shared page file: pages are appended and read back by offset.
#[derive(Debug)]
struct PageFile {
    path: PathBuf,
    file: Option<File>,
    end: u64,
    /// Pages put and not yet taken; at zero the file is truncated.
    live: usize,
}

impl PageFile {
    fn io_error(&self, what: &str, e: std::io::Error) -> ParquetError {
        ParquetError::General(format!("{what} page file {}: {e}", self.path.display()))
    }

    fn file(&mut self) -> Result<&File> {
        if self.file.is_none() {
            let file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&self.path)
                .map_err(|e| self.io_error("creating", e))?;
            self.file = Some(file);
        }
        self.file
            .as_ref()
            .ok_or_else(|| ParquetError::General("page file not open".into()))
    }
}

/// Creates one [`PageStore`] per column chunk, all appending to the same scratch file.
#[derive(Debug, Clone)]
pub struct ScratchPageStoreFactory {
    file: Arc<Mutex<PageFile>>,
}

impl ScratchPageStoreFactory {
    /// A factory whose stores share the file at `path` (created on the first page).
    pub fn new(path: &Path) -> Self {
        Self {
            file: Arc::new(Mutex::new(PageFile {
                path: path.to_path_buf(),
                file: None,
                end: 0,
                live: 0,
            })),
        }
    }
}

impl PageStoreFactory for ScratchPageStoreFactory {
    fn create(&self, _args: &PageStoreArgs<'_>) -> Result<Box<dyn PageStore>> {
        Ok(Box::new(ScratchPageStore {
            file: Arc::clone(&self.file),
            pages: Vec::new(),
        }))
    }
}

/// The pages of one column chunk: where each sits in the shared file.
struct ScratchPageStore {
    file: Arc<Mutex<PageFile>>,
    pages: Vec<(u64, usize)>,
}

impl ScratchPageStore {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, PageFile>> {
        self.file
            .lock()
            .map_err(|_| ParquetError::General("page file lock poisoned".into()))
    }
}

impl PageStore for ScratchPageStore {
    fn put(&mut self, value: Bytes) -> Result<PageKey> {
        let mut shared = self.lock()?;
        let offset = shared.end;
        let written = shared.file()?.write_all_at(&value, offset);
        written.map_err(|e| shared.io_error("writing", e))?;
        shared.end += value.len() as u64;
        shared.live += 1;
        drop(shared);
        self.pages.push((offset, value.len()));
        Ok(PageKey::new(self.pages.len() as u64 - 1))
    }

    fn take(&mut self, key: PageKey) -> Result<Bytes> {
        let &(offset, len) = self
            .pages
            .get(key.get() as usize)
            .ok_or_else(|| ParquetError::General(format!("no page {} in store", key.get())))?;
        let mut shared = self.lock()?;
        let mut page = vec![0u8; len];
        let read = shared.file()?.read_exact_at(&mut page, offset);
        read.map_err(|e| shared.io_error("reading", e))?;
        shared.live = shared.live.saturating_sub(1);
        if shared.live == 0 {
            // Every page of the row group is back: reuse the file from the start.
            shared.end = 0;
            let truncated = shared.file()?.set_len(0);
            truncated.map_err(|e| shared.io_error("truncating", e))?;
        }
        Ok(Bytes::from(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_back_and_the_file_empties() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pages");
        let factory = ScratchPageStoreFactory::new(&path);
        let shared = Arc::clone(&factory.file);
        let mut a = ScratchPageStore {
            file: Arc::clone(&shared),
            pages: Vec::new(),
        };
        let mut b = ScratchPageStore {
            file: Arc::clone(&shared),
            pages: Vec::new(),
        };
        let a0 = a.put(Bytes::from_static(b"first page of a")).unwrap();
        let b0 = b.put(Bytes::from_static(b"b")).unwrap();
        let a1 = a.put(Bytes::from_static(b"second page of a")).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 32);
        assert_eq!(&a.take(a1).unwrap()[..], b"second page of a");
        assert_eq!(&b.take(b0).unwrap()[..], b"b");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            32,
            "a page is still out"
        );
        assert_eq!(&a.take(a0).unwrap()[..], b"first page of a");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert!(a.take(PageKey::new(7)).is_err());
    }
}
