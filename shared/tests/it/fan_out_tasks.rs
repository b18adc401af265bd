//! The tasks of a fanned-out job as the state machine runs them (plan, run, split, merge,
//! commit), each retried after a fault at any of its store operations: a crash, a lost
//! response or a failed request. Whatever failed, the retried task and the ones after it
//! end `compacted` with every row exactly once, and nothing of the job is left once GC ran.
//! And the store's refusals (403) are judged for the whole job, not for each group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use ourios_compaction::compact::compact_partition;
use ourios_compaction::compact::fan_out::{FanOutStep, FanOutTask, TaskAnswer, run_fan_out_task};
use ourios_compaction::error::ErrorKind;
use ourios_compaction::manifest::gc::collect_garbage;
use ourios_compaction::manifest::partition_files;
use ourios_compaction::options::{CompactOptions, FanOut};
use ourios_compaction::partition::KeyLayout;
use ourios_compaction::report::{CompactionReport, Status};
use ourios_compaction::store::Store;
use ourios_compaction::testing::{
    Fault, FaultyStore, Refusal, RefusingStore, get_bytes, multi_thread_runtime, parquet_bytes,
    put_bytes, random_stream, read_parquet, rows_batch, test_partition,
};

const FILES: i64 = 3;
const ROWS: i64 = 400;
const JOB: &str = "job-under-faults";

/// Tasks of the job in the order the state machine runs them.
const TASKS: usize = 7; // plan, run x2, split, merge x2, commit

fn options(scratch: &std::path::Path) -> CompactOptions {
    let mut options = CompactOptions::new(scratch);
    options.settings.budget_bytes = 256 << 10;
    options.settings.row_group_bytes = Some(8 << 10);
    options.settings.fan_out = FanOut::Ranges(2);
    options.parallel_downloads = 1;
    options
}

async fn ingest(store: &Store, layout: &KeyLayout) {
    let (start, _) = test_partition().time_range_nanos();
    let mut next = random_stream(0xfa17);
    let dir = layout.ingest_dir(&test_partition());
    for f in 0..FILES {
        let rows: Vec<_> = (0..ROWS)
            .map(|r| {
                let service = ["auth", "cart", "search"][next() as usize % 3].to_string();
                let t = start + (next() % 100) as i64 * 1_000_000_000;
                (Some(service), t, f * 10_000 + r)
            })
            .collect();
        let key = format!("{dir}/ingest-{f}.parquet");
        put_bytes(store, &key, parquet_bytes(&[rows_batch(&rows)], 100)).await;
    }
}

fn task(step: FanOutStep, index: Option<usize>) -> FanOutTask {
    let partition = test_partition();
    FanOutTask {
        step,
        tenant: partition.tenant().map(str::to_string),
        hour: partition.hour_label(),
        job: Some(JOB.to_string()),
        index,
        ranges: (step == FanOutStep::Plan).then_some(2),
    }
}

/// What the job ended with.
struct Ending {
    /// Store operations of each task, run without a fault.
    ops: Vec<u64>,
    /// The last commit's report.
    report: CompactionReport,
    /// How often each row's tag is in the live set.
    seen: BTreeMap<i64, usize>,
    /// Objects of the job left under the runs directory after GC.
    left: Vec<String>,
}

/// Runs the job's tasks; task `faulty.0` meets `faulty.1` and is then retried, as Step
/// Functions retries a failed task (a retry after a lost answer included).
fn run_job(runtime: &tokio::runtime::Runtime, faulty: Option<(usize, Fault)>) -> Ending {
    runtime.block_on(async {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let clean = Store::from_object_store(Arc::clone(&memory), "memory://");
        let layout = KeyLayout::default();
        ingest(&clean, &layout).await;
        let scratch = tempfile::tempdir().expect("scratch");
        let options = options(scratch.path());
        let mut ops = Vec::new();
        let mut queue = vec![task(FanOutStep::Plan, None)];
        let mut report = None;
        while !queue.is_empty() {
            let current = queue.remove(0);
            let n = ops.len();
            let fault = faulty.filter(|(at, _)| *at == n).map(|(_, f)| f);
            let counting = Arc::new(FaultyStore::new(Arc::clone(&memory), fault));
            let store = Store::from_object_store(counting.clone(), "faulty");
            let first = run_fan_out_task(&store, &layout, &options, &current).await;
            ops.push(counting.num_ops());
            let answer = if fault.is_some() {
                run_fan_out_task(&clean, &layout, &options, &current).await
            } else {
                first
            };
            let answer = answer.unwrap_or_else(|e| panic!("{current:?} after {fault:?}: {e}"));
            match answer {
                TaskAnswer::Next(value) => {
                    let indexes = |name: &str| -> Vec<usize> {
                        value[name]
                            .as_array()
                            .map(|a| a.iter().filter_map(|i| i.as_u64()).map(|i| i as usize))
                            .into_iter()
                            .flatten()
                            .collect()
                    };
                    match current.step {
                        FanOutStep::Plan => {
                            for g in indexes("groups") {
                                queue.push(task(FanOutStep::Run, Some(g)));
                            }
                            queue.push(task(FanOutStep::Split, None));
                        }
                        FanOutStep::Split => {
                            for r in indexes("ranges") {
                                queue.push(task(FanOutStep::Merge, Some(r)));
                            }
                            queue.push(task(FanOutStep::Commit, None));
                        }
                        _ => {}
                    }
                }
                TaskAnswer::Committed(committed) => report = Some(*committed),
            }
        }
        let report = report.expect("the commit ran");
        let mut seen = BTreeMap::new();
        let files = partition_files(&clean, &layout, &test_partition())
            .await
            .expect("the live set reads");
        for key in files.live {
            for batch in read_parquet(&clean, &key).await {
                let tags = batch.column_by_name("tag").expect("tag");
                for tag in tags.as_primitive::<Int64Type>().values() {
                    *seen.entry(*tag).or_default() += 1;
                }
            }
        }
        collect_garbage(&clean, &layout, &test_partition(), Duration::ZERO, false)
            .await
            .expect("GC runs");
        let runs = layout.fan_out_root(&test_partition());
        let left = (clean.list_sorted(&runs).await.expect("listing").iter())
            .map(|o| o.location.to_string())
            .collect();
        Ending {
            ops,
            report,
            seen,
            left,
        }
    })
}

