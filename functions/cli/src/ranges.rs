//! `bench-ranges`: range requests of the window query and of a two-column scan on one
//! partition compacted with row groups in blocks of 1, 4 and 8.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ourios_compaction::bench::generate::{GenerateSpec, generate_partition, service_names};
use ourios_compaction::budget::Budget;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::options::{CompactOptions, KeyColumns};
use ourios_compaction::partition::{KeyLayout, PartitionId};
use ourios_compaction::read::query::{QueryStats, WindowQuery, query_window};
use ourios_compaction::read::scan::scan_columns;
use ourios_compaction::store::Store;
use ourios_compaction::{Error, Result};
use serde::Serialize;

use crate::args::BenchArgs;
use crate::demo::{fresh_store, window_for};
use crate::latency::latency_store;

/// Services in the generated partition (as `bench`).
const SERVICES: usize = 24;

/// What to measure.
pub struct RangeBench<'a> {
    /// The partition, its store directory (created, and removed afterwards), the budget of
    /// the compactions, the runs of each query and the output format.
    pub base: &'a BenchArgs,
    /// Row groups per block of each layout measured.
    pub blocks: Vec<usize>,
    /// Row cap of a second set of layouts (the writer's `max_rows_per_row_group`).
    pub max_rows: Option<u64>,
    /// Row-group threshold (default: the adaptive one).
    pub row_group_bytes: Option<u64>,
    /// Round trip added to every GET of the queries.
    pub get_latency: Duration,
    /// Transfer rate of each GET of the queries, bytes per second (`None`: unlimited).
    pub get_bandwidth: Option<u64>,
}

/// One query's cost on one layout.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Cost {
    requests: u64,
    bytes_read: u64,
    row_groups_scanned: u64,
    rows: u64,
    /// Median wall time against the local store (with the added latency, if any).
    ms: f64,
}

/// The queries measured, in table order.
const QUERIES: [&str; 4] = [
    "window_rows",
    "window_count",
    "window_every_service_rows",
    "scan_two_columns",
];

/// How the table names each query.
fn query_label(name: &str) -> &'static str {
    match name {
        "window_rows" => "window, one service, rows",
        "window_count" => "window, one service, count",
        "window_every_service_rows" => "window, each service, rows",
        _ => "scan of 2 columns",
    }
}

/// One layout's output and query costs.
#[derive(Debug, Serialize)]
struct LayoutResult {
    row_groups_per_block: usize,
    max_rows_per_row_group: Option<u64>,
    file_bytes: u64,
    row_groups: u64,
    /// `window_rows`: the one-service window returning rows (every column);
    /// `window_count`: the same window counting (key columns only);
    /// `window_every_service_rows`: the window of each service in turn, summed;
    /// `scan_two_columns`: every row of the time and service columns.
    queries: std::collections::BTreeMap<&'static str, Cost>,
}

/// The median of `values` (the upper one of an even count; zero for none).
pub(crate) fn median<T: Copy + Default + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// Runs `query` `repeat` times; the statistics of the last run and the median wall time.
async fn measure<F, Fut>(repeat: usize, mut query: F) -> Result<Cost>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<QueryStats>>,
{
    let mut times = Vec::new();
    let mut last = QueryStats::default();
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        last = query().await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(Cost {
        requests: last.requests,
        bytes_read: last.bytes_read,
        row_groups_scanned: last.row_groups_scanned,
        rows: last.rows_matched,
        ms: (median(times) * 10.0).round() / 10.0,
    })
}

/// Compacts the partition with one layout, measures the queries, then undoes the commit.
async fn measure_layout(
    bench: &RangeBench<'_>,
    store: &Store,
    partition: &PartitionId,
    window: &WindowQuery,
    services: &[String],
    layout_of: (usize, Option<u64>),
) -> Result<LayoutResult> {
    let layout = KeyLayout::default();
    let keys = KeyColumns::default();
    let mut options = CompactOptions::new(bench.base.store.join(".scratch"));
    options.settings.budget_bytes = bench.base.budget.or(Budget::DEFAULT).bytes();
    options.settings.row_group_bytes = bench.row_group_bytes;
    options.settings.row_groups_per_block = layout_of.0;
    options.settings.max_rows_per_row_group = layout_of.1;
    let report = compact_partition(store, &layout, partition, &options).await?;
    let Some(output) = report.output else {
        return Err(Error::Invariant {
            message: format!("bench compaction wrote nothing: {:?}", report.error),
        });
    };
    // The queries read through the simulated network; the compaction above did not.
    let remote = store
        .wrapped(|inner| Arc::new(latency_store(inner, bench.get_latency, bench.get_bandwidth)));
    let store = &remote;
    let rows_query = WindowQuery {
        limit: 100,
        filters: Vec::new(),
        ..window.clone()
    };
    let mut queries = std::collections::BTreeMap::new();
    let cost = measure(bench.base.repeat, || async {
        Ok(query_window(store, &layout, &keys, &rows_query)
            .await?
            .stats)
    });
    queries.insert(QUERIES[0], cost.await?);
    let cost = measure(bench.base.repeat, || async {
        Ok(query_window(store, &layout, &keys, window).await?.stats)
    });
    queries.insert(QUERIES[1], cost.await?);
    let cost = measure(bench.base.repeat, || async {
        let mut total = QueryStats::default();
        for service in services {
            let query = WindowQuery {
                service: Some(service.clone()),
                ..rows_query.clone()
            };
            let stats = query_window(store, &layout, &keys, &query).await?.stats;
            total.requests += stats.requests;
            total.bytes_read += stats.bytes_read;
            total.row_groups_scanned += stats.row_groups_scanned;
            total.rows_matched += stats.rows_matched;
        }
        Ok(total)
    });
    queries.insert(QUERIES[2], cost.await?);
    let columns = [keys.time.clone(), keys.service.clone()];
    let cost = measure(bench.base.repeat, || async {
        Ok(scan_columns(store, &layout, partition, &columns)
            .await?
            .stats)
    });
    queries.insert(QUERIES[3], cost.await?);
    // Undo the commit so the next layout compacts the same inputs.
    for sub in ["compacted", "_compaction"] {
        let _ = std::fs::remove_dir_all(bench.base.store.join(sub));
    }
    Ok(LayoutResult {
        row_groups_per_block: layout_of.0,
        max_rows_per_row_group: layout_of.1,
        file_bytes: output.bytes,
        row_groups: output.row_groups,
        queries,
    })
}

