//! One synthetic ingest file as a stream of record batches: times, services, bodies, attributes.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::RecordBatch;
use arrow_array::builder::{
    FixedSizeBinaryBuilder, Int32Builder, Int64Builder, MapBuilder, MapFieldNames, StringBuilder,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::GenerateSpec;
use super::corpus;
use super::service::{Service, services};
use crate::error::{Error, Result};
use crate::partition::PartitionId;
use crate::rng::{SplitMix64, fnv1a, mix64};

/// Number of extra text columns in wide mode.
pub const WIDE_COLUMNS: usize = 40;
/// Bytes of text in each extra column of a wide row.
pub const WIDE_COLUMN_BYTES: usize = 250;
/// Ingest clients hold back lines up to this long before writing them (time jitter).
const MAX_JITTER_NANOS: u64 = 2_000_000_000;
/// One row in this many has no service name.
const NULL_SERVICE_ONE_IN: u64 = 200;
/// A service starts a new trace on one line in this many.
const NEW_TRACE_ONE_IN: u64 = 8;
/// A service jumps elsewhere in its log on one line in this many (otherwise it reads on).
const JUMP_ONE_IN: u64 = 20;

/// The schema of a generated ingest file (the input-row contract of the README's storage layout).
pub fn ingest_schema(wide: bool) -> SchemaRef {
    let entries = Field::new(
        "key_value",
        DataType::Struct(
            vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ]
            .into(),
        ),
        false,
    );
    let mut fields = vec![
        Field::new("time_unix_nano", DataType::Int64, false),
        Field::new("service.name", DataType::Utf8, true),
        Field::new("severity_text", DataType::Utf8, true),
        Field::new("severity_number", DataType::Int32, true),
        Field::new("body", DataType::Utf8, true),
        Field::new("tenant_id", DataType::Utf8, true),
        Field::new("host.name", DataType::Utf8, true),
        Field::new("trace_id", DataType::FixedSizeBinary(16), true),
        Field::new("attributes", DataType::Map(Arc::new(entries), false), true),
    ];
    if wide {
        fields.extend((0..WIDE_COLUMNS).map(|j| Field::new(wide_column(j), DataType::Utf8, true)));
    }
    Arc::new(Schema::new(fields))
}

fn wide_column(j: usize) -> String {
    format!("attr_{j:02}")
}

/// Produces the rows of one ingest file, batch by batch, from a seed fixed by
/// (spec seed, partition, file index): the same inputs give the same rows.
pub(crate) struct FileRows {
    schema: SchemaRef,
    tenant: String,
    wide: bool,
    services: Vec<Service>,
    cumulative_weights: Vec<u64>,
    rng: SplitMix64,
    hour_start: i64,
    slice_start: i64,
    slice_nanos: i64,
    rows_total: usize,
    rows_done: usize,
    cursors: Vec<usize>,
    traces: Vec<[u8; 16]>,
    /// Scratch for one log line of a wide column.
    line: String,
}

impl FileRows {
    /// The generator of file `file_index` of `spec` in `partition`.
    pub(crate) fn new(
        partition: &PartitionId,
        spec: &GenerateSpec,
        file_index: usize,
    ) -> Result<Self> {
        spec.validate()?;
        if file_index >= spec.files {
            return Err(Error::Config {
                message: format!("file index {file_index} is outside 0..{}", spec.files),
            });
        }
        let services = services(spec.services)?;
        let cumulative_weights = services
            .iter()
            .scan(0u64, |sum, s| {
                *sum += s.weight;
                Some(*sum)
            })
            .collect();
        let seed = mix64(
            spec.seed ^ mix64(fnv1a(partition.relative_dir().as_bytes()) ^ file_index as u64),
        );
        let mut rng = SplitMix64::new(seed);
        let cursors = services.iter().map(|s| rng.index(s.lines.len())).collect();
        let traces = services.iter().map(|_| rng.bytes16()).collect();
        let (start, end) = partition.time_range_nanos();
        let hour = i128::from(end - start);
        let slice = |i: usize| start + (hour * i as i128 / spec.files as i128) as i64;
        let (slice_start, slice_end) = (slice(file_index), slice(file_index + 1));
        Ok(Self {
            schema: ingest_schema(spec.wide),
            tenant: partition.tenant().unwrap_or_default().to_string(),
            wide: spec.wide,
            services,
            cumulative_weights,
            rng,
            hour_start: start,
            slice_start,
            slice_nanos: slice_end - slice_start,
            rows_total: spec.rows_per_file,
            rows_done: 0,
            cursors,
            traces,
            line: String::new(),
        })
    }

