//! One function per subcommand: parse arguments into domain values, call the library, print.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ourios_compaction::bench::generate::{GenerateSpec, generate_partition};
use ourios_compaction::budget::Budget;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::manifest::gc::{GcReport, GcScope, collect_garbage, collect_garbage_in};
use ourios_compaction::manifest::symlink::write_symlink;
use ourios_compaction::manifest::{
    PartitionFiles, hours_files, partition_files, release_quarantined,
};
use ourios_compaction::object_key::ObjectKey;
use ourios_compaction::options::JobMode;
use ourios_compaction::options::{DEFAULT_GC_GRACE, Progress};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::read::inspect::inspect_object;
use ourios_compaction::read::query::{WindowQuery, query_window};
use ourios_compaction::report::CompactionReport;
use ourios_compaction::serverless::dispatch::late_policy_mode;
use ourios_compaction::serverless::function_settings::DEFAULT_BACKFILL_INTERVAL;
use ourios_compaction::settings::{CompactSettings, process_env};
use ourios_compaction::store::Store;
use ourios_compaction::{Error, Result};

use crate::args::{
    BackfillArgs, BenchArgs, BenchRangesArgs, Command, CompactArgs, CostArgs, FilesArgs, GcArgs,
    GenerateArgs, PartitionArgs, QueryArgs, ReleaseArgs, StoreArgs, SymlinksArgs,
};

/// Runs one subcommand; the exit code says whether it succeeded.
pub async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compact(args) => compact(args).await,
        Command::Files(args) => files(args).await,
        Command::Symlinks(args) => symlinks(args).await,
        Command::Release(args) => release(args).await,
        Command::Generate(args) => generate(args).await,
        Command::Inspect { file, json } => inspect(&file, json).await,
        Command::Gc(args) => gc(args).await,
        Command::Query(args) => query(args).await,
        Command::Backfill(args) => backfill(args).await,
        Command::Demo { store } => crate::demo::run_demo(&store).await,
        Command::Bench { bench, cost } => run_bench(&bench, &cost).await,
        Command::BenchRanges(args) => bench_ranges(args).await,
    }
}

/// `compact`: one partition, with a progress line on a terminal.
async fn compact(args: CompactArgs) -> Result<ExitCode> {
    let (store, layout, partition) = open(&args.store, &args.partition)?;
    let mut options = args.settings.settings(&process_env)?.options(None);
    options.keys = args.store.key_columns()?;
    if let Some(config) = args.late.readiness(&process_env)? {
        let now = chrono::Utc::now();
        let (mode, verdict) = late_policy_mode(&store, &layout, &partition, now, &config).await?;
        if let Some(verdict) = verdict {
            eprintln!("late files: {verdict}");
        }
        options.mode = Some(mode);
    }
    let show_progress = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    if show_progress {
        options.progress = Some(progress_line(&partition));
    }
    let report = compact_partition(&store, &layout, &partition, &options).await;
    if show_progress {
        eprintln!();
    }
    let report = report?;
    print_report(&report, args.json);
    Ok(exit_for(&report))
}

