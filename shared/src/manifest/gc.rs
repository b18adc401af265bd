//! Garbage collection of one partition: a pure plan, then its execution.
//!
//! Retired inputs are deleted only once the grace period has passed since the commit that
//! retired them (a reader that listed before the commit may still be reading them,
//! invariant 3). Compacted outputs that no manifest references (a crash between upload
//! and commit, or a lost race) are deleted once older than the grace period.
//!
//! A job holds each output before its upload starts (`runs/<job>/holds/<name>`, renewed as the
//! upload goes, see `store::upload`): an unreferenced output that a job directory changed within
//! twice the grace holds is never an orphan, whenever its upload started; a committer commits
//! within the grace of its hold's last renewal. S3 dates a multipart object at its upload's
//! start, so the object's own age says nothing of when it can still be committed. An output
//! that goes up in one PUT, committed by the job that wrote it, has no hold: its Last-Modified
//! is no earlier than the PUT's start, and its committer commits within half the grace of that
//! start (`compact::writing::Written::commit_by_ms`).
//!
//! Every instant is the store's: a commit's time is its manifest version's Last-Modified, an
//! orphan's age its own Last-Modified, and "now" the Last-Modified of a clock object GC writes
//! before it reads anything (`_compaction/clock/<partition>.json`, removed again at once). Host clocks may be skewed;
//! they only measure durations. INVARIANT: GC reads the manifest after taking "now", so a
//! commit that landed before it is seen; a committer commits within the grace of its hold's
//! last renewal, GC takes an output only once no hold on it changed for twice the grace, and
//! GC deletes within half the grace of taking "now", so an orphan GC deletes can no longer be
//! committed; before deleting, GC reads the latest manifest again and commits the orphans as
//! condemned in a new version: a committer that stalled between its deadline check and its
//! write (longer than any grace) finds its output condemned and commits nothing. Old manifest
//! versions are pruned once a grace old, always keeping the latest few so a concurrent committer
//! is never affected. Quarantined files are never touched.
//!
//! A GC run over many partitions ([`find_partitions`]) finds them by delimited listings of the
//! manifest prefix and the compacted prefix, level by level (tenant, year, month, day, hour):
//! never a scan of the ingest data. The compacted prefix is listed too because a partition
//! whose first compaction crashed after its upload has an orphan but no manifest yet.
//!
//! On S3 an orphan is deleted only while it is the version listed (If-Match on its ETag).
//!
//! Abandoned multipart uploads (a crash mid-upload) are invisible to listings and never become
//! objects, so they never enter a live set. GC aborts those under the partition's compacted
//! directory once no live attempt can own them ([`sweep_abandoned_uploads`]: a function
//! attempt's once older than the grace, which no attempt outlives; others after a day); the
//! next function attempt of the same job aborts its predecessor's by the same rule
//! (`serverless::dispatch::job_lifecycle`); the bucket's lifecycle rule
//! `AbortIncompleteMultipartUpload` is the backstop (see `infra/`).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt, PutPayload};
use serde::Serialize;

use crate::clock::{Clock, Expiry, SystemClock};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, load_latest};
use crate::object_key::ObjectKey;
use crate::partition::{
    COMPACTED_PREFIX, KeyLayout, MANIFESTS_PREFIX, PartitionId, fan_out_job_dir, field_dir,
    field_value, gc_due_key, held_output, is_attempt_upload, parse_version, partition_dir,
    validate_tenant,
};
use crate::store::Store;
use crate::store::raw_s3::IncompleteUpload;

/// Manifest versions kept by pruning.
pub const KEEP_MANIFEST_VERSIONS: usize = 10;

/// What garbage collection will delete, and why each is safe.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcPlan {
    /// Retired files past their grace period.
    pub retired: Vec<ObjectKey>,
    /// Unreferenced compacted outputs older than the grace period.
    pub orphans: Vec<ObjectKey>,
    /// Manifest versions older than the ones kept.
    pub manifests: Vec<ObjectKey>,
}

impl GcPlan {
    /// Total objects the plan deletes.
    pub fn len(&self) -> usize {
        self.retired.len() + self.orphans.len() + self.manifests.len()
    }

