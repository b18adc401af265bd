//! `demo` and `bench`: the main job end to end on a local directory, and its measurement.

use std::path::Path as FsPath;
use std::process::ExitCode;
use std::time::Instant;

use ourios_compaction::bench::baseline::rewrite_plain;
use ourios_compaction::bench::generate::{GenerateSpec, generate_partition, service_names};
use ourios_compaction::compact::compact_partition;
use ourios_compaction::cost::{
    JobCost, ONE_VCPU_FUNCTION_MB, RequestCounts, S3_TABLES_BINPACK, S3_TABLES_SORT,
};
use ourios_compaction::manifest::partition_files;
use ourios_compaction::options::{CompactOptions, KeyColumns};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::read::query::{WindowQuery, query_window};
use ourios_compaction::sort::resources::process_cpu_time;
use ourios_compaction::store::Store;
use ourios_compaction::{Error, Result};

use crate::args::BenchArgs;
use crate::ranges::median;
use crate::table::{Cell, Table};

const MARKER: &str = ".ourios-demo-store";

/// Creates (or resets) a directory store that only this tool writes to.
pub(crate) fn fresh_store(dir: &FsPath) -> Result<Store> {
    if dir.exists() {
        let is_ours = dir.join(MARKER).exists();
        let is_empty = std::fs::read_dir(dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !is_ours && !is_empty {
            return Err(Error::Config {
                message: format!(
                    "{} exists and is not a store made by this tool; pick another --store",
                    dir.display()
                ),
            });
        }
        std::fs::remove_dir_all(dir).map_err(|e| Error::Config {
            message: format!("cannot reset {}: {e}", dir.display()),
        })?;
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Config {
        message: format!("cannot create {}: {e}", dir.display()),
    })?;
    std::fs::write(dir.join(MARKER), b"made by ourios-compact demo/bench\n").map_err(|e| {
        Error::Config {
            message: format!("cannot write in {}: {e}", dir.display()),
        }
    })?;
    Store::open(&dir.to_string_lossy())
}

/// What a one-service window query reads on a partition right now.
struct Shape {
    files: usize,
    row_groups: u64,
    scanned: u64,
    bytes_read: u64,
    requests: u64,
}

async fn shape(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    window: &WindowQuery,
) -> Result<Shape> {
    let files = partition_files(store, layout, partition).await?;
    let result = query_window(store, layout, &KeyColumns::default(), window).await?;
    Ok(Shape {
        files: files.live.len(),
        row_groups: result.stats.row_groups_total,
        scanned: result.stats.row_groups_scanned,
        bytes_read: result.stats.bytes_read,
        requests: result.stats.requests,
    })
}

/// A one-service window over minutes 20-30 of the partition's hour, counting only.
pub(crate) fn window_for(partition: &PartitionId, service: &str) -> WindowQuery {
    let (start, _) = partition.time_range_nanos();
    WindowQuery {
        tenant: partition.tenant().map(str::to_string),
        service: Some(service.to_string()),
        from_nanos: start + 20 * 60 * 1_000_000_000,
        to_nanos: start + 30 * 60 * 1_000_000_000,
        limit: 0,
        filters: Vec::new(),
    }
}

/// Generates three partitions, compacts them and shows what changed.
pub async fn run_demo(dir: &FsPath) -> Result<ExitCode> {
    let store = fresh_store(dir)?;
    let layout = KeyLayout::default();
    let partitions = [
        ("acme", "2026-11-29T10", 1),
        ("acme", "2026-11-29T11", 2),
        ("globex", "2026-11-29T10", 3),
    ];
    let services = service_names(16);
    let service = services.get(5).cloned().unwrap_or_default();
    println!("demo store: {}", dir.display());
    println!("generating 3 partitions of 24 unsorted ingest files x 5,000 rows, 16 services ...");
    println!();
    let mut table = Table::new(&[
        "partition",
        "files",
        "row groups",
        "groups read",
        "bytes read",
        "requests",
        "status",
    ]);
    for (tenant, hour, seed) in partitions {
        let partition = PartitionId::parse(tenant, hour)?;
        let spec = GenerateSpec {
            files: 24,
            rows_per_file: 5_000,
            services: 16,
            seed,
            wide: false,
        };
        generate_partition(&store, &layout, &partition, &spec).await?;
        let window = window_for(&partition, &service);
        let before = shape(&store, &layout, &partition, &window).await?;
        let scratch = dir.join(".scratch");
        let options = CompactOptions::new(&scratch);
        let report = compact_partition(&store, &layout, &partition, &options).await?;
        let after = shape(&store, &layout, &partition, &window).await?;
        let status = serde_json::to_value(report.status).unwrap_or_default();
        table.push(vec![
            Cell::Text(partition.relative_dir()),
            Cell::change(before.files, after.files),
            Cell::change(before.row_groups, after.row_groups),
            Cell::change(before.scanned, after.scanned),
            Cell::change(before.bytes_read, after.bytes_read),
            Cell::change(before.requests, after.requests),
            Cell::Text(status.as_str().unwrap_or("?").to_string()),
        ]);
    }
    for line in table.lines() {
        println!("{line}");
    }
    println!();
    println!(
        "Columns 4-6: what the query for service {service:?} over minutes 20-30 of the hour reads,"
    );
    println!(
        "before -> after: row groups left after pruning, bytes and GET requests sent to the store."
    );
    let example = PartitionId::parse("acme", "2026-11-29T10")?;
    if let Some(key) = partition_files(&store, &layout, &example)
        .await?
        .live
        .first()
    {
        println!(
            "Inspect a compacted file:  ourios-compact inspect {}/{key}",
            dir.display()
        );
    }
    println!(
        "Query it:                  ourios-compact query --store {} --tenant acme --service {service} \\\n                             --from 2026-11-29T10:20:00Z --to 2026-11-29T10:30:00Z",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Sorted compaction versus a plain rewrite of the same partition, side by side, and what
/// each costs per GB on Lambda next to S3 Tables' managed compaction, with `options` (budget,
/// scratch, and the function memory and prices the costs are reckoned with).
pub async fn run_bench(args: &BenchArgs, options: &CompactOptions) -> Result<ExitCode> {
    let (dir, files, rows) = (args.store.as_path(), args.files, args.rows);
    let (repeat, json) = (args.repeat, args.json);
    let store = fresh_store(dir)?;
    let layout = KeyLayout::default();
    let partition = PartitionId::parse("bench", "2026-11-29T10")?;
    let spec = GenerateSpec {
        files,
        rows_per_file: rows,
        services: 24,
        seed: 7,
        wide: args.wide,
    };
    eprintln!("generating {files} files x {rows} rows ...");
    let generated = generate_partition(&store, &layout, &partition, &spec).await?;
    let service = service_names(24).get(6).cloned().unwrap_or_default();
    let window = window_for(&partition, &service);
    let query_before = query_window(&store, &layout, &KeyColumns::default(), &window)
        .await?
        .stats;
    let mut query_after = None;
    let mut plain_ms = Vec::new();
    let mut sorted_ms = Vec::new();
    let mut plain_cpu_ms = Vec::new();
    let mut sorted_cpu_ms = Vec::new();
    let mut last = None;
    // The plain rewrite's requests, counted as the compaction counts its own.
    let counted = store.counting_requests();
    let mut plain_requests = RequestCounts::default();
    for i in 0..repeat.max(1) {
        let out = object_store::path::Path::from(format!("bench-out/plain-{i}.parquet"));
        let t = Instant::now();
        let cpu = process_cpu_time();
        let before = counted.request_counts();
        let plain = rewrite_plain(&counted, &layout, &partition, options, &out).await?;
        plain_requests = counted.request_counts().since(&before);
        plain_ms.push(t.elapsed().as_millis() as u64);
        plain_cpu_ms.push((process_cpu_time() - cpu).as_millis() as u64);
        let _ = std::fs::remove_dir_all(dir.join("bench-out"));

        let t = Instant::now();
        let cpu = process_cpu_time();
        let report = compact_partition(&store, &layout, &partition, options).await?;
        sorted_ms.push(t.elapsed().as_millis() as u64);
        sorted_cpu_ms.push((process_cpu_time() - cpu).as_millis() as u64);
        if report.output.is_none() {
            return Err(Error::Invariant {
                message: format!("bench compaction wrote nothing: {:?}", report.error),
            });
        }
        if i + 1 == repeat.max(1) {
            query_after = Some(
                query_window(&store, &layout, &KeyColumns::default(), &window)
                    .await?
                    .stats,
            );
        }
        // Undo the commit so the next repetition compacts the same inputs again.
        for sub in ["compacted", "_compaction"] {
            let _ = std::fs::remove_dir_all(dir.join(sub));
        }
        eprintln!(
            "run {}: plain rewrite {} ms ({} ms CPU), sorted compaction {} ms ({} ms CPU)",
            i + 1,
            plain_ms[i],
            plain_cpu_ms[i],
            sorted_ms[i],
            sorted_cpu_ms[i]
        );
        last = Some((plain, report));
    }
    let Some((plain, report)) = last else {
        return Err(Error::Invariant {
            message: "no bench run".into(),
        });
    };
    // Each repetition's two sides run back to back, so their ratio is immune to the machine's
    // speed drifting between repetitions, which moves the ratio of the medians.
    let paired: Vec<f64> = (plain_ms.iter().zip(&sorted_ms))
        .map(|(&plain, &sorted)| sorted as f64 / plain.max(1) as f64)
        .collect();
    let paired_ratio = median(paired);
    let (plain_med, sorted_med) = (median(plain_ms), median(sorted_ms));
    let (plain_cpu_med, sorted_cpu_med) = (median(plain_cpu_ms), median(sorted_cpu_ms));
    let ratio = sorted_med as f64 / plain_med.max(1) as f64;
    let input_bytes = report.inputs.bytes;
    let sides = [
        (plain_med, plain_cpu_med, plain_requests),
        (sorted_med, sorted_cpu_med, report.cost.requests),
    ];
    let [plain_cost, sorted_cost] = sides.map(|(wall_ms, cpu_ms, requests)| {
        let duration_ms = lambda_duration_ms(wall_ms, cpu_ms, options.settings.function_memory_mb);
        let cost = JobCost::new(
            &options.settings.prices,
            duration_ms,
            options.settings.function_memory_mb,
            requests,
            input_bytes,
        );
        (duration_ms, cost)
    });
    let objects = report.inputs.files;
    let s3_tables_sort = S3_TABLES_SORT.usd_per_gb_for(input_bytes, objects);
    let s3_tables_binpack = S3_TABLES_BINPACK.usd_per_gb_for(input_bytes, objects);
    let input_gb = input_bytes as f64 / 1e9;
    let result = serde_json::json!({
        "input_files": files,
        "input_rows": generated.rows,
        "input_bytes": generated.bytes,
        "budget_bytes": options.settings.budget_bytes,
        "plain_rewrite_ms": plain_med,
        "sorted_compaction_ms": sorted_med,
        "ratio": (ratio * 100.0).round() / 100.0,
        "paired_ratio": (paired_ratio * 100.0).round() / 100.0,
        "plain_rewrite_cpu_ms": plain_cpu_med,
        "sorted_compaction_cpu_ms": sorted_cpu_med,
        "sorted_compaction_cpu_seconds_per_gb": sorted_cpu_med as f64 / 1000.0 / input_gb.max(1e-12),
        "plain_output_bytes": plain.bytes,
        "sorted_output_bytes": report.output.as_ref().map(|o| o.bytes),
        "runs_spilled": report.runs_spilled,
        "merge_passes": report.merge_passes,
        "spill_bytes": report.spill_bytes,
        "peak_decoded_bytes": report.peak_decoded_bytes,
        "rows_per_second": generated.rows as f64 * 1000.0 / sorted_med.max(1) as f64,
        "cost": {
            "function_memory_mb": options.settings.function_memory_mb,
            "plain_rewrite": side_cost(plain_cost),
            "sorted_compaction": side_cost(sorted_cost),
            "s3_tables_sort_usd_per_gb": s3_tables_sort,
            "s3_tables_binpack_usd_per_gb": s3_tables_binpack,
            "s3_tables_sort_per_sorted_compaction": s3_tables_sort / sorted_cost.1.usd_per_gb.max(f64::MIN_POSITIVE),
        },
        "query": {
            "service": service,
            "window": "minutes 20-30",
            "uncompacted": query_before,
            "compacted": query_after,
        },
    });
    eprintln!(
        "$ per GB of input at {} MB: sorted compaction {:.6}, plain rewrite {:.6}; \
         S3 Tables sort {:.6}, binpack {:.6}",
        options.settings.function_memory_mb,
        sorted_cost.1.usd_per_gb,
        plain_cost.1.usd_per_gb,
        s3_tables_sort,
        s3_tables_binpack
    );
    if json {
        println!("{result}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(ExitCode::SUCCESS)
}

/// The duration a function of `memory_mb` would bill for a job measured at `wall_ms` and
/// `cpu_ms` here: Lambda gives a function one vCPU per [`ONE_VCPU_FUNCTION_MB`], so the job
/// takes at least its CPU time spread over that many vCPUs, and at least its measured wall
/// time (more vCPUs than it can use do not shorten it).
fn lambda_duration_ms(wall_ms: u64, cpu_ms: u64, memory_mb: u64) -> u64 {
    let vcpu_bound = (cpu_ms as f64 * ONE_VCPU_FUNCTION_MB as f64 / memory_mb.max(1) as f64).ceil();
    wall_ms.max(vcpu_bound as u64)
}

/// One side's cost in the bench's JSON: the billed duration and the cost.
fn side_cost((duration_ms, cost): (u64, JobCost)) -> serde_json::Value {
    let mut value = serde_json::to_value(cost).unwrap_or_default();
    value["duration_ms"] = serde_json::Value::from(duration_ms);
    value
}
