//! The one public error type of the library and its retry classification.

use std::path::PathBuf;

/// How a caller should react to an [`Error`]. Serialized as [`ErrorKind::name`] spells it, so
/// reports, metrics and Lambda's `errorType` show one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// A network or store hiccup: retrying the same call may succeed.
    Transient,
    /// Another writer changed the state this call was based on.
    Conflict,
    /// The request or the data is wrong: retrying will not help.
    InvalidInput,
    /// Memory, disk or time ran out: a larger function or budget may help.
    ResourceExhausted,
    /// An internal invariant broke: a bug to report.
    Bug,
}

impl ErrorKind {
    /// The kind as the dead-letter queue, CloudWatch and the reports show it (`InvalidInput`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Transient => "Transient",
            ErrorKind::Conflict => "Conflict",
            ErrorKind::InvalidInput => "InvalidInput",
            ErrorKind::ResourceExhausted => "ResourceExhausted",
            ErrorKind::Bug => "Bug",
        }
    }

    /// The HTTP status a function-URL caller gets for a failure of this kind: 4xx when the
    /// request is wrong, 5xx when a retry may succeed or the fault is ours.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::InvalidInput => 400,
            ErrorKind::Conflict => 409,
            ErrorKind::Transient | ErrorKind::ResourceExhausted => 503,
            ErrorKind::Bug => 500,
        }
    }
}

/// Why a function invocation failed: its kind (Lambda's `errorType`, so the dead-letter queue
/// and CloudWatch show `InvalidInput`, `Transient`, ...) and a message naming what failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InvocationError {
    /// How a caller should react.
    pub kind: ErrorKind,
    /// What failed, naming the key, partition or field.
    pub message: String,
}

impl InvocationError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for InvocationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl std::error::Error for InvocationError {}

impl From<Error> for InvocationError {
    fn from(error: Error) -> Self {
        Self::new(error.kind(), error.to_string())
    }
}

impl From<serde_json::Error> for InvocationError {
    /// Our own answer failed to serialize: a bug, never the caller's input.
    fn from(error: serde_json::Error) -> Self {
        Self::new(
            ErrorKind::Bug,
            format!("cannot serialize the answer: {error}"),
        )
    }
}