#[test]
fn every_task_retried_after_a_fault_at_any_store_operation_ends_compacted() {
    let runtime = multi_thread_runtime(2);
    let clean = run_job(&runtime, None);
    assert_eq!(clean.ops.len(), TASKS, "{:?}", clean.ops);
    let expected: BTreeMap<i64, usize> = (0..FILES)
        .flat_map(|f| (0..ROWS).map(move |r| (f * 10_000 + r, 1)))
        .collect();
    assert_eq!(clean.seen, expected);
    assert_eq!(clean.report.status, Status::Compacted);
    let commit = TASKS - 1;
    for (task, &ops) in clean.ops.iter().enumerate() {
        for at in 1..=ops {
            // Every fault at every operation of the commit; one fault in turn at each
            // operation of the other tasks.
            let faults = [
                Fault::Crash(at),
                Fault::LostResponse(at),
                Fault::Unavailable(at),
            ];
            let turn = (at as usize) % faults.len();
            let faults = if task == commit {
                &faults[..]
            } else {
                &faults[turn..=turn]
            };
            for &fault in faults {
                let ending = run_job(&runtime, Some((task, fault)));
                let context = format!("task {task} ({ops} operations), {fault:?}");
                assert_eq!(
                    ending.report.status,
                    Status::Compacted,
                    "{context}: {:?}",
                    ending.report
                );
                assert!(!ending.report.outputs.is_empty(), "{context}");
                assert_eq!(ending.seen, expected, "{context}: every row exactly once");
                assert!(ending.left.is_empty(), "{context}: left {:?}", ending.left);
            }
        }
    }
}

/// A fanned-out hour whose first file is large (a group of its own) on `store`, refusing the
/// files `refused` names: the report of its compaction into two ranges, and the files' keys.
async fn compact_with_refusals(refused: &[usize]) -> (CompactionReport, Store, Vec<String>) {
    let memory = Arc::new(InMemory::new());
    let clean = Store::from_object_store(memory.clone(), "memory://");
    let layout = KeyLayout::default();
    let dir = layout.ingest_dir(&test_partition());
    let (start, _) = test_partition().time_range_nanos();
    let mut keys = Vec::new();
    for (f, rows) in [2_000i64, 300, 300].into_iter().enumerate() {
        let rows: Vec<_> = (0..rows)
            .map(|r| (Some("auth".to_string()), start + r, f as i64 * 10_000 + r))
            .collect();
        let key = format!("{dir}/ingest-{f}.parquet");
        put_bytes(&clean, &key, parquet_bytes(&[rows_batch(&rows)], 100)).await;
        keys.push(key);
    }
    let refusals = (refused.iter())
        .map(|&f| (format!("ingest-{f}.parquet"), Refusal::Forbidden))
        .collect();
    let refusing =
        Store::from_object_store(Arc::new(RefusingStore::new(memory, refusals)), "memory://");
    let scratch = tempfile::tempdir().expect("scratch");
    let report = compact_partition(
        &refusing,
        &layout,
        &test_partition(),
        &options(scratch.path()),
    )
    .await
    .expect("the job runs");
    (report, clean, keys)
}

/// A file the store refuses (a KMS key the role may not use), alone in its group, is
/// quarantined as the same hour unfanned would have it, when the job's other groups were read:
/// whether the function's access is at fault is decided for the job, not for each group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_file_in_a_group_of_its_own_is_quarantined_when_other_groups_are_read() {
    let (report, store, keys) = compact_with_refusals(&[0]).await;
    assert_eq!(report.status, Status::Partial, "{report:?}");
    assert_eq!(report.fan_out.map(|f| f.groups), Some(2), "{report:?}");
    let quarantined: Vec<&str> = report.quarantined.iter().map(|q| q.file.as_str()).collect();
    assert_eq!(quarantined, [keys[0].as_str()], "{report:?}");
    assert_eq!(report.inputs.rows, 600);
    let files = partition_files(&store, &KeyLayout::default(), &test_partition())
        .await
        .expect("files");
    assert_eq!(files.quarantined.len(), 1);
    assert!(files.live.iter().all(|k| *k != keys[0]), "{files:?}");
    // Left in place, byte for byte.
    assert!(!get_bytes(&store, &keys[0]).await.is_empty());
}

/// When the store refuses every input of a fanned-out job, the function's access is at fault:
/// the job fails, retryably, and quarantines nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanned_out_job_whose_every_input_is_refused_fails_and_quarantines_nothing() {
    let (report, store, _) = compact_with_refusals(&[0, 1, 2]).await;
    assert_eq!(report.status, Status::Failed, "{report:?}");
    assert_eq!(report.error_kind, Some(ErrorKind::Transient), "{report:?}");
    let error = report.error.clone().expect("an error");
    assert!(error.contains("refused to read every input"), "{error}");
    let files = partition_files(&store, &KeyLayout::default(), &test_partition())
        .await
        .expect("files");
    assert!(files.quarantined.is_empty(), "{files:?}");
    assert_eq!(files.live.len(), 3, "{files:?}");
}
