//! The plain rewrite: decode and re-encode a partition with the output writer's settings but
//! no sort. It exists to measure what sorting costs (the benchmark's baseline).

use std::sync::Arc;
use std::time::Instant;

use object_store::path::Path;

use crate::error::{Error, Result};
use crate::input::schema::{conform, unify};
use crate::input::{DictionaryColumns, RowWidth, SizedBatches, StagedInput, check_inputs};
use crate::manifest::{live_set, load_latest};
use crate::options::CompactOptions;
use crate::output::threshold::resolve_row_group_bytes;
use crate::output::writer::{OutputWriter, partition_output_settings};
use crate::partition::{KeyLayout, PartitionId};
use crate::scratch::ScratchDir;
use crate::sort::sink::with_sink_thread;
use crate::store::Store;
use crate::store::upload::{job_parts, start_upload};

/// What a plain rewrite did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RewriteReport {
    /// Rows written.
    pub rows: u64,
    /// Bytes of the written file.
    pub bytes: u64,
    /// Wall time.
    pub duration_ms: u64,
}

/// Rewrites the live ingest files of a local-directory partition to `output_key`, unsorted.
pub async fn rewrite_plain(
    store: &Store,
    layout: &KeyLayout,
    partition: &PartitionId,
    options: &CompactOptions,
    output_key: &Path,
) -> Result<RewriteReport> {
    let started = Instant::now();
    let manifest = load_latest(store, layout, partition).await?;
    let dir = layout.ingest_dir(partition);
    let listing = store.list_sorted(&dir).await?;
    let live = live_set(layout, &dir, &listing, &manifest);
    let mut staged = Vec::new();
    for meta in &live.ingest {
        let local = store
            .read_in_place(&meta.location)
            .ok_or_else(|| Error::Config {
                message: "the plain rewrite reads a local directory store".into(),
            })?;
        staged.push(StagedInput {
            key: meta.location.clone(),
            name: meta.location.filename().unwrap_or_default().to_string(),
            size: meta.size,
            local,
            is_compacted: false,
        });
    }
    // Checked as the compactor checks them (on two threads where it uses two), so both sides
    // pay the same.
    let mut checked = Vec::new();
    for (staged, verdict) in check_inputs(
        staged,
        partition,
        &options.keys,
        options.settings.budget_bytes,
        options.settings.two_threads(),
    )? {
        checked.push(verdict.map_err(|reason| Error::Config {
            message: format!("{}: {reason}", staged.key),
        })?);
    }
    let schemas: Vec<_> = checked
        .iter()
        .map(|c| (c.staged.name.as_str(), c.schema.as_ref()))
        .collect();
    let (unified, _) = unify(&schemas, &options.keys);
    let unified = unified.ok_or_else(|| Error::Config {
        message: "nothing to rewrite".into(),
    })?;
    let input_bytes = checked.iter().map(|c| c.staged.size).sum();
    let row_group_bytes = resolve_row_group_bytes(options.settings.row_group_bytes, input_bytes);
    let scratch = ScratchDir::create_with_limit(
        &options.settings.scratch_dir,
        options.settings.scratch_limit_bytes,
    )?;
    let (properties, blocks) =
        partition_output_settings(&unified, options, row_group_bytes, &scratch)?;
    let parts = job_parts(options);
    let (upload, task) = start_upload(
        Arc::clone(store.object_store()),
        output_key.clone(),
        None,
        parts,
    );
    let read_target = options.budget().shares().read_target_bytes;
    let rows = tokio::task::block_in_place(|| -> Result<u64> {
        let mut writer =
            OutputWriter::try_new(upload, Arc::clone(&unified.schema), properties, blocks)?;
        // The same two-thread split as the compactor: decode here, encode on the sink thread.
        with_sink_thread(&mut writer, |sink| -> Result<()> {
            let mut width = RowWidth::default();
            let plain = DictionaryColumns::default();
            for input in &checked {
                let mut batches =
                    SizedBatches::open_with_dictionaries(input, read_target, &plain, &width)?;
                for batch in batches.by_ref() {
                    sink.write_chunk(&conform(&batch?, &unified.schema)?)?;
                }
                width = batches.width().clone();
            }
            Ok(())
        })??;
        let rows = writer.rows();
        writer.finish()?;
        writer
            .inner_mut()?
            .finish()
            .map_err(|e| Error::scratch("upload stream", e))?;
        Ok(rows)
    })?;
    let bytes = task
        .await
        .map_err(|e| Error::invariant(format!("upload task failed: {e}")))??
        .bytes;
    Ok(RewriteReport {
        rows,
        bytes,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}
