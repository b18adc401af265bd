//! The scratch directory of one job: created fresh, swept of stale jobs at start, removed on drop.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::partition::{scratch_file_name, scratch_job_dir_name, scratch_job_dir_pid};

const ROOT_NAME: &str = "ourios-compaction";

/// Job directories this process has open; a warm Lambda keeps `/tmp` and its pid between
/// invocations, so "our pid" alone does not mean "in use".
static ACTIVE: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
static NEXT_JOB: AtomicU64 = AtomicU64::new(0);

/// One job's scratch directory. Files in it belong to the job; the directory and everything
/// in it is removed when this value drops, on success and on failure alike.
#[derive(Debug)]
pub struct ScratchDir {
    dir: PathBuf,
    next_file: AtomicU64,
    limit_bytes: Option<u64>,
}

impl ScratchDir {
    /// Creates a fresh job directory under `base`, first removing directories left by jobs
    /// that no longer run (a crashed process, or an earlier invocation of a warm Lambda).
    pub fn create(base: &Path) -> Result<Self> {
        Self::create_with_limit(base, None)
    }

    /// Like [`ScratchDir::create`], allowing the job at most `limit_bytes` of scratch.
    pub fn create_with_limit(base: &Path, limit_bytes: Option<u64>) -> Result<Self> {
        let root = base.join(ROOT_NAME);
        std::fs::create_dir_all(&root).map_err(|e| Error::scratch(&root, e))?;
        // INVARIANT: the sweep, the creation and the registration happen under one lock, so a
        // job starting beside another (the tasks of a fanned-out job) never sweeps a directory
        // created but not yet registered.
        let mut active = ACTIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let active = active.get_or_insert_with(HashSet::new);
        sweep_stale(&root, active);
        let pid = std::process::id();
        let job = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
        let nonce: u32 = rand::random();
        let dir = root.join(scratch_job_dir_name(pid, job, nonce));
        std::fs::create_dir(&dir).map_err(|e| Error::scratch(&dir, e))?;
        active.insert(dir.clone());
        Ok(Self {
            dir,
            next_file: AtomicU64::new(0),
            limit_bytes,
        })
    }

    /// The job directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A new unique file path in the job directory.
    pub fn file(&self, stem: &str, extension: &str) -> PathBuf {
        let n = self.next_file.fetch_add(1, Ordering::Relaxed);
        self.dir.join(scratch_file_name(stem, n, extension))
    }

    /// Bytes this job may still write: free space on the file system, or what is left of
    /// the job's limit, whichever is smaller.
    pub fn available_bytes(&self) -> Result<u64> {
        let free = free_bytes(&self.dir)?;
        Ok(match self.limit_bytes {
            Some(limit) => free.min(limit.saturating_sub(self.used_bytes())),
            None => free,
        })
    }

    /// Bytes the files in the job directory take on disk: a sparse file (a merge's staged
    /// selections of runs) counts the blocks written, not its length.
    pub fn used_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len().min(m.blocks().saturating_mul(512)))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Number of files currently in the job directory.
    pub fn num_files(&self) -> usize {
        std::fs::read_dir(&self.dir).map(|d| d.count()).unwrap_or(0)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove scratch directory");
        }
        let mut active = ACTIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(set) = active.as_mut() {
            set.remove(&self.dir);
        }
    }
}

/// Removes job directories whose process is gone, or which are ours but not `active`.
fn sweep_stale(root: &Path, active: &HashSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(scratch_job_dir_pid) else {
            continue;
        };
        let stale = if pid == me {
            !active.contains(&path)
        } else {
            !process_alive(pid)
        };
        if stale {
            tracing::info!(dir = %path.display(), "removing stale scratch directory");
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Scratch bytes sorting one input takes, the one rule by which the planner, `auto` and every
/// task (one output, a fan-out's group) decide what fits: its staged copy (`staged_copy`: the
/// store is not a local directory) and, unless it is `presorted` (an earlier output, read as a
/// run in place), spilled runs of about its pages' `uncompressed` size (LZ4 when space is
/// tight; plain runs are taken only with room to spare).
pub fn input_scratch_bytes(
    encoded: u64,
    uncompressed: u64,
    presorted: bool,
    staged_copy: bool,
) -> u64 {
    let copy = if staged_copy { encoded } else { 0 };
    let spill = if presorted { 0 } else { uncompressed };
    copy.saturating_add(spill)
}

/// Free bytes of the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let stat = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| Error::scratch(dir, std::io::Error::from(e)))?;
    Ok((stat.blocks_available() as u64).saturating_mul(stat.fragment_size() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_file_counts_the_blocks_written_not_its_length() {
        let base = tempfile::tempdir().unwrap();
        let scratch = ScratchDir::create(base.path()).unwrap();
        let sparse = std::fs::File::create(scratch.file("selection", "parquet")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        assert!(
            scratch.used_bytes() < 1 << 20,
            "a 64 MiB hole takes no space: {}",
            scratch.used_bytes()
        );
        std::fs::write(scratch.file("run", "arrow"), vec![7u8; 100_000]).unwrap();
        let used = scratch.used_bytes();
        assert!((100_000..(1 << 20)).contains(&used), "{used}");
    }

    #[test]
    fn removed_on_drop_and_stale_swept() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join(ROOT_NAME);
        std::fs::create_dir_all(root.join("job-999999999-0-dead")).unwrap();
        std::fs::create_dir_all(root.join(format!("job-{}-77-left", std::process::id()))).unwrap();
        let scratch = ScratchDir::create(base.path()).unwrap();
        std::fs::write(scratch.file("run", "arrow"), b"x").unwrap();
        assert_eq!(scratch.num_files(), 1);
        assert!(scratch.available_bytes().unwrap() > 0);
        let names: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "stale directories are swept");
        let dir = scratch.path().to_path_buf();
        drop(scratch);
        assert!(!dir.exists());
    }

    #[test]
    fn jobs_starting_at_once_keep_their_directories() {
        let base = tempfile::tempdir().unwrap();
        for _ in 0..20 {
            let dirs: Vec<ScratchDir> = std::thread::scope(|scope| {
                let started: Vec<_> = (0..8)
                    .map(|_| scope.spawn(|| ScratchDir::create(base.path()).unwrap()))
                    .collect();
                started.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for dir in &dirs {
                assert!(dir.path().is_dir(), "{} was swept", dir.path().display());
            }
        }
    }
}