/// Generates a partition, compacts it with each layout and measures the queries.
pub async fn run_range_bench(bench: &RangeBench<'_>) -> Result<ExitCode> {
    if bench.blocks.is_empty() || bench.blocks.contains(&0) {
        return Err(Error::Config {
            message: "--blocks needs row-group counts of at least 1, e.g. 1,4,8".into(),
        });
    }
    let store = fresh_store(&bench.base.store)?;
    let partition = PartitionId::parse("bench", "2026-11-29T10")?;
    let spec = GenerateSpec {
        files: bench.base.files,
        rows_per_file: bench.base.rows,
        services: SERVICES,
        seed: 7,
        wide: bench.base.wide,
    };
    eprintln!(
        "generating {} files x {} rows ...",
        bench.base.files, bench.base.rows
    );
    let generated = generate_partition(&store, &KeyLayout::default(), &partition, &spec).await?;
    let services = service_names(SERVICES);
    let service = services.get(6).cloned().unwrap_or_default();
    let window = window_for(&partition, &service);
    let caps = std::iter::once(None).chain(bench.max_rows.map(Some));
    let layouts: Vec<(usize, Option<u64>)> = caps
        .flat_map(|cap| bench.blocks.iter().map(move |&b| (b, cap)))
        .collect();
    let mut results = Vec::new();
    for layout_of in layouts {
        eprintln!(
            "compacting with {} row groups per block{} ...",
            layout_of.0,
            layout_of
                .1
                .map(|n| format!(", at most {n} rows per row group"))
                .unwrap_or_default()
        );
        let result =
            measure_layout(bench, &store, &partition, &window, &services, layout_of).await?;
        if let Some(first) = results.first()
            && !same_answers(first, &result)
        {
            return Err(Error::Invariant {
                message: format!("layouts disagree on the rows: {first:?} vs {result:?}"),
            });
        }
        results.push(result);
    }
    let _ = std::fs::remove_dir_all(&bench.base.store);
    if bench.base.json {
        let out = serde_json::json!({
            "get_latency_ms": bench.get_latency.as_secs_f64() * 1000.0,
            "get_bandwidth_bytes_per_second": bench.get_bandwidth,
            "input_files": bench.base.files,
            "input_rows": generated.rows,
            "input_bytes": generated.bytes,
            "service": service,
            "window": "minutes 20-30",
            "scan_columns": [KeyColumns::default().time, KeyColumns::default().service],
            "layouts": results,
        });
        println!("{out}");
    } else {
        print!("{}", render(bench, &results, &service));
    }
    Ok(ExitCode::SUCCESS)
}

fn same_answers(a: &LayoutResult, b: &LayoutResult) -> bool {
    QUERIES
        .iter()
        .all(|q| a.queries.get(q).map(|c| c.rows) == b.queries.get(q).map(|c| c.rows))
}

/// The results as a text table, one line per query and layout.
fn render(bench: &RangeBench<'_>, results: &[LayoutResult], service: &str) -> String {
    let mut out = format!(
        "window: minutes 20-30 of the hour, service {service:?} or each of {SERVICES} in turn; \
         scan: time and service columns, every row\n"
    );
    out.push_str(&format!(
        "each GET takes {} ms{}; ms: median of {} runs\n\n",
        bench.get_latency.as_millis(),
        bench
            .get_bandwidth
            .map(|b| format!(" + its bytes at {:.0} MiB/s", b as f64 / (1 << 20) as f64))
            .unwrap_or_default(),
        bench.base.repeat.max(1)
    ));
    out.push_str(&format!(
        "{:<28} {:<22} {:>6} {:>12} {:>6} {:>11} {:>9}\n",
        "query", "layout", "groups", "file bytes", "GETs", "bytes read", "ms"
    ));
    for query in QUERIES {
        for (i, r) in results.iter().enumerate() {
            let label = if i == 0 { query_label(query) } else { "" };
            let layout = match r.max_rows_per_row_group {
                Some(n) => format!("blocks {}, {n} rows", r.row_groups_per_block),
                None => format!("blocks {}", r.row_groups_per_block),
            };
            let c = r.queries.get(query).copied().unwrap_or_default();
            out.push_str(&format!(
                "{label:<28} {layout:<22} {:>6} {:>12} {:>6} {:>11} {:>9.1}\n",
                r.row_groups, r.file_bytes, c.requests, c.bytes_read, c.ms
            ));
        }
    }
    out
}