    /// True when there is nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Inputs of a GC decision, all already read.
pub struct GcInputs<'a> {
    /// The latest manifest.
    pub manifest: &'a Manifest,
    /// Listing of the partition's compacted directory.
    pub compacted_listing: &'a [ObjectMeta],
    /// Listing of the partition's ingest directory.
    pub ingest_listing: &'a [ObjectMeta],
    /// Every manifest version present with its listing entry, ascending by version.
    pub manifest_versions: &'a [(u64, ObjectMeta)],
    /// Now on the store's clock, Unix milliseconds.
    pub store_now_ms: i64,
    /// The grace period.
    pub grace: Duration,
}

/// Decides what to delete: pure, so it can be tested and printed without a store or clock.
pub fn plan_gc(inputs: &GcInputs<'_>) -> GcPlan {
    let grace_ms = i64::try_from(inputs.grace.as_millis()).unwrap_or(i64::MAX);
    let past_grace = |t_ms: i64| t_ms.saturating_add(grace_ms) <= inputs.store_now_ms;
    let m = inputs.manifest;
    // When version `v` was committed, on the store's clock; a pruned version is bounded by the
    // next one kept (later, so the grace only lengthens). Unknown (0): the latest version.
    let versions = inputs.manifest_versions;
    let committed_ms = |v: u64| -> Option<i64> {
        let found = if v == 0 {
            versions.last()
        } else {
            versions.iter().find(|(n, _)| *n >= v)
        };
        found.map(|(_, meta)| meta.last_modified.timestamp_millis())
    };
    // Retired entries stay in the manifest until a later commit forgets them: only files
    // still present are planned, so a report counts real deletions.
    let present: std::collections::HashSet<&str> = inputs
        .compacted_listing
        .iter()
        .chain(inputs.ingest_listing)
        .map(|o| o.location.as_ref())
        .collect();
    let retired: Vec<ObjectKey> = m
        .retired
        .iter()
        .filter(|r| {
            committed_ms(r.retired_in).is_some_and(past_grace) && present.contains(r.key.as_str())
        })
        .filter(|r| !m.quarantined.iter().any(|q| q.key == r.key))
        .map(|r| r.key.clone())
        .collect();
    // A fanned-out job's directory (`runs/<job>/`) goes as a whole once it has been idle for
    // a grace beyond the grace: its tasks add records as they finish, and no task runs longer
    // than the grace (the Lambda timeout is at most 15 minutes, the default grace).
    let mut job_activity: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for o in inputs.compacted_listing {
        if let Some(dir) = fan_out_job_dir(o.location.as_ref()) {
            let newest = job_activity.entry(dir).or_insert(i64::MIN);
            *newest = (*newest).max(o.last_modified.timestamp_millis());
        }
    }
    let at_work = |dir: &str| {
        job_activity
            .get(dir)
            .is_some_and(|&newest| !past_grace(newest.saturating_add(grace_ms)))
    };
    // An output a job at work holds (`runs/<job>/holds/<name>`) waits for its commit, however
    // long ago its upload started (S3 dates an object at its upload's start).
    let held: std::collections::HashSet<&str> = (inputs.compacted_listing.iter())
        .filter_map(|o| held_output(o.location.as_ref()))
        .filter(|(dir, _)| at_work(dir))
        .map(|(_, name)| name)
        .collect();
    let orphans = inputs
        .compacted_listing
        .iter()
        .filter(|o| {
            let key = o.location.as_ref();
            !m.has_compacted(key) && !m.retired.iter().any(|r| r.key == key)
        })
        .filter(|o| past_grace(o.last_modified.timestamp_millis()))
        .filter(|o| fan_out_job_dir(o.location.as_ref()).is_none_or(|dir| !at_work(dir)))
        .filter(|o| {
            let in_job_dir = fan_out_job_dir(o.location.as_ref()).is_some();
            in_job_dir
                || o.location
                    .filename()
                    .is_none_or(|name| !held.contains(name))
        })
        .map(|o| ObjectKey::from(&o.location))
        .collect();
    // Old versions go once they are a grace old, the latest few always kept: a committer that
    // listed the versions less than half the grace ago knows none after its base is pruned
    // (`manifest::unpruned_until`).
    let prunable = versions.len().saturating_sub(KEEP_MANIFEST_VERSIONS);
    let manifests = versions[..prunable]
        .iter()
        .filter(|(_, meta)| past_grace(meta.last_modified.timestamp_millis()))
        .map(|(_, meta)| ObjectKey::from(&meta.location))
        .collect();
    GcPlan {
        retired,
        orphans,
        manifests,
    }
}

