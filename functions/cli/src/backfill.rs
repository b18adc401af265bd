//! `ourios-compact backfill`: schedule the partitions of an hour range (job records, as the
//! planner does) or compact them here, with a progress bar on stderr.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use chrono::Utc;
use ourios_compaction::Result;
use ourios_compaction::options::CompactOptions;
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::CompactionReport;
use ourios_compaction::serverless::dispatch::job_lifecycle::run_compaction_job;
use ourios_compaction::serverless::dispatch::{
    BackfillReport, OutcomeDecision, PartitionOutcome, backfill, backfill_partitions,
    partition_facts,
};
use ourios_compaction::serverless::events::BackfillRequest;
use ourios_compaction::serverless::readiness::ReadinessConfig;
use ourios_compaction::store::Store;
use serde::Serialize;

use crate::args::StoreArgs;

/// How to run a backfill.
pub struct BackfillRun {
    /// Least time between two job records.
    pub interval: Duration,
    /// Compact here with these options instead of scheduling.
    pub run_local: Option<CompactOptions>,
    /// Print JSON.
    pub json: bool,
}

/// The JSON answer: the library's report plus, with `--run-local`, each compaction's report.
#[derive(Serialize)]
struct Answer {
    #[serde(flatten)]
    report: BackfillReport,
    run_local: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    compactions: Vec<CompactionReport>,
}

/// Runs the subcommand.
pub async fn run_backfill(
    store_args: &StoreArgs,
    request: &BackfillRequest,
    run: &BackfillRun,
) -> Result<ExitCode> {
    let layout = store_args.key_layout()?;
    let store = Store::open(&store_args.store)?;
    let bar = ProgressBar::new(std::io::stderr().is_terminal());
    let answer = match &run.run_local {
        None => {
            let progress = |done, total| bar.show(done, total);
            let report = backfill(
                &store,
                &layout,
                request,
                Utc::now(),
                &ReadinessConfig::default(),
                run.interval,
                &progress,
            )
            .await?;
            Answer {
                report,
                run_local: false,
                compactions: Vec::new(),
            }
        }
        Some(options) => run_locally(&store, &layout, request, options, &bar).await?,
    };
    bar.finish();
    let failed = answer.compactions.iter().any(|r| !r.status.is_success());
    if run.json {
        println!(
            "{}",
            serde_json::to_string(&answer).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
    } else {
        print_text(&answer);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Compacts every partition of the range that has uncompacted files or pieces to merge, one
/// after another.
async fn run_locally(
    store: &Store,
    layout: &KeyLayout,
    request: &BackfillRequest,
    options: &CompactOptions,
    bar: &ProgressBar,
) -> Result<Answer> {
    let partitions = backfill_partitions(store, layout, request).await?;
    let mut report = BackfillReport {
        considered: partitions.len(),
        dry_run: request.dry_run,
        complete: true,
        ..Default::default()
    };
    let mut compactions = Vec::new();
    for (i, partition) in partitions.iter().enumerate() {
        // Asked for: the pieces of an hour too, not only its uncompacted files.
        let (facts, _) = partition_facts(store, layout, partition, true).await?;
        if facts.has_work() {
            let mut outcome = PartitionOutcome {
                tenant: partition.tenant().map(str::to_string),
                hour: partition.hour_label(),
                decision: OutcomeDecision::WouldCompact,
                reason: format!(
                    "{} uncompacted file(s), {} bytes",
                    facts.num_uncompacted_files, facts.uncompacted_bytes
                ),
                job_id: None,
                error_kind: None,
                late: None,
            };
            if !request.dry_run {
                // The job runner also ends any job record (a scheduled job this run did).
                let compaction = run_compaction_job(
                    store,
                    layout,
                    partition,
                    options,
                    &ReadinessConfig::default(),
                )
                .await?
                .report;
                outcome.decision = OutcomeDecision::Compaction(compaction.status);
                outcome.job_id = Some(compaction.attempt_id.clone());
                compactions.push(compaction);
            }
            report.scheduled += 1;
            report.partitions.push(outcome);
        }
        bar.show(i + 1, partitions.len());
    }
    Ok(Answer {
        report,
        run_local: true,
        compactions,
    })
}

fn print_text(answer: &Answer) {
    for p in &answer.report.partitions {
        let partition = match &p.tenant {
            Some(tenant) => format!("{tenant} {}", p.hour),
            None => p.hour.clone(),
        };
        println!("{partition}  {:<16} {}", p.decision, p.reason);
    }
    let verb = match (answer.run_local, answer.report.dry_run) {
        (true, false) => "compacted",
        (false, false) => "scheduled",
        (_, true) => "would schedule",
    };
    println!(
        "{verb} {} of {} partition(s) considered",
        answer.report.scheduled, answer.report.considered
    );
}

/// A one-line progress bar on stderr, drawn only on a terminal.
struct ProgressBar {
    enabled: bool,
}

impl ProgressBar {
    const WIDTH: usize = 30;

    fn new(enabled: bool) -> Self {
        Self { enabled }
    }

    fn show(&self, done: usize, total: usize) {
        if !self.enabled {
            return;
        }
        let filled = Self::WIDTH * done / total.max(1);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rbackfill [{}{}] {done}/{total} partitions",
            "#".repeat(filled),
            ".".repeat(Self::WIDTH - filled)
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.enabled {
            eprintln!();
        }
    }
}
