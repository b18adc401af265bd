//! Running a command inside a memory-limited cgroup (v2 or v1), as a Lambda function runs,
//! where this system lets a test create one.
//!
//! A cgroup charges the page cache of the files a process writes (its spilled runs) as well as
//! its resident memory, and reclaims that cache when the limit is reached; only memory that
//! cannot be reclaimed gets the process killed. Creating a cgroup needs write access to the
//! cgroup file system (root, or a delegated subtree); where that is missing the caller is told
//! why, and must say so rather than pretend the limit was enforced.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Which cgroup interface a limit was enforced through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy (`memory.max`, `memory.peak`, `memory.events`).
    V2,
    /// The legacy memory controller (`memory.limit_in_bytes`, `memory.max_usage_in_bytes`).
    V1,
}

/// What the cgroup saw of a command run inside it.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The interface used.
    pub version: Version,
    /// The limit on memory (and swap, where the system accounts it), in bytes.
    pub limit_bytes: u64,
    /// The most memory charged at once, page cache included (`None`: a v2 kernel older than
    /// 5.19 has no `memory.peak`).
    pub max_usage_bytes: Option<u64>,
    /// Processes the kernel killed for want of memory inside the cgroup.
    pub oom_kills: u64,
}

/// A command's output and how it was confined.
#[derive(Debug)]
pub struct Limited {
    /// What the command wrote and how it exited.
    pub output: Output,
    /// The cgroup's figures, or why no cgroup could be created.
    pub confinement: Result<Usage, String>,
}

/// Runs `command` inside a fresh cgroup limited to `limit_bytes` (no swap), or, when none can
/// be created here, without one (the reason is in [`Limited::confinement`]). The cgroup is
/// removed afterwards.
pub fn run_limited(command: &Command, limit_bytes: u64) -> Limited {
    match Cgroup::create(limit_bytes) {
        Ok(cgroup) => {
            let output = spawn_in(command, Some(&cgroup.procs()));
            let confinement = cgroup.usage();
            Limited {
                output,
                confinement,
            }
        }
        Err(reason) => Limited {
            output: spawn_in(command, None),
            confinement: Err(reason),
        },
    }
}

/// Runs `command` through `sh`, which first moves itself into `procs` (when given) and then
/// becomes the command, so every byte the command allocates is charged to the cgroup.
fn spawn_in(command: &Command, procs: Option<&Path>) -> Output {
    let mut shell = Command::new("/bin/sh");
    match procs {
        Some(procs) => shell
            .arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(procs),
        None => shell.arg("-c").arg(r#"exec "$@""#).arg("sh"),
    };
    shell.arg(command.get_program()).args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => shell.env(name, value),
            None => shell.env_remove(name),
        };
    }
    shell.output().expect("sh starts")
}

/// A cgroup this process created, removed on drop.
struct Cgroup {
    dir: PathBuf,
    version: Version,
    limit_bytes: u64,
}

impl Cgroup {
    /// Creates a memory-limited child of this process's cgroup (or of the hierarchy's root
    /// when that is not visible), trying v2 first.
    fn create(limit_bytes: u64) -> Result<Self, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ourios-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let v1 = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        let attempt = if read(v2).is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
            Self::create_v2(&name, limit_bytes)
        } else if v1.exists() {
            Self::create_v1(&name, limit_bytes)
        } else {
            Err("no cgroup memory controller is mounted at /sys/fs/cgroup".to_string())
        };
        let cgroup = attempt?;
        cgroup.probe()?;
        Ok(cgroup)
    }

    fn create_v2(name: &str, limit_bytes: u64) -> Result<Self, String> {
        let root = Path::new("/sys/fs/cgroup");
        let parent = own_path(Version::V2).map_or(root.to_path_buf(), |p| root.join(p));
        let parent = if parent.is_dir() { parent } else { root.into() };
        let controls = read(&parent.join("cgroup.subtree_control"))?;
        if !controls.split_whitespace().any(|c| c == "memory") {
            write(&parent.join("cgroup.subtree_control"), "+memory")?;
        }
        let cgroup = Self::make(parent.join(name), Version::V2, limit_bytes)?;
        write(&cgroup.dir.join("memory.max"), &limit_bytes.to_string())?;
        let swap = cgroup.dir.join("memory.swap.max");
        if swap.exists() {
            write(&swap, "0")?;
        }
        Ok(cgroup)
    }

    fn create_v1(name: &str, limit_bytes: u64) -> Result<Self, String> {
        let root = Path::new("/sys/fs/cgroup/memory");
        let parent = (own_path(Version::V1).map(|p| root.join(p)))
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| root.into());
        let cgroup = Self::make(parent.join(name), Version::V1, limit_bytes)?;
        let limit = limit_bytes.to_string();
        write(&cgroup.dir.join("memory.limit_in_bytes"), &limit)?;
        // Memory plus swap: the same limit, so nothing is swapped out to stay under it.
        let memsw = cgroup.dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write(&memsw, &limit)?;
        }
        Ok(cgroup)
    }

    fn make(dir: PathBuf, version: Version, limit_bytes: u64) -> Result<Self, String> {
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Self {
            dir,
            version,
            limit_bytes,
        })
    }

    /// Moves a short-lived shell into the cgroup: proves this process may do so before the
    /// command that matters depends on it.
    fn probe(&self) -> Result<(), String> {
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0""#)
            .arg(self.procs())
            .output()
            .map_err(|e| format!("starting sh: {e}"))?;
        if status.status.success() {
            Ok(())
        } else {
            Err(format!(
                "moving a process into {}: {}",
                self.dir.display(),
                String::from_utf8_lossy(&status.stderr).trim()
            ))
        }
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn usage(&self) -> Result<Usage, String> {
        let number = |file: &str| -> Result<u64, String> {
            let text = read(&self.dir.join(file))?;
            text.trim()
                .parse()
                .map_err(|e| format!("{file} holds {text:?}: {e}"))
        };
        let (max_usage_bytes, events) = match self.version {
            Version::V2 => (number("memory.peak").ok(), "memory.events"),
            Version::V1 => (
                Some(number("memory.max_usage_in_bytes")?),
                "memory.oom_control",
            ),
        };
        let events = read(&self.dir.join(events))?;
        let oom_kills = events
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .map_or(Ok(0), |n| n.trim().parse())
            .map_err(|e| format!("oom_kill count: {e}"))?;
        Ok(Usage {
            version: self.version,
            limit_bytes: self.limit_bytes,
            max_usage_bytes,
            oom_kills,
        })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once the command and the probe have exited; charges left for the page cache
        // move to the parent.
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("could not remove cgroup {}: {e}", self.dir.display());
        }
    }
}

/// This process's cgroup path from `/proc/self/cgroup` for `version`, without its leading `/`.
fn own_path(version: Version) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let path = match version {
            Version::V2 => line.strip_prefix("0::")?,
            Version::V1 => {
                let (_, rest) = line.split_once(':')?;
                let (controllers, path) = rest.split_once(':')?;
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then_some(path)?
            }
        };
        Some(path.trim_start_matches('/').to_string())
    })
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value} to {}: {e}", path.display()))
}