/// Whether the partition keeps garbage a later run will delete once past the grace: retired
/// files still present, unreferenced objects of its compacted directory (orphans, job
/// directories, holds, claims) or manifest versions beyond the latest few that this plan
/// leaves.
pub fn garbage_left(inputs: &GcInputs<'_>, plan: &GcPlan) -> bool {
    let m = inputs.manifest;
    let present: std::collections::HashSet<&str> = (inputs.compacted_listing.iter())
        .chain(inputs.ingest_listing)
        .map(|o| o.location.as_ref())
        .collect();
    let retired_left = (m.retired.iter())
        .filter(|r| present.contains(r.key.as_str()))
        .filter(|r| !m.quarantined.iter().any(|q| q.key == r.key))
        .any(|r| !plan.retired.contains(&r.key));
    let unreferenced_left = (inputs.compacted_listing.iter())
        .filter(|o| {
            let key = o.location.as_ref();
            !m.has_compacted(key) && !m.retired.iter().any(|r| r.key == key)
        })
        .any(|o| !plan.orphans.iter().any(|k| k.location() == &o.location));
    let versions_left = plan.manifests.len()
        < (inputs.manifest_versions.len()).saturating_sub(KEEP_MANIFEST_VERSIONS);
    retired_left || unreferenced_left || versions_left
}

/// Leaves the partition's garbage-due marker when garbage is left (rewritten, so the sweep
/// dispatches GC once the grace has passed again), and deletes it otherwise, only as it was
/// before the manifest was read. Best effort: a marker lost to a failure leaves garbage to
/// the next commit's marker or to `gc`.
async fn mark_garbage_due(
    store: &Store,
    partition: &PartitionId,
    pending: bool,
    marker: Option<&ObjectMeta>,
) {
    let key = gc_due_key(partition);
    let done = match (pending, marker) {
        (true, _) => mark_garbage(store, partition).await,
        (false, Some(meta)) => store.delete_listed(meta).await.map(drop),
        (false, None) => Ok(()),
    };
    if let Err(e) = done {
        tracing::warn!(key = %key, error = %e, "could not update the garbage-due marker");
    }
}

/// Marks `partition` as holding garbage due once the grace has passed (the marker's date).
pub async fn mark_garbage(store: &Store, partition: &PartitionId) -> Result<()> {
    let key = gc_due_key(partition);
    store
        .object_store()
        .put(&key, PutPayload::from_static(b"{}"))
        .await
        .map(drop)
        .map_err(|e| Error::store("put", &key, e))
}

/// What one GC run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// The partition.
    pub partition: String,
    /// The plan (what was, or with `dry_run` would be, deleted).
    pub plan: GcPlan,
    /// Objects actually deleted.
    pub deleted: usize,
    /// Incomplete multipart uploads of killed attempts aborted ([`sweep_abandoned_uploads`]).
    #[serde(default)]
    pub aborted_uploads: usize,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// How old an incomplete upload under a partition's compacted directory must be, on the
/// store's clock, before GC aborts it when it is not a function attempt's (a CLI run has no
/// timeout); a function attempt's goes once older than the grace, which no attempt outlives.
/// The bucket's lifecycle rule is the backstop for prefixes GC never visits.
pub const LOCAL_UPLOAD_SWEEP_AGE: Duration = Duration::from_secs(24 * 3600);

/// Aborts the incomplete multipart uploads killed attempts left under the partition's
/// compacted directory: a function attempt's ([`is_attempt_upload`]) once older than
/// `grace` on the store's clock, any other once older than [`LOCAL_UPLOAD_SWEEP_AGE`] (and
/// the grace). Stores without raw S3 access have no listable uploads: 0.
pub async fn sweep_abandoned_uploads(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    store_now_ms: i64,
    grace: Duration,
) -> Result<usize> {
    let prefix = format!("{}/", layout.compacted_dir(partition));
    (store.abort_uploads(&prefix, |upload| {
        is_abandoned_upload(upload, store_now_ms, grace)
    }))
    .await
}