/// `files`: the live, quarantined and unaddressable files of a partition, or of every
/// partition of a range of hours (one tenant's or every tenant's).
async fn files(args: FilesArgs) -> Result<ExitCode> {
    let layout = args.store.key_layout()?;
    let store = Store::open(&args.store.store)?;
    let (from, to) = match (&args.hour, &args.from, &args.to) {
        (Some(hour), _, _) => (hour.as_str(), hour.as_str()),
        (None, Some(from), Some(to)) => (from.as_str(), to.as_str()),
        _ => {
            return Err(Error::Config {
                message: "files needs --hour H, or --from H and --to H".into(),
            });
        }
    };
    let one = match (&args.tenant, &args.hour) {
        (tenant, Some(hour)) if tenant.is_some() || !layout.has_tenant() => {
            Some(layout.partition(tenant.as_deref(), hour)?)
        }
        _ => None,
    };
    let partitions = match &one {
        Some(partition) => {
            let files = partition_files(&store, &layout, partition).await?;
            vec![(partition.clone(), files)]
        }
        None => hours_files(&store, &layout, args.tenant.as_deref(), from, to).await?,
    };
    let urls: Vec<serde_json::Value> = (partitions.iter())
        .flat_map(|(_, files)| &files.files)
        .map(|f| serde_json::json!({"url": store.url_of(&f.key), "bytes": f.bytes, "sorted": f.sorted}))
        .collect();
    if args.urls {
        for url in &urls {
            println!("{}", url["url"].as_str().unwrap_or_default());
        }
    } else if args.json {
        let all = |field: fn(&PartitionFiles) -> Vec<serde_json::Value>| -> Vec<serde_json::Value> {
            partitions
                .iter()
                .flat_map(|(_, files)| field(files))
                .collect()
        };
        let mut json = serde_json::json!({
            "live": all(|f| f.live.iter().map(|k| serde_json::json!(k)).collect()),
            "urls": urls,
            "quarantined": all(|f| f.quarantined.iter().map(|q| serde_json::json!(q)).collect()),
            "unaddressable": all(|f| f.unaddressable.iter().map(|k| serde_json::json!(k)).collect()),
        });
        match (&one, partitions.first()) {
            (Some(_), Some((_, files))) => json["manifest_version"] = files.manifest_version.into(),
            _ => {
                let listed: Vec<_> = (partitions.iter())
                    .map(|(p, f)| serde_json::json!({"tenant": p.tenant(), "hour": p.hour_label(), "manifest_version": f.manifest_version, "live": f.live.len()}))
                    .collect();
                json["partitions"] = listed.into();
            }
        }
        println!("{json}");
    } else {
        for (_, files) in &partitions {
            for key in &files.live {
                println!("{key}");
            }
            for q in &files.quarantined {
                println!("quarantined: {} ({})", q.key, q.reason);
            }
            for key in &files.unaddressable {
                println!("unaddressable: {key:?} (rename it to compact it)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `symlinks`: the symlink manifests of a range of hours rewritten from their live sets.
async fn symlinks(args: SymlinksArgs) -> Result<ExitCode> {
    let layout = args.store.key_layout()?;
    let store = Store::open(&args.store.store)?;
    let partitions = hours_files(
        &store,
        &layout,
        args.tenant.as_deref(),
        &args.from,
        &args.to,
    )
    .await?;
    let mut written = Vec::with_capacity(partitions.len());
    for (partition, _) in &partitions {
        let outcome = write_symlink(&store, &layout, partition).await?;
        if !args.json {
            println!("{partition}: {}", to_json(&outcome).trim_matches('"'));
        }
        written.push(serde_json::json!({"tenant": partition.tenant(), "hour": partition.hour_label(), "symlink": outcome}));
    }
    if args.json {
        println!("{}", serde_json::json!({ "partitions": written }));
    }
    Ok(ExitCode::SUCCESS)
}

/// `release`: quarantined files back into the live set.
async fn release(args: ReleaseArgs) -> Result<ExitCode> {
    let (store, layout, partition) = open(&args.store, &args.partition)?;
    let now_ms = ourios_compaction::clock::SystemClock::shared().now_ms();
    let released = release_quarantined(&store, &layout, &partition, &args.keys, now_ms).await?;
    if args.json {
        println!("{}", to_json(&released));
    } else if released.released.is_empty() {
        println!("nothing quarantined to release in {}", released.partition);
    } else {
        for q in &released.released {
            println!("released: {} (was: {})", q.key, q.reason);
        }
        println!(
            "manifest version {}: compact the partition to merge them",
            released.manifest_version
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `generate`: synthetic ingest files.
async fn generate(args: GenerateArgs) -> Result<ExitCode> {
    let (store, layout, partition) = open(&args.store, &args.partition)?;
    let spec = GenerateSpec {
        files: args.files,
        rows_per_file: args.rows,
        services: args.services,
        seed: args.seed,
        wide: args.wide,
    };
    let report = generate_partition(&store, &layout, &partition, &spec).await?;
    if args.json {
        println!("{}", to_json(&report));
    } else {
        println!(
            "wrote {} files, {} rows, {} bytes into {}",
            report.keys.len(),
            report.rows,
            report.bytes,
            layout.ingest_dir(&partition)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `inspect`: a file's footer.
async fn inspect(file: &str, json: bool) -> Result<ExitCode> {
    let (store, key) = open_file(file)?;
    let summary = inspect_object(&store, key.location(), &Default::default()).await?;
    if json {
        println!("{}", to_json(&summary));
    } else {
        print!("{}", summary.render_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// `gc`: one partition, or every partition of the tenant(s) and hour(s).
async fn gc(args: GcArgs) -> Result<ExitCode> {
    let GcArgs {
        store,
        tenant,
        hour,
        grace,
        dry_run,
        json,
    } = args;
    let grace = grace.unwrap_or(DEFAULT_GC_GRACE);
    let one_partition = tenant.is_some() || !store.key_layout()?.has_tenant();
    let reports = match (tenant, hour) {
        (tenant, Some(hour)) if one_partition => {
            let (store, layout, partition) = open(&store, &PartitionArgs { tenant, hour })?;
            let report = collect_garbage(&store, &layout, &partition, grace, dry_run).await?;
            if json {
                println!("{}", to_json(&report));
            }
            vec![report]
        }
        (tenant, hour) => {
            let layout = store.key_layout()?;
            let store = Store::open(&store.store)?;
            let scope = GcScope { tenant, hour };
            let summary = collect_garbage_in(&store, &layout, &scope, grace, dry_run).await?;
            if json {
                println!("{}", to_json(&summary));
            }
            summary.partitions
        }
    };
    if !json {
        print_gc(&reports, dry_run);
    }
    Ok(ExitCode::SUCCESS)
}

/// `query`: one tenant's rows of a window.
async fn query(args: QueryArgs) -> Result<ExitCode> {
    let layout = args.store.key_layout()?;
    let store = Store::open(&args.store.store)?;
    let query = WindowQuery {
        tenant: args.tenant,
        service: args.service,
        from_nanos: parse_instant(&args.from)?,
        to_nanos: parse_instant(&args.to)?,
        limit: args.limit,
        filters: (args.filters.iter())
            .map(|raw| ourios_compaction::read::column_filter::ColumnFilter::parse(raw))
            .collect::<Result<_>>()?,
    };
    let keys = args.store.key_columns()?;
    let result = query_window(&store, &layout, &keys, &query).await?;
    let hidden = result.stats.quarantined_files + result.stats.unaddressable_files;
    if hidden > 0 {
        eprintln!(
            "warning: {hidden} file(s) of the window's partitions are quarantined or \
             unaddressable; their rows are not in this answer (see `files`)"
        );
    }
    if args.json {
        let rows = rows_json(&result.rows)?;
        println!(
            "{}",
            serde_json::json!({"rows": rows, "stats": result.stats})
        );
    } else {
        if !result.rows.is_empty() {
            let table = arrow_cast::pretty::pretty_format_batches(&result.rows).map_err(|e| {
                Error::Config {
                    message: format!("cannot print rows: {e}"),
                }
            })?;
            println!("{table}");
        }
        println!("{}", to_json(&result.stats));
    }
    Ok(ExitCode::SUCCESS)
}

/// `backfill`: schedule or compact the partitions of an hour range.
async fn backfill(args: BackfillArgs) -> Result<ExitCode> {
    let request = ourios_compaction::serverless::events::BackfillRequest {
        tenants: (!args.tenants.is_empty()).then_some(args.tenants),
        from: args.from,
        to: args.to,
        dry_run: args.dry_run,
    };
    let keys = args.store.key_columns()?;
    let run = crate::backfill::BackfillRun {
        interval: args.interval.unwrap_or(DEFAULT_BACKFILL_INTERVAL),
        run_local: (args.run_local)
            .then(|| {
                args.settings.settings(&process_env).map(|s| {
                    let mut options = s.options(None);
                    options.keys = keys;
                    // A function never takes this run's uploads for a killed attempt's.
                    options.local_attempt = true;
                    // Asked for: late files are merged, whatever a job record says.
                    options.mode = Some(JobMode::Merge);
                    options
                })
            })
            .transpose()?,
        json: args.json,
    };
    crate::backfill::run_backfill(&args.store, &request, &run).await
}

/// `bench`: the environment's settings, with the benchmark's store, scratch and budget.
async fn run_bench(bench: &BenchArgs, cost: &CostArgs) -> Result<ExitCode> {
    let mut settings = CompactSettings::from_lookup(&process_env)?;
    cost.apply(&mut settings);
    settings.scratch_dir = bench.store.join(".scratch");
    settings.budget_bytes = bench.budget.or(Budget::DEFAULT).bytes();
    crate::demo::run_bench(bench, &settings.options(None)).await
}

/// `bench-ranges`: the range requests of each block layout.
async fn bench_ranges(args: BenchRangesArgs) -> Result<ExitCode> {
    let ranges = crate::ranges::RangeBench {
        base: &args.bench,
        blocks: args.blocks,
        max_rows: args.max_rows,
        row_group_bytes: args.row_group_bytes,
        get_latency: args.get_latency.unwrap_or_default(),
        get_bandwidth: args.get_bandwidth,
    };
    crate::ranges::run_range_bench(&ranges).await
}

fn open(store: &StoreArgs, partition: &PartitionArgs) -> Result<(Store, KeyLayout, PartitionId)> {
    let layout = store.key_layout()?;
    let partition = layout.partition(partition.tenant.as_deref(), &partition.hour)?;
    Ok((Store::open(&store.store)?, layout, partition))
}

/// Splits a file argument into the store holding it and its key.
fn open_file(file: &str) -> Result<(Store, ObjectKey)> {
    if let Some(rest) = file.strip_prefix("s3://") {
        let (bucket, key) = rest.split_once('/').ok_or_else(|| Error::Config {
            message: format!("{file:?} should be s3://bucket/key.parquet"),
        })?;
        return Ok((
            Store::open(&format!("s3://{bucket}"))?,
            ObjectKey::parse(key)?,
        ));
    }
    let path = match file.strip_prefix("file://") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(file),
    };
    let path = std::fs::canonicalize(&path).map_err(|e| Error::Config {
        message: format!("cannot open {file}: {e}"),
    })?;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::Config {
            message: format!("{file} is not a file"),
        });
    };
    let store = Store::open(&dir.to_string_lossy())?;
    Ok((store, ObjectKey::parse(&name.to_string_lossy())?))
}

/// A progress line on stderr for the compaction of `partition`, redrawn at most twice a second.
fn progress_line(partition: &ourios_compaction::partition::PartitionId) -> Progress {
    let label = partition.label();
    let last = std::sync::Mutex::new(None::<Instant>);
    Progress(std::sync::Arc::new(move |rows, total_rows| {
        if let Ok(mut last) = last.lock()
            && (last.is_none_or(|t| t.elapsed() >= Duration::from_millis(500))
                || rows == total_rows)
        {
            *last = Some(Instant::now());
            let pct = rows as f64 * 100.0 / total_rows.max(1) as f64;
            eprint!("\rcompacting {label}: {rows}/{total_rows} rows read ({pct:.0}%)");
        }
    }))
}

fn print_gc(reports: &[GcReport], dry_run: bool) {
    let verb = if dry_run { "would delete" } else { "deleted" };
    for report in reports {
        for key in report
            .plan
            .retired
            .iter()
            .chain(&report.plan.orphans)
            .chain(&report.plan.manifests)
        {
            println!("{verb} {key}");
        }
        println!(
            "{verb} {} objects in {}",
            report.plan.len(),
            report.partition
        );
    }
    if reports.is_empty() {
        println!("no partitions found");
    }
}

/// Nanoseconds since the epoch of an RFC 3339 instant.
fn parse_instant(raw: &str) -> Result<i64> {
    chrono::DateTime::parse_from_rfc3339(raw)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .ok_or_else(|| Error::Config {
            message: format!("{raw:?} is not an RFC 3339 instant such as 2026-11-29T10:20:00Z"),
        })
}

/// Rows as JSON objects, one per row.
fn rows_json(batches: &[arrow_array::RecordBatch]) -> Result<serde_json::Value> {
    let mut writer = arrow_json::ArrayWriter::new(Vec::new());
    let refs: Vec<&arrow_array::RecordBatch> = batches.iter().collect();
    writer
        .write_batches(&refs)
        .and_then(|()| writer.finish())
        .map_err(|e| Error::Config {
            message: format!("cannot render rows as JSON: {e}"),
        })?;
    let bytes = writer.into_inner();
    if bytes.is_empty() {
        return Ok(serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_slice(&bytes).map_err(|e| Error::Config {
        message: format!("cannot render rows as JSON: {e}"),
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn print_report(report: &CompactionReport, json: bool) {
    if json {
        println!("{}", to_json(report));
        return;
    }
    let status = serde_json::to_value(report.status).unwrap_or_default();
    println!("{} {}", report.partition, status.as_str().unwrap_or("?"));
    println!(
        "  inputs: {} files, {} rows, {} bytes",
        report.inputs.files, report.inputs.rows, report.inputs.bytes
    );
    if let Some(out) = &report.output {
        println!(
            "  output: {} ({} rows, {} bytes, {} row groups)",
            out.key, out.rows, out.bytes, out.row_groups
        );
    }
    println!(
        "  budget {} B, threshold {} B, runs spilled {}, merge passes {}, peak decoded {} B, peak RSS {} B, {} ms",
        report.budget_bytes,
        report.row_group_bytes,
        report.runs_spilled,
        report.merge_passes,
        report.peak_decoded_bytes,
        report.peak_rss_bytes,
        report.duration_ms
    );
    let (cost, requests) = (&report.cost, &report.cost.requests);
    println!(
        "  CPU {} ms; cost ${:.8} (${:.6} per GB of input): {:.3} GB-s, {} GET, {} PUT, {} LIST, {} DELETE",
        report.cpu_ms,
        cost.usd,
        cost.usd_per_gb,
        cost.lambda_gb_seconds,
        requests.get,
        requests.put,
        requests.list,
        requests.delete
    );
    for q in &report.quarantined {
        println!("  quarantined {}: {}", q.file, q.reason);
    }
    for o in &report.oversized {
        println!(
            "  left live {}: sorting it needs {} bytes of scratch, a task has {}; give --scratch more room",
            o.file, o.scratch_needed_bytes, o.scratch_bytes
        );
    }
    for key in &report.unaddressable {
        println!("  unaddressable {key:?}: the store cannot address it; rename it to compact it");
    }
    if let Some(e) = &report.error {
        eprintln!("error: {e}");
    }
}

fn exit_for(report: &CompactionReport) -> ExitCode {
    if report.status.is_success() {
        ExitCode::SUCCESS
    } else {
        if let Some(e) = &report.error {
            eprintln!("error: {e}");
        }
        ExitCode::FAILURE
    }
}
