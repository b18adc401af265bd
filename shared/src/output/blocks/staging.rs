//! Where the encoded row groups of an open block wait until the block is laid out: in memory
//! while they are small, in one scratch file once they outgrow [`STAGING_MEMORY_BYTES`].

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Most encoded bytes of an open block held in memory; a larger block is staged in a scratch
/// file (one upload part, so a block adds at most this to the writer's memory).
pub const STAGING_MEMORY_BYTES: usize = 8 << 20;
/// Bytes copied at once from a staging file to the output.
const COPY_BYTES: usize = 1 << 20;

/// An append-only byte buffer, reset after each block, that moves to a file when it grows.
#[derive(Debug)]
pub(crate) struct Staging {
    memory: Vec<u8>,
    file: Option<File>,
    path: Option<PathBuf>,
    memory_limit: usize,
    len: u64,
    peak_memory: usize,
}

impl Staging {
    /// A buffer that spills to `path` (created when first needed) past `memory_limit` bytes;
    /// without a path it stays in memory whatever its size.
    pub(crate) fn new(path: Option<PathBuf>, memory_limit: usize) -> Self {
        Self {
            memory: Vec::new(),
            file: None,
            path,
            memory_limit,
            len: 0,
            peak_memory: 0,
        }
    }

    /// Bytes staged since the last [`Self::clear`].
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The most bytes held in memory at once.
    pub(crate) fn peak_memory(&self) -> usize {
        self.peak_memory
    }

    /// Whether the staged bytes live in a file.
    pub(crate) fn is_spilled(&self) -> bool {
        self.file.is_some()
    }

    /// The staging file, for error messages.
    pub(crate) fn describe(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from("in-memory block staging"))
    }

    /// Writes each `(start, len)` range of the staged bytes to `out`, in order, through one
    /// copy buffer.
    pub(crate) fn copy_ranges(
        &mut self,
        ranges: &[(u64, u64)],
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        let mut buffer = Vec::new();
        for &(start, len) in ranges {
            let end = start
                .checked_add(len)
                .filter(|end| *end <= self.len)
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!(
                            "range {start}+{len} is outside the {} staged bytes",
                            self.len
                        ),
                    )
                })?;
            match &self.file {
                None => {
                    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end))
                    else {
                        return Err(std::io::Error::other("staged range does not fit memory"));
                    };
                    out.write_all(&self.memory[start..end])?;
                }
                Some(file) => {
                    let size = COPY_BYTES.min(usize::try_from(len).unwrap_or(COPY_BYTES));
                    if buffer.len() < size {
                        buffer.resize(size, 0);
                    }
                    let mut at = start;
                    while at < end {
                        let n = (end - at).min(buffer.len() as u64) as usize;
                        file.read_exact_at(&mut buffer[..n], at)?;
                        out.write_all(&buffer[..n])?;
                        at += n as u64;
                    }
                }
            }
        }
        Ok(())
    }

    /// Forgets the staged bytes; a staging file is kept (empty) for the next block.
    pub(crate) fn clear(&mut self) -> std::io::Result<()> {
        self.len = 0;
        self.memory.clear();
        if let Some(file) = &mut self.file {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
        }
        Ok(())
    }

    fn spill(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut file = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)?;
        file.write_all(&self.memory)?;
        self.memory = Vec::new();
        self.file = Some(file);
        Ok(())
    }
}

impl Write for Staging {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() && self.memory.len() + buf.len() > self.memory_limit {
            self.spill()?;
        }
        match &mut self.file {
            Some(file) => file.write_all(buf)?,
            None => {
                self.memory.extend_from_slice(buf);
                self.peak_memory = self.peak_memory.max(self.memory.len());
            }
        }
        self.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.file.take().is_some()
            && let Some(path) = &self.path
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_in_memory_until_the_cap_then_spills() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("block.bin");
        let mut staging = Staging::new(Some(path.clone()), STAGING_MEMORY_BYTES);
        let part = vec![7u8; STAGING_MEMORY_BYTES / 2];
        staging.write_all(&part).unwrap();
        assert!(!staging.is_spilled());
        staging.write_all(&part).unwrap();
        staging.write_all(b"tail").unwrap();
        assert!(staging.is_spilled());
        assert!(staging.peak_memory() <= STAGING_MEMORY_BYTES);
        let mut out = Vec::new();
        staging
            .copy_ranges(&[(STAGING_MEMORY_BYTES as u64, 4)], &mut out)
            .unwrap();
        assert_eq!(out, b"tail");
        assert!(
            staging
                .copy_ranges(&[(staging.len(), 1)], &mut out)
                .is_err()
        );
        staging.clear().unwrap();
        assert_eq!(staging.len(), 0);
        staging.write_all(b"next").unwrap();
        let mut out = Vec::new();
        staging.copy_ranges(&[(0, 4)], &mut out).unwrap();
        assert_eq!(out, b"next");
        drop(staging);
        assert!(!path.exists(), "the staging file is removed");
    }

    #[test]
    fn without_a_path_stays_in_memory() {
        let mut staging = Staging::new(None, STAGING_MEMORY_BYTES);
        staging
            .write_all(&vec![1u8; STAGING_MEMORY_BYTES + 1])
            .unwrap();
        assert!(!staging.is_spilled());
        let mut out = Vec::new();
        staging
            .copy_ranges(&[(STAGING_MEMORY_BYTES as u64, 1)], &mut out)
            .unwrap();
        assert_eq!(out, [1]);
    }
}
