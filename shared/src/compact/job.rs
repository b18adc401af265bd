//! The job: what its steps share, and the job run under its report, from its start to its end.
//! Every request of the steps goes through a counting store; when they succeed the partition's
//! garbage is collected past the grace period (step 6); and the report prices the job's
//! requests with its duration and CPU time (`cost`, `cpu_ms`).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::cost::RequestCounts;
use crate::error::{Error, Result};
use crate::gauge::MemoryGauge;
use crate::manifest::PartitionFiles;
use crate::manifest::gc::{collect_garbage_with, mark_garbage};
use crate::manifest::symlink::{SymlinkSeen, write_symlink, write_symlink_from};
use crate::options::CompactOptions;
use crate::partition::{KeyLayout, PartitionId, gc_due_key};
use crate::report::{CompactionReport, Status};
use crate::sort::resources::{peak_rss_bytes, process_cpu_time};
use crate::store::Store;

/// What one job works with, shared by its tasks.
pub(crate) struct JobContext<'a> {
    pub(crate) store: &'a Store,
    pub(crate) layout: &'a KeyLayout,
    pub(crate) partition: &'a PartitionId,
    pub(crate) options: &'a CompactOptions,
    pub(crate) gauge: &'a MemoryGauge,
    pub(crate) attempt_id: &'a str,
    pub(crate) garbage_mark: &'a GarbageMark,
}

impl JobContext<'_> {
    /// Marks the partition as holding garbage due once the grace has passed
    /// ([`mark_garbage`]), once per job: its later uploads and its commit find it marked (GC
    /// keeps the marker while the job's directory or its outputs are there). Notes when, for
    /// step 6.
    pub(crate) async fn mark_garbage(&self) -> Result<()> {
        if self.garbage_mark.written_at().is_some() {
            return Ok(());
        }
        let started = self.options.clock.monotonic_ms();
        mark_garbage(self.store, self.partition).await?;
        self.garbage_mark.note(started);
        Ok(())
    }
}

/// When a job wrote its partition's garbage-due marker, on its monotonic clock (shared by its
/// tasks; written once).
#[derive(Debug, Clone, Default)]
pub(crate) struct GarbageMark(Arc<OnceLock<u64>>);

impl GarbageMark {
    fn note(&self, started_ms: u64) {
        // A task that marked at the same time keeps its own, as early: either serves.
        let _ = self.0.set(started_ms);
    }

    fn written_at(&self) -> Option<u64> {
        self.0.get().copied()
    }
}

/// The live set a job's commit made, known without reading the state again, and the symlink
/// manifest as the job read it before its state: what the symlink manifest is written from
/// (`manifest::symlink`).
pub(crate) struct CommittedLiveSet {
    pub(crate) symlink: SymlinkSeen,
    pub(crate) files: PartitionFiles,
}

impl CommittedLiveSet {
    /// The live set `files` with the symlink manifest read before the state, when both are
    /// known.
    pub(crate) fn of(symlink: Option<SymlinkSeen>, files: Option<PartitionFiles>) -> Option<Self> {
        Some(CommittedLiveSet {
            symlink: symlink?,
            files: files?,
        })
    }
}

/// A job under way, from its start to its report: the counting store its steps go through,
/// its id, its memory gauge and its clocks.
pub(crate) struct JobRun<'a> {
    layout: &'a KeyLayout,
    partition: &'a PartitionId,
    options: &'a CompactOptions,
    store: Store,
    attempt_id: String,
    gauge: MemoryGauge,
    garbage_mark: GarbageMark,
    started: Instant,
    cpu_started: Duration,
    requests_before: RequestCounts,
}