    /// The schema of every batch.
    pub(crate) fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The next batch of at most `max_rows` rows, or `None` when the file is complete.
    pub(crate) fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let rows = max_rows.min(self.rows_total - self.rows_done);
        if rows == 0 {
            return Ok(None);
        }
        let mut b = Builders::new(rows, self.wide);
        let mut body = String::new();
        for _ in 0..rows {
            self.push_row(&mut b, &mut body)?;
        }
        let batch = RecordBatch::try_new(self.schema(), b.finish())
            .map_err(|e| Error::arrow("assembling a generated batch", e))?;
        Ok(Some(batch))
    }

    fn push_row(&mut self, b: &mut Builders, body: &mut String) -> Result<()> {
        let i = self.rows_done;
        self.rows_done += 1;
        let nominal = self.slice_start
            + (i128::from(self.slice_nanos) * i as i128 / self.rows_total as i128) as i64;
        let jitter = self.rng.below(MAX_JITTER_NANOS) as i64;
        b.time.append_value((nominal - jitter).max(self.hour_start));

        let s = self.pick_service();
        let service = &self.services[s];
        let named = !self.rng.one_in(NULL_SERVICE_ONE_IN);
        b.service
            .append_option(named.then_some(service.name.as_str()));

        let cursor = if self.rng.one_in(JUMP_ONE_IN) {
            self.rng.index(service.lines.len())
        } else {
            (self.cursors[s] + 1) % service.lines.len()
        };
        self.cursors[s] = cursor;
        let row_index = service.lines[cursor];
        let row = &service.dataset.rows[row_index];
        service.dataset.fill_body(row_index, &mut self.rng, body);

        let (severity_text, severity_number) = severity(row.level.as_deref(), body);
        b.severity_text.append_value(severity_text);
        b.severity_number.append_value(severity_number);
        b.body.append_value(body.as_str());
        b.tenant.append_value(&self.tenant);
        let host = &service.hosts[self.rng.index(service.hosts.len())];
        b.host.append_value(host);

        if self.rng.one_in(NEW_TRACE_ONE_IN) {
            self.traces[s] = self.rng.bytes16();
        }
        // Request-serving services trace most lines; the others only a few.
        let has_trace = if service.traced {
            !self.rng.one_in(5)
        } else {
            self.rng.one_in(20)
        };
        if has_trace {
            b.trace
                .append_value(self.traces[s])
                .map_err(|e| Error::arrow("appending a trace id", e))?;
        } else {
            b.trace.append_null();
        }

        for (key, value) in [
            ("component", row.component.as_deref()),
            ("pid", row.pid.as_deref()),
            (
                "event_id",
                Some(row.event_id.as_str()).filter(|e| !e.is_empty()),
            ),
        ] {
            if let Some(value) = value {
                b.attributes.keys().append_value(key);
                b.attributes.values().append_value(value);
            }
        }
        b.attributes
            .append(true)
            .map_err(|e| Error::arrow("appending attributes", e))?;

        for (j, column) in b.wide.iter_mut().enumerate() {
            wide_text(j, &mut self.rng, body, &mut self.line);
            column.append_value(body.as_str());
        }
        Ok(())
    }

    /// A service index drawn with probability proportional to its weight.
    fn pick_service(&mut self) -> usize {
        let total = self.cumulative_weights.last().copied().unwrap_or(0);
        let draw = self.rng.below(total);
        self.cumulative_weights.partition_point(|&c| c <= draw)
    }
}

/// Column builders of one batch.
struct Builders {
    time: Int64Builder,
    service: StringBuilder,
    severity_text: StringBuilder,
    severity_number: Int32Builder,
    body: StringBuilder,
    tenant: StringBuilder,
    host: StringBuilder,
    trace: FixedSizeBinaryBuilder,
    attributes: MapBuilder<StringBuilder, StringBuilder>,
    wide: Vec<StringBuilder>,
}