/// Whether GC takes `upload` for a killed attempt's at `now_ms` on the store's clock: a
/// function attempt's initiated longer ago than `grace`, any other longer ago than
/// [`LOCAL_UPLOAD_SWEEP_AGE`] (and the grace); never one whose initiation is unknown.
pub fn is_abandoned_upload(upload: &IncompleteUpload, now_ms: i64, grace: Duration) -> bool {
    let age = if is_attempt_upload(&upload.key) {
        grace
    } else {
        grace.max(LOCAL_UPLOAD_SWEEP_AGE)
    };
    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
    (upload.initiated_ms).is_some_and(|at| at <= now_ms.saturating_sub(age_ms))
}

/// Plans and runs GC for one partition, timing on the system clocks.
pub async fn collect_garbage(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    grace: Duration,
    dry_run: bool,
) -> Result<GcReport> {
    let clock = SystemClock::shared();
    collect_garbage_with(store, layout, partition, grace, dry_run, &clock).await
}

/// Plans and runs GC for one partition; `clock` measures how long the run takes.
pub async fn collect_garbage_with(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    grace: Duration,
    dry_run: bool,
    clock: &Arc<dyn Clock>,
) -> Result<GcReport> {
    // The garbage-due marker as it is before the manifest is read: a commit after this point
    // rewrites it, and the conditional delete below then leaves it.
    let marker = match dry_run {
        true => None,
        false => store.head_if_present(&gc_due_key(partition)).await?,
    };
    // INVARIANT: "now" is taken before the manifest is read (module doc).
    let store_now = store.store_now(&layout.clock_key(partition)).await?;
    let deadline = Expiry::after(clock, grace / 2);
    let manifest = load_latest(store, layout, partition).await?;
    let compacted_listing = store.list_sorted(&layout.compacted_dir(partition)).await?;
    let ingest_listing = store.list_sorted(&layout.ingest_dir(partition)).await?;
    let manifest_versions: Vec<(u64, ObjectMeta)> = store
        .list_sorted(&layout.manifest_dir(partition))
        .await?
        .into_iter()
        .filter_map(|meta| parse_version(&meta.location).map(|v| (v, meta)))
        .collect();
    let inputs = GcInputs {
        manifest: &manifest,
        compacted_listing: &compacted_listing,
        ingest_listing: &ingest_listing,
        manifest_versions: &manifest_versions,
        store_now_ms: store_now.timestamp_millis(),
        grace,
    };
    let mut plan = plan_gc(&inputs);
    let mut pending = garbage_left(&inputs, &plan);
    let mut deleted = 0;
    if !dry_run && !plan.is_empty() {
        if grace > Duration::ZERO && deadline.has_passed() {
            tracing::warn!(partition = %partition, "garbage collection took over half the grace period; deleting nothing");
            return Ok(GcReport {
                partition: partition.to_string(),
                plan,
                deleted,
                aborted_uploads: 0,
                dry_run,
            });
        }
        // Re-check against the latest manifest: never delete what it references.
        let latest = load_latest(store, layout, partition).await?;
        plan.retired
            .retain(|k| latest.retired.iter().any(|r| &r.key == k) && !latest.has_compacted(k));
        // The symlink manifest lists no retired file once rewritten after the commits that
        // retired them (this one is based on a state read after them): then they may go.
        if !plan.retired.is_empty()
            && let Err(e) = super::symlink::write_symlink(store, layout, partition).await
        {
            tracing::warn!(partition = %partition, error = %e, "the symlink manifest could not be rewritten; retired files are kept");
            plan.retired.clear();
            pending = true;
        }
        let now_ms = store_now.timestamp_millis();
        let orphans = std::mem::take(&mut plan.orphans);
        let planned = orphans.len();
        plan.orphans = condemn(store, layout, partition, latest, orphans, now_ms).await?;
        // Garbage the plan meant to delete and this run keeps is still due: the marker stays.
        pending |= plan.orphans.len() < planned;
        // Orphans go by conditional delete where the store offers it: only the version listed.
        for key in &plan.orphans {
            let Some(meta) = compacted_listing
                .iter()
                .find(|o| &o.location == key.location())
            else {
                continue;
            };
            if store.delete_listed(meta).await? {
                deleted += 1;
            } else {
                tracing::warn!(key = %key, "an orphan changed since it was listed; left in place");
            }
        }
        let keys: Vec<Path> = plan
            .retired
            .iter()
            .chain(&plan.manifests)
            .map(|k| k.location().clone())
            .collect();
        let store_ref = store.object_store();
        let mut results =
            store_ref.delete_stream(futures::stream::iter(keys.into_iter().map(Ok)).boxed());
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(e) => return Err(Error::store("delete", partition, e)),
            }
        }
    }
    let aborted_uploads = if dry_run {
        0
    } else {
        let now_ms = store_now.timestamp_millis();
        sweep_abandoned_uploads(store, layout, partition, now_ms, grace).await?
    };
    if !dry_run {
        mark_garbage_due(store, partition, pending, marker.as_ref()).await;
    }
    Ok(GcReport {
        partition: partition.to_string(),
        plan,
        deleted,
        aborted_uploads,
        dry_run,
    })
}