/// Every failure the library reports, with the context a person needs to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store URL or other setting could not be understood.
    #[error("invalid configuration: {message}")]
    Config {
        /// What is wrong and how to fix it.
        message: String,
    },

    /// An object key or command argument does not follow the partition layout.
    #[error("invalid partition: {message}")]
    Partition {
        /// What part of the key or argument is wrong.
        message: String,
    },

    /// An object-store call failed.
    #[error("store {operation} failed for {location}: {source}")]
    Store {
        /// The operation (`get`, `put`, `list`, ...).
        operation: &'static str,
        /// The key or prefix it was called on.
        location: String,
        /// The store's own error.
        #[source]
        source: object_store::Error,
    },

    /// Reading or writing a local scratch file failed.
    #[error("scratch I/O failed at {path}: {source}")]
    Scratch {
        /// The scratch file or directory.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },

    /// The scratch space cannot hold the spill this job needs.
    #[error(
        "scratch space at {path} has {available_bytes} bytes free but this partition needs about \
         {needed_bytes}; give the function more ephemeral storage or a larger --scratch volume"
    )]
    ScratchFull {
        /// The scratch directory.
        path: PathBuf,
        /// Estimated bytes the job will write there.
        needed_bytes: u64,
        /// Bytes free on that file system.
        available_bytes: u64,
    },

    /// A Parquet file (input, run or output) could not be encoded or decoded.
    #[error("parquet error in {file}: {source}")]
    Parquet {
        /// The file concerned.
        file: String,
        /// The decoder's or encoder's error.
        #[source]
        source: parquet::errors::ParquetError,
    },

    /// Our own output could not be encoded: never the input's fault.
    #[error("cannot encode the {file}: {source} (internal error, please report)")]
    Encode {
        /// What was being encoded (the compacted output, its schema).
        file: String,
        /// The encoder's error.
        #[source]
        source: parquet::errors::ParquetError,
    },

    /// An Arrow kernel failed (cast, sort, interleave).
    #[error("arrow error while {context}: {source}")]
    Arrow {
        /// What the engine was doing.
        context: String,
        /// The kernel's error.
        #[source]
        source: arrow_schema::ArrowError,
    },

    /// A manifest could not be decoded.
    #[error("manifest {key} is unreadable: {message}")]
    Manifest {
        /// The manifest object key.
        key: String,
        /// What is wrong with it.
        message: String,
    },

    /// Another compactor committed first and our inputs are no longer live.
    #[error("commit conflict on {partition}: {message}")]
    Conflict {
        /// The partition.
        partition: String,
        /// What changed under us.
        message: String,
    },

    /// An earlier compacted output of the partition cannot be compacted again here (most often
    /// a smaller budget than the one that wrote it: too many columns, too large a page). It is
    /// never quarantined, since its rows are live only through it: the job fails and commits
    /// nothing, so it and the newer files all stay live.
    #[error(
        "the compacted file {file} cannot be compacted again with this job's memory budget: \
         {reason}; nothing was committed and every file of the partition stays live (give the \
         compactor more memory)"
    )]
    CompactedInput {
        /// The compacted file.
        file: String,
        /// Why it could not be read or merged.
        reason: String,
    },

    /// The runs of a fanned-out job hold more distinct leaf columns between them than the
    /// budget's leaf limit, and merging them would take more memory than the function has.
    /// The plan admits the inputs into one union within the limit, so only a file whose footer
    /// the plan could not read (refused or gone then) and its group could gets here. Nothing is
    /// committed.
    #[error(
        "the runs of the fanned-out job of {partition} hold {leaves} distinct leaf columns \
         between them, more than the {limit} the memory budget allows (each leaf holds a reader \
         and a writer); nothing was committed and every file stays live (give the compactor more \
         memory)"
    )]
    TooWide {
        /// The partition.
        partition: String,
        /// Distinct leaf columns of the runs.
        leaves: usize,
        /// The budget's leaf limit.
        limit: usize,
    },

    /// The job ran out of time before it could commit.
    #[error("deadline reached while compacting {partition}; nothing was committed")]
    Deadline {
        /// The partition.
        partition: String,
    },

    /// A call to another service (Step Functions, to start a fan-out) failed.
    #[error("{service} {operation} failed for {target}: {message}")]
    Service {
        /// The service.
        service: &'static str,
        /// The operation (`StartExecution`).
        operation: &'static str,
        /// What it was called on (a state machine's ARN).
        target: String,
        /// The service's own error.
        message: String,
    },

    /// The store refused to read every input of a partition (403: a KMS key or a bucket policy
    /// the function may not use). The function's own access is at fault, not the files, so none
    /// is quarantined and nothing is committed; the job fails and is retried.
    #[error(
        "the store refused to read every input of {partition} (e.g. {key}: {reason}); nothing \
         was quarantined or committed (grant the function read access to the partition's files)"
    )]
    AccessDenied {
        /// The partition.
        partition: String,
        /// One of the refused inputs.
        key: String,
        /// The store's reason for it.
        reason: String,
        /// Every refused input this attempt knows of (`key` among them).
        refused: Vec<String>,
    },

    /// A file asked to be released from quarantine is not a quarantined ingest file.
    #[error("{key} is not a quarantined ingest file of {partition}")]
    NotQuarantined {
        /// The key asked for.
        key: String,
        /// The partition, as `tenant=…/year=…/month=…/day=…/hour=…`.
        partition: String,
    },

    /// An internal invariant does not hold.
    #[error("internal error (please report): {message}")]
    Invariant {
        /// Which invariant broke.
        message: String,
    },
}