impl Builders {
    fn new(rows: usize, wide: bool) -> Self {
        let names = MapFieldNames {
            entry: "key_value".to_string(),
            key: "key".to_string(),
            value: "value".to_string(),
        };
        Self {
            time: Int64Builder::with_capacity(rows),
            service: StringBuilder::with_capacity(rows, rows * 16),
            severity_text: StringBuilder::with_capacity(rows, rows * 5),
            severity_number: Int32Builder::with_capacity(rows),
            body: StringBuilder::with_capacity(rows, rows * 120),
            tenant: StringBuilder::with_capacity(rows, rows * 8),
            host: StringBuilder::with_capacity(rows, rows * 28),
            trace: FixedSizeBinaryBuilder::with_capacity(rows, 16),
            attributes: MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new()),
            wide: (0..if wide { WIDE_COLUMNS } else { 0 })
                .map(|_| StringBuilder::with_capacity(rows, rows * WIDE_COLUMN_BYTES))
                .collect(),
        }
    }

    fn finish(mut self) -> Vec<ArrayRef> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.time.finish()),
            Arc::new(self.service.finish()),
            Arc::new(self.severity_text.finish()),
            Arc::new(self.severity_number.finish()),
            Arc::new(self.body.finish()),
            Arc::new(self.tenant.finish()),
            Arc::new(self.host.finish()),
            Arc::new(self.trace.finish()),
            Arc::new(self.attributes.finish()),
        ];
        columns.extend(
            self.wide
                .iter_mut()
                .map(|c| Arc::new(c.finish()) as ArrayRef),
        );
        columns
    }
}

/// About `WIDE_COLUMN_BYTES` of real log text for wide column `j`: consecutive lines of one
/// dataset (each column draws on its own) with re-filled parameters, joined with ` | ` and
/// cut at a character boundary.
fn wide_text(j: usize, rng: &mut SplitMix64, out: &mut String, line: &mut String) {
    out.clear();
    let datasets = corpus::datasets();
    let Some(dataset) = datasets.get((j * 7 + 3) % datasets.len().max(1)) else {
        return;
    };
    if dataset.rows.is_empty() {
        return;
    }
    let mut row = rng.index(dataset.rows.len());
    while out.len() < WIDE_COLUMN_BYTES {
        if !out.is_empty() {
            out.push_str(" | ");
        }
        dataset.fill_body(row, rng, line);
        out.push_str(line);
        row = (row + 1) % dataset.rows.len();
    }
    let mut cut = WIDE_COLUMN_BYTES;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
}

/// OpenTelemetry severity text and number for a dataset's raw level; datasets without
/// levels get one inferred from the line.
fn severity(level: Option<&str>, body: &str) -> (&'static str, i32) {
    let known = match level.map(str::to_ascii_lowercase).as_deref() {
        Some("v" | "verbose" | "trace") => Some(("TRACE", 1)),
        Some("d" | "debug") => Some(("DEBUG", 5)),
        Some("i" | "info" | "notice" | "combo") => Some(("INFO", 9)),
        Some("w" | "warn" | "warning") => Some(("WARN", 13)),
        Some("e" | "error" | "severe" | "failure") => Some(("ERROR", 17)),
        Some("f" | "fatal" | "critical" | "crit") => Some(("FATAL", 21)),
        _ => None,
    };
    known.unwrap_or_else(|| {
        let lower = body.to_ascii_lowercase();
        if ["error", "fail", "exception", "denied"]
            .iter()
            .any(|w| lower.contains(w))
        {
            ("ERROR", 17)
        } else if lower.contains("warn") {
            ("WARN", 13)
        } else {
            ("INFO", 9)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities() {
        assert_eq!(severity(Some("W"), ""), ("WARN", 13));
        assert_eq!(severity(Some("notice"), ""), ("INFO", 9));
        assert_eq!(severity(None, "authentication failure"), ("ERROR", 17));
        assert_eq!(severity(None, "ok"), ("INFO", 9));
    }

    #[test]
    fn wide_text_is_log_text_of_fixed_width() {
        let mut rng = SplitMix64::new(1);
        let (mut text, mut line) = (String::new(), String::new());
        for j in 0..WIDE_COLUMNS {
            wide_text(j, &mut rng, &mut text, &mut line);
            assert!(text.len() <= WIDE_COLUMN_BYTES && text.len() > WIDE_COLUMN_BYTES - 4);
            assert!(text.chars().filter(|c| c.is_ascii_alphabetic()).count() > 50);
        }
    }
}