/// Versions written before GC gives up condemning a partition's orphans for this run.
const CONDEMN_ATTEMPTS: usize = 4;

/// Commits `orphans` as condemned in the next manifest version (create-only, on top of
/// `latest`) and returns those that may now be deleted: the ones no version references.
///
/// INVARIANT: a committer checks its deadline before its write, and may stall between the two
/// for longer than the grace; the create-only version numbers order its write after GC's, so
/// it finds its output condemned and commits nothing ([`Manifest::condemned`]), or GC finds
/// the output referenced and keeps it. Nothing is deleted when the manifest keeps changing.
async fn condemn(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    mut latest: Manifest,
    mut orphans: Vec<ObjectKey>,
    now_ms: i64,
) -> Result<Vec<ObjectKey>> {
    for _ in 0..CONDEMN_ATTEMPTS {
        orphans
            .retain(|k| !latest.references(k) && !latest.quarantined.iter().any(|q| &q.key == k));
        if orphans.iter().all(|k| latest.condemned.contains(k)) {
            return Ok(orphans);
        }
        let mut next = latest.clone();
        next.version += 1;
        next.attempt_id = "gc".to_string();
        next.committed_at_ms = now_ms;
        for key in &orphans {
            if !next.condemned.contains(key) {
                next.condemned.push(key.clone());
            }
        }
        let excess = next.condemned.len().saturating_sub(super::MAX_CONDEMNED);
        next.condemned.drain(..excess);
        let key = layout.manifest_key(partition, next.version);
        let options = object_store::PutOptions {
            mode: object_store::PutMode::Create,
            ..Default::default()
        };
        let put = (store.object_store())
            .put_opts(&key, PutPayload::from(next.encode()), options)
            .await;
        match put {
            Ok(_) => return Ok(orphans),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {}
            // The write may have landed with its response lost: the next read tells.
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "could not condemn the orphans; reading the manifest again")
            }
        }
        latest = load_latest(store, layout, partition).await?;
    }
    tracing::warn!(partition = %partition, "the manifest kept changing; no orphan deleted this run");
    Ok(Vec::new())
}

/// Which partitions a GC run covers: a tenant or all, an hour or all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcScope {
    /// Only this tenant (all tenants when `None`).
    pub tenant: Option<String>,
    /// Only this hour, as `YYYY-MM-DDTHH` (every hour when `None`).
    pub hour: Option<String>,
}