impl Error {
    /// The retry class of this error; exhaustive so every new variant needs a decision.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. }
            | Error::Partition { .. }
            | Error::Manifest { .. }
            | Error::NotQuarantined { .. } => ErrorKind::InvalidInput,
            Error::Store { source, .. } => match source {
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. } => ErrorKind::Conflict,
                object_store::Error::InvalidPath { .. }
                | object_store::Error::NotSupported { .. }
                | object_store::Error::NotImplemented { .. }
                | object_store::Error::UnknownConfigurationKey { .. } => ErrorKind::InvalidInput,
                _ => ErrorKind::Transient,
            },
            // A full scratch disk stays full on a retry: a larger /tmp or budget is the fix.
            Error::Scratch { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) || source.raw_os_error() == Some(libc::ENOSPC) =>
            {
                ErrorKind::ResourceExhausted
            }
            Error::Scratch { .. } => ErrorKind::Transient,
            Error::ScratchFull { .. }
            | Error::Deadline { .. }
            | Error::CompactedInput { .. }
            | Error::TooWide { .. } => ErrorKind::ResourceExhausted,
            Error::Parquet { .. } => ErrorKind::InvalidInput,
            Error::Arrow { .. } | Error::Invariant { .. } | Error::Encode { .. } => ErrorKind::Bug,
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::Service { .. } => ErrorKind::Transient,
            // Like a single refused request (`Error::Store`, above): access granted since, or
            // credentials that settled, let a retry succeed.
            Error::AccessDenied { .. } => ErrorKind::Transient,
        }
    }

    /// The objects this error names (an input, output or manifest key, every input the store
    /// refused), for counting the same failure again: empty when it names none.
    pub fn named_objects(&self) -> Vec<String> {
        match self {
            Error::Store { location, .. } => vec![location.clone()],
            Error::Parquet { file, .. } | Error::CompactedInput { file, .. } => vec![file.clone()],
            Error::Manifest { key, .. } | Error::NotQuarantined { key, .. } => vec![key.clone()],
            Error::AccessDenied { refused, .. } => refused.clone(),
            // Scratch files are local and named for their attempt: no object.
            Error::Config { .. }
            | Error::Scratch { .. }
            | Error::ScratchFull { .. }
            | Error::Partition { .. }
            | Error::Encode { .. }
            | Error::Arrow { .. }
            | Error::Conflict { .. }
            | Error::TooWide { .. }
            | Error::Deadline { .. }
            | Error::Service { .. }
            | Error::Invariant { .. } => Vec::new(),
        }
    }

    /// True when the error is the store's or the decoder's answer to reading the objects it
    /// names: a GET or HEAD that failed, a file that would not decode, inputs refused.
    pub fn is_read_failure(&self) -> bool {
        match self {
            Error::Store { operation, .. } => matches!(*operation, "get" | "head"),
            Error::Parquet { .. } | Error::AccessDenied { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn store(
        operation: &'static str,
        location: impl std::fmt::Display,
        source: object_store::Error,
    ) -> Self {
        Error::Store {
            operation,
            location: location.to_string(),
            source,
        }
    }

    pub(crate) fn scratch(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Scratch {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn arrow(context: impl Into<String>, source: arrow_schema::ArrowError) -> Self {
        Error::Arrow {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn parquet(file: impl Into<String>, source: parquet::errors::ParquetError) -> Self {
        Error::Parquet {
            file: file.into(),
            source,
        }
    }

    pub(crate) fn encode(file: impl Into<String>, source: parquet::errors::ParquetError) -> Self {
        Error::Encode {
            file: file.into(),
            source,
        }
    }

    pub(crate) fn invariant(message: impl Into<String>) -> Self {
        Error::Invariant {
            message: message.into(),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_say_whether_a_retry_helps() {
        let io = |kind| Error::scratch("/tmp/x", std::io::Error::from(kind));
        assert_eq!(
            io(std::io::ErrorKind::StorageFull).kind(),
            ErrorKind::ResourceExhausted
        );
        assert_eq!(
            Error::scratch("/tmp/x", std::io::Error::from_raw_os_error(libc::ENOSPC)).kind(),
            ErrorKind::ResourceExhausted
        );
        assert_eq!(
            io(std::io::ErrorKind::Interrupted).kind(),
            ErrorKind::Transient
        );
        let general = || parquet::errors::ParquetError::General("x".into());
        assert_eq!(
            Error::encode("compacted output", general()).kind(),
            ErrorKind::Bug
        );
        assert_eq!(
            Error::parquet("data/f.parquet", general()).kind(),
            ErrorKind::InvalidInput
        );
        let network = Error::store(
            "get",
            "k",
            object_store::Error::Generic {
                store: "S3",
                source: "timeout".into(),
            },
        );
        assert_eq!(network.kind(), ErrorKind::Transient);
        let invocation = InvocationError::from(Error::Deadline {
            partition: "p".into(),
        });
        assert_eq!(invocation.kind.name(), "ResourceExhausted");
        assert_eq!(
            serde_json::to_value(ErrorKind::InvalidInput).unwrap(),
            serde_json::json!("InvalidInput")
        );
        assert_eq!(ErrorKind::Transient.http_status(), 503);
        let refused = Error::AccessDenied {
            partition: "p".into(),
            key: "k".into(),
            reason: "403".into(),
            refused: vec!["k".into()],
        };
        assert_eq!(refused.kind(), ErrorKind::Transient);
    }
}