impl<'a> JobRun<'a> {
    /// Starts a job under `options` (validated; `Err` only when they are not): its requests
    /// counted and its time taken from here, its report begun.
    pub(crate) fn start(
        store: &Store,
        layout: &'a KeyLayout,
        partition: &'a PartitionId,
        options: &'a CompactOptions,
    ) -> Result<(Self, CompactionReport)> {
        options.validate()?;
        let started = Instant::now();
        let cpu_started = process_cpu_time();
        let store = store.counting_requests();
        let requests_before = store.request_counts();
        let attempt_id = options
            .attempt_id
            .clone()
            .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()));
        let mut report = CompactionReport::new(&partition.relative_dir(), &attempt_id);
        report.budget_bytes = options.settings.budget_bytes;
        let gauge = MemoryGauge::new();
        let run = JobRun {
            layout,
            partition,
            options,
            store,
            attempt_id,
            gauge,
            garbage_mark: GarbageMark::default(),
            started,
            cpu_started,
            requests_before,
        };
        Ok((run, report))
    }

    /// What the job's steps work with.
    pub(crate) fn context(&self) -> JobContext<'_> {
        JobContext {
            store: &self.store,
            layout: self.layout,
            partition: self.partition,
            options: self.options,
            gauge: &self.gauge,
            attempt_id: &self.attempt_id,
            garbage_mark: &self.garbage_mark,
        }
    }

    /// Ends the job with what its steps gave: an error that left nothing committed is reported
    /// as `failed`, `timeout` or `conflict`; a commit's live set goes to the symlink manifest
    /// (from the committed live set when the steps know it, else read again); on success the
    /// partition's garbage is collected (step 6); and the report is priced and logged.
    pub(crate) async fn finish(
        self,
        result: Result<Option<CommittedLiveSet>>,
        mut report: CompactionReport,
    ) -> CompactionReport {
        let JobRun {
            layout,
            partition,
            options,
            store,
            gauge,
            garbage_mark,
            started,
            cpu_started,
            requests_before,
            ..
        } = self;
        let store = &store;
        let live = match result {
            Ok(live) => live,
            Err(e) => {
                report_failure(&mut report, e, partition);
                None
            }
        };
        // A commit changed the live set: the symlink manifest follows (before GC, which
        // rewrites it itself before deleting what it listed).
        let committed = matches!(report.status, Status::Compacted | Status::Partial)
            || (report.status.is_success() && !report.quarantined.is_empty());
        if committed {
            let written = match live {
                Some(live) => {
                    write_symlink_from(store, layout, partition, &live.symlink, &live.files).await
                }
                None => write_symlink(store, layout, partition).await,
            };
            if let Err(e) = written {
                tracing::warn!(partition = %partition, error = %e, "could not rewrite the symlink manifest; the next commit, event or GC does");
            }
        }
        let marked_at = garbage_mark.written_at();
        if report.status.is_success()
            && garbage_may_be_due(store, partition, options, marked_at).await
        {
            let gc = collect_garbage_with(
                store,
                layout,
                partition,
                options.settings.gc_grace,
                false,
                &options.clock,
            );
            match gc.await {
                Ok(gc) => report.gc_deleted = gc.deleted,
                Err(e) => {
                    tracing::warn!(partition = %partition, error = %e, "garbage collection failed")
                }
            }
        }
        report.peak_decoded_bytes = gauge.peak();
        report.decoded_bytes_at_end = gauge.current();
        report.peak_rss_bytes = peak_rss_bytes();
        report.duration_ms = started.elapsed().as_millis() as u64;
        report.cpu_ms = process_cpu_time().saturating_sub(cpu_started).as_millis() as u64;
        let requests = store.request_counts().since(&requests_before);
        report.price(
            &options.settings.prices,
            options.settings.function_memory_mb,
            requests,
        );
        tracing::info!(
            partition = %report.partition,
            attempt_id = %report.attempt_id,
            status = ?report.status,
            rows = report.inputs.rows,
            files = report.inputs.files,
            runs_spilled = report.runs_spilled,
            duration_ms = report.duration_ms,
            cpu_ms = report.cpu_ms,
            usd = report.cost.usd,
            "compaction finished"
        );
        report
    }
}

/// Reports `e`, an error that left nothing committed, as `failed`, `timeout` or `conflict`.
fn report_failure(report: &mut CompactionReport, e: Error, partition: &PartitionId) {
    report.error_kind = Some(e.kind());
    report.error_objects = (e.named_objects(), e.is_read_failure());
    report.did_not_fit = matches!(e, Error::ScratchFull { .. });
    report.status = match e {
        Error::Deadline { .. } => Status::Timeout,
        Error::Conflict { .. } => Status::Conflict,
        _ => Status::Failed,
    };
    report.error = Some(match e {
        Error::Deadline { .. } => Error::Deadline {
            partition: partition.to_string(),
        }
        .to_string(),
        other => other.to_string(),
    });
}

/// Whether step 6 may find garbage due: always without a grace; otherwise when the
/// partition's garbage-due marker is older than the grace on this host's clock. Skipping
/// deletes nothing: a skewed clock only leaves the garbage to the sweep's GC job, or lets
/// GC, which dates everything by the store, find nothing due. One HEAD instead of GC's
/// listings and manifest reads after most commits, whose inputs are not due yet, and none
/// when the job wrote the marker itself (`marked_at`) less than the grace ago: it replaced
/// any older one.
async fn garbage_may_be_due(
    store: &Store,
    partition: &PartitionId,
    options: &CompactOptions,
    marked_at: Option<u64>,
) -> bool {
    let grace = options.settings.gc_grace;
    if grace.is_zero() {
        return true;
    }
    let since_marked = marked_at.map(|at| options.clock.monotonic_ms().saturating_sub(at));
    if since_marked.is_some_and(|ms| u128::from(ms) < grace.as_millis()) {
        return false;
    }
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    match store.head_if_present(&gc_due_key(partition)).await {
        Ok(Some(marker)) => {
            marker
                .last_modified
                .timestamp_millis()
                .saturating_add(grace_ms)
                <= options.clock.now_ms()
        }
        Ok(None) => false,
        // GC reads the marker again and reports what fails.
        Err(_) => true,
    }
}