/// The partitions in `scope` that have a manifest or compacted outputs, sorted.
pub async fn find_partitions(store: &Store, scope: &GcScope) -> Result<Vec<PartitionId>> {
    if let Some(tenant) = &scope.tenant {
        validate_tenant(tenant)?;
    }
    let wanted_hour = scope
        .hour
        .as_deref()
        .map(crate::partition::parse_hour)
        .transpose()?;
    let mut found = std::collections::BTreeSet::new();
    for root in [MANIFESTS_PREFIX.to_string(), COMPACTED_PREFIX.to_string()] {
        let root = Path::from(root);
        // (tenant, the directory holding its `year=` directories): `tenant=<T>/` directories,
        // and the root itself where a layout without tenants keeps its hours.
        let tenants: Vec<(Option<String>, Path)> = match &scope.tenant {
            Some(t) => vec![(Some(t.clone()), field_dir(&root, "tenant", t))],
            None => {
                let mut tenants = Vec::new();
                let mut hours_at_root = false;
                for dir in store.list_dirs(&root).await? {
                    let Some(name) = dir.filename() else { continue };
                    if let Some(tenant) = field_value(name, "tenant") {
                        if validate_tenant(tenant).is_err() {
                            tracing::warn!(root = %root, tenant, "ignoring a directory that is not a tenant");
                            continue;
                        }
                        tenants.push((Some(tenant.to_string()), dir.clone()));
                    } else if field_value(name, "year").is_some() {
                        hours_at_root = true;
                    }
                }
                tenants.sort();
                if hours_at_root {
                    tenants.push((None, root.clone()));
                }
                tenants
            }
        };
        for (tenant, dir) in tenants {
            if let Some(hour) = wanted_hour {
                let partition = PartitionId::of(tenant.as_deref(), hour)?;
                let dir = partition_dir(&root, &partition);
                if !store.list_sorted(&dir).await?.is_empty() {
                    found.insert(partition);
                }
                continue;
            }
            for hour in hours_under(store, &dir).await? {
                found.insert(PartitionId::parse_of(tenant.as_deref(), &hour)?);
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Every `YYYY-MM-DDTHH` under `dir` (a tenant's directory, or a root holding `year=`
/// directories), one delimited listing per level.
async fn hours_under(store: &Store, dir: &Path) -> Result<Vec<String>> {
    let mut hours = Vec::new();
    for year in child_values(store, dir, "year").await? {
        let year_dir = field_dir(dir, "year", &year);
        for month in child_values(store, &year_dir, "month").await? {
            let month_dir = field_dir(&year_dir, "month", &month);
            for day in child_values(store, &month_dir, "day").await? {
                let day_dir = field_dir(&month_dir, "day", &day);
                for hour in child_values(store, &day_dir, "hour").await? {
                    let label = format!("{year}-{month}-{day}T{hour}");
                    if crate::partition::parse_hour(&label).is_ok() {
                        hours.push(label);
                    } else {
                        tracing::warn!(dir = %day_dir, hour, "ignoring a directory that is not an hour");
                    }
                }
            }
        }
    }
    Ok(hours)
}

/// Values `v` of the child directories `<dir>/<name>=<v>` (one delimited listing).
async fn child_values(store: &Store, dir: &Path, name: &str) -> Result<Vec<String>> {
    let dirs = store.list_dirs(dir).await?;
    let mut values: Vec<String> = dirs
        .iter()
        .filter_map(|p| field_value(p.filename()?, name).map(str::to_string))
        .collect();
    values.sort();
    Ok(values)
}

/// A partition a GC run could not collect.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcFailure {
    /// The partition.
    pub partition: String,
    /// What failed.
    pub error: String,
}

/// What a GC run over a scope did, partition by partition.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcSummary {
    /// One report per partition found.
    pub partitions: Vec<GcReport>,
    /// Objects deleted in all of them.
    pub deleted: usize,
    /// Incomplete uploads aborted in all of them.
    pub aborted_uploads: usize,
    /// Partitions that could not be collected (a listing failed), with the error.
    pub failed: Vec<GcFailure>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Runs GC on every partition of `scope`.
pub async fn collect_garbage_in(
    store: &Store,
    layout: &KeyLayout,
    scope: &GcScope,
    grace: Duration,
    dry_run: bool,
) -> Result<GcSummary> {
    let mut summary = GcSummary {
        dry_run,
        ..Default::default()
    };
    for partition in find_partitions(store, scope).await? {
        // One partition the store cannot list never stops the others: it is reported.
        match collect_garbage(store, layout, &partition, grace, dry_run).await {
            Ok(report) => {
                summary.deleted += report.deleted;
                summary.aborted_uploads += report.aborted_uploads;
                summary.partitions.push(report);
            }
            Err(e) => {
                tracing::warn!(partition = %partition, error = %e, "gc skipped a partition");
                summary.failed.push(GcFailure {
                    partition: partition.to_string(),
                    error: e.to_string(),
                });
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{CompactedFile, QuarantinedFile, RetiredFile};
    use crate::testing::key;
    use chrono::{TimeZone, Utc};

    fn meta(key: &str, ms: i64) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: Utc.timestamp_millis_opt(ms).single().unwrap(),
            size: 1,
            e_tag: None,
            version: None,
        }
    }

    /// GC aborts a function attempt's upload once initiated longer ago than the grace, any
    /// other (a CLI run's, a fan-out's range) once a day old, never one of unknown age.
    #[test]
    fn abandoned_uploads_by_their_age_on_the_store_clock() {
        let dir = "compacted/tenant=acme/year=2026/month=11/day=29/hour=10";
        let grace = Duration::from_secs(900);
        let day_ms = 24 * 3600 * 1000;
        let now_ms = 10 * day_ms;
        let upload = |name: &str, age_ms: Option<i64>| IncompleteUpload {
            key: format!("{dir}/{name}"),
            upload_id: "u".into(),
            initiated_ms: age_ms.map(|age| now_ms - age),
        };
        let function = "part-0a1b-00c0ffee00c0ffee-0badf00d.parquet";
        assert!(is_abandoned_upload(
            &upload(function, Some(900_000)),
            now_ms,
            grace
        ));
        assert!(!is_abandoned_upload(
            &upload(function, Some(899_999)),
            now_ms,
            grace
        ));
        assert!(!is_abandoned_upload(&upload(function, None), now_ms, grace));
        for other in [
            "part-0a1b-00c0ffee00c0ffee-local0badf00d.parquet",
            "part-0a1b-00c0ffee00c0ffee-r00001.parquet",
            "part-0a1b-0123456789abcdef.parquet",
            "runs/00c0ffee00c0ffee/run-00000.parquet",
        ] {
            assert!(!is_abandoned_upload(
                &upload(other, Some(day_ms - 1)),
                now_ms,
                grace
            ));
            assert!(is_abandoned_upload(
                &upload(other, Some(day_ms)),
                now_ms,
                grace
            ));
        }
    }

    #[test]
    fn old_manifest_versions_go_only_once_a_grace_old() {
        // Versions 1-3 committed at 0 on the store's clock, 4-14 just now: four are beyond the
        // ten kept, and of those only the three a grace old go.
        let versions: Vec<(u64, ObjectMeta)> = (1..=14)
            .map(|v| (v, meta(&format!("m/v{v}"), if v > 3 { 950_000 } else { 0 })))
            .collect();
        let manifest = Manifest::empty("p");
        let inputs = GcInputs {
            manifest: &manifest,
            compacted_listing: &[],
            ingest_listing: &[],
            manifest_versions: &versions,
            store_now_ms: 1_000_000,
            grace: Duration::from_secs(900),
        };
        let plan = plan_gc(&inputs);
        assert_eq!(plan.manifests, ["m/v1", "m/v2", "m/v3"]);
        // The young one beyond the ten is garbage a later run takes: the marker stays, until
        // a run a grace later takes it too.
        assert!(garbage_left(&inputs, &plan));
        let later = GcInputs {
            store_now_ms: 2_000_000,
            ..inputs
        };
        assert!(!garbage_left(&later, &plan_gc(&later)));
    }

    #[test]
    fn respects_grace_and_never_touches_live_or_quarantined() {
        let mut m = Manifest::empty("p");
        m.compacted.push(CompactedFile {
            key: key("compacted/p/live.parquet"),
            rows: 1,
            bytes: 1,
            input_set: String::new(),
            range: None,
        });
        // The committers' clocks say the opposite of the store's: only the store's count.
        m.retired.push(RetiredFile {
            key: key("data/p/old.parquet"),
            retired_at_ms: 990_000,
            retired_in: 1,
        });
        m.retired.push(RetiredFile {
            key: key("data/p/recent.parquet"),
            retired_at_ms: 0,
            retired_in: 11,
        });
        m.quarantined.push(QuarantinedFile {
            key: key("data/p/bad.parquet"),
            reason: "x".into(),
        });
        let listing = vec![
            meta("compacted/p/live.parquet", 0),
            meta("compacted/p/orphan-old.parquet", 0),
            meta("compacted/p/orphan-new.parquet", 990_000),
        ];
        // Versions 1-10 committed at 0 on the store's clock, 11 and 12 just now.
        let versions: Vec<(u64, ObjectMeta)> = (1..=12)
            .map(|v| {
                (
                    v,
                    meta(&format!("m/v{v}"), if v > 10 { 950_000 } else { 0 }),
                )
            })
            .collect();
        let ingest = vec![
            meta("data/p/old.parquet", 0),
            meta("data/p/recent.parquet", 0),
            meta("data/p/bad.parquet", 0),
        ];
        let plan = plan_gc(&GcInputs {
            manifest: &m,
            compacted_listing: &listing,
            ingest_listing: &ingest,
            manifest_versions: &versions,
            store_now_ms: 1_000_000,
            grace: Duration::from_secs(900),
        });
        assert_eq!(plan.retired, ["data/p/old.parquet"]);
        assert_eq!(plan.orphans, ["compacted/p/orphan-old.parquet"]);
        assert_eq!(plan.manifests, ["m/v1", "m/v2"]);

        // A fanned-out job's runs and records go only once the whole job has been idle for
        // twice the grace: an old run beside a recent record stays.
        let mut jobs = listing.clone();
        jobs.extend([
            meta("compacted/p/runs/busy/run-00000.parquet", 0),
            meta("compacted/p/runs/busy/run-00001.json", 1_500_000),
            meta("compacted/p/runs/idle/run-00000.parquet", 0),
            meta("compacted/p/runs/idle/plan.json", 0),
        ]);
        let plan = plan_gc(&GcInputs {
            manifest: &m,
            compacted_listing: &jobs,
            ingest_listing: &ingest,
            manifest_versions: &versions,
            store_now_ms: 2_000_000,
            grace: Duration::from_secs(900),
        });
        assert_eq!(
            plan.orphans,
            [
                "compacted/p/orphan-old.parquet",
                "compacted/p/orphan-new.parquet",
                "compacted/p/runs/idle/run-00000.parquet",
                "compacted/p/runs/idle/plan.json",
            ]
        );

        // An output a job at work holds stays, however old; once the job's directory has
        // been idle for twice the grace, the output and the hold go.
        let mut held = listing.clone();
        held.extend([
            meta("compacted/p/part-slow-upload.parquet", 0),
            meta(
                "compacted/p/runs/attempt/holds/part-slow-upload.parquet",
                1_500_000,
            ),
        ]);
        let plan_at = |now_ms: i64| {
            plan_gc(&GcInputs {
                manifest: &m,
                compacted_listing: &held,
                ingest_listing: &ingest,
                manifest_versions: &versions,
                store_now_ms: now_ms,
                grace: Duration::from_secs(900),
            })
            .orphans
        };
        assert_eq!(
            plan_at(2_000_000),
            [
                "compacted/p/orphan-old.parquet",
                "compacted/p/orphan-new.parquet"
            ]
        );
        let idle = 1_500_000 + 2 * 900_000;
        assert_eq!(
            plan_at(idle),
            [
                "compacted/p/orphan-old.parquet",
                "compacted/p/orphan-new.parquet",
                "compacted/p/part-slow-upload.parquet",
                "compacted/p/runs/attempt/holds/part-slow-upload.parquet",
            ]
        );

        // A retired file already deleted is not planned again.
        let plan = plan_gc(&GcInputs {
            manifest: &m,
            compacted_listing: &listing,
            ingest_listing: &ingest[1..],
            manifest_versions: &versions,
            store_now_ms: 1_000_000,
            grace: Duration::from_secs(900),
        });
        assert!(plan.retired.is_empty(), "{plan:?}");

        // A retirement whose version was pruned is timed by the next version kept.
        m.retired[0].retired_in = 0;
        let plan = plan_gc(&GcInputs {
            manifest: &m,
            compacted_listing: &listing,
            ingest_listing: &ingest,
            manifest_versions: &versions,
            store_now_ms: 1_000_000,
            grace: Duration::from_secs(900),
        });
        assert!(
            plan.retired.is_empty(),
            "unknown: timed by the latest version {plan:?}"
        );
    }
}
