//! The embedded LogHub sample: CSV parsing, per-dataset log rows, and template re-filling.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::rng::SplitMix64;

/// One embedded LogHub dataset: its name and CSV text (`LineId,...,Content,EventId,EventTemplate`).
struct Source {
    name: &'static str,
    csv: &'static str,
}

macro_rules! source {
    ($name:literal, $file:literal) => {
        Source {
            name: $name,
            csv: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/corpus/loghub/",
                $file
            )),
        }
    };
}

/// Every embedded dataset, in a fixed order (service derivation depends on it).
const SOURCES: &[Source] = &[
    source!("Android", "Android_2k.log_structured.csv"),
    source!("Apache", "Apache_2k.log_structured.csv"),
    source!("BGL", "BGL_2k.log_structured.csv"),
    source!("HDFS", "HDFS_2k.log_structured.csv"),
    source!("HPC", "HPC_2k.log_structured.csv"),
    source!("Hadoop", "Hadoop_2k.log_structured.csv"),
    source!("HealthApp", "HealthApp_2k.log_structured.csv"),
    source!("Linux", "Linux_2k.log_structured.csv"),
    source!("Mac", "Mac_2k.log_structured.csv"),
    source!("OpenSSH", "OpenSSH_2k.log_structured.csv"),
    source!("OpenStack", "OpenStack_2k.log_structured.csv"),
    source!("Proxifier", "Proxifier_2k.log_structured.csv"),
    source!("Spark", "Spark_2k.log_structured.csv"),
    source!("Thunderbird", "Thunderbird_2k.log_structured.csv"),
    source!("Windows", "Windows_2k.log_structured.csv"),
    source!("Zookeeper", "Zookeeper_2k.log_structured.csv"),
];

/// One parsed log line of a dataset.
#[derive(Debug)]
pub(crate) struct LogRow {
    /// The raw level column (`INFO`, `W`, `notice`, ...), when the dataset has one.
    pub(crate) level: Option<String>,
    /// The component or program that logged the line.
    pub(crate) component: Option<String>,
    /// The process id column, when present.
    pub(crate) pid: Option<String>,
    /// The recorded event (template) id, e.g. `E10`.
    pub(crate) event_id: String,
    /// The original line.
    pub(crate) content: String,
    /// Extra field some datasets use to tell sub-services apart (OpenStack's log file name).
    pub(crate) log_file: Option<String>,
    /// The template split at its `<*>` parameters.
    segments: Vec<String>,
    /// The parameter values of this line, when it matched its template.
    params: Option<Vec<String>>,
}

/// One dataset: its rows and, per event id, the rows whose parameters can be reused.
#[derive(Debug)]
pub(crate) struct Dataset {
    /// The LogHub dataset name (`HDFS`, `Spark`, ...).
    pub(crate) name: &'static str,
    /// Rows in file order.
    pub(crate) rows: Vec<LogRow>,
    /// Per event id, the rows whose parameters match its template.
    param_pools: Vec<Vec<usize>>,
    /// Per row, its event id's pool in `param_pools`.
    pool_of_row: Vec<Option<usize>>,
}

/// The parsed corpus, built once per process.
pub(crate) fn datasets() -> &'static [Dataset] {
    static CORPUS: OnceLock<Vec<Dataset>> = OnceLock::new();
    CORPUS.get_or_init(|| SOURCES.iter().map(parse_dataset).collect())
}

/// The dataset with this name.
pub(crate) fn dataset(name: &str) -> Option<&'static Dataset> {
    datasets().iter().find(|d| d.name == name)
}

fn parse_dataset(source: &Source) -> Dataset {
    let mut records = parse_csv(source.csv).into_iter();
    let header = records.next().unwrap_or_default();
    let column = |names: &[&str]| header.iter().position(|h| names.contains(&h.as_str()));
    let level = column(&["Level"]);
    let component = column(&["Component", "Program"]);
    let pid = column(&["Pid", "PID"]);
    let log_file = column(&["Logrecord"]);
    let (content, event_id, template) = (
        column(&["Content"]),
        column(&["EventId"]),
        column(&["EventTemplate"]),
    );
    let mut rows = Vec::new();
    let mut param_pool: HashMap<String, Vec<usize>> = HashMap::new();
    for record in records {
        let field = |i: Option<usize>| {
            i.and_then(|i| record.get(i))
                .filter(|v| !v.is_empty() && v.as_str() != "-")
                .cloned()
        };
        // Some lines carry stray edge spaces their template does not.
        let Some(content) = field(content).map(|c| c.trim().to_string()) else {
            continue;
        };
        let template = field(template).unwrap_or_else(|| content.clone());
        let segments: Vec<String> = template.split("<*>").map(str::to_string).collect();
        let params = match_template(&segments, &content);
        let event_id = field(event_id).unwrap_or_default();
        if params.is_some() {
            param_pool
                .entry(event_id.clone())
                .or_default()
                .push(rows.len());
        }
        rows.push(LogRow {
            level: field(level),
            component: field(component),
            pid: field(pid),
            event_id,
            content,
            log_file: field(log_file),
            segments,
            params,
        });
    }
    // Looked up once per row here rather than by event id for every body generated.
    let mut param_pools = Vec::with_capacity(param_pool.len());
    let mut pool_index = HashMap::with_capacity(param_pool.len());
    for (event_id, pool) in param_pool {
        pool_index.insert(event_id, param_pools.len());
        param_pools.push(pool);
    }
    let pool_of_row = rows
        .iter()
        .map(|row| pool_index.get(&row.event_id).copied())
        .collect();
    Dataset {
        name: source.name,
        rows,
        param_pools,
        pool_of_row,
    }
}

impl Dataset {
    /// A realistic body for `row`: its template with every `<*>` filled by a value seen at
    /// that position in some line of the same template, digit runs sometimes re-drawn.
    pub(crate) fn fill_body(&self, row: usize, rng: &mut SplitMix64, out: &mut String) {
        out.clear();
        let Some(line) = self.rows.get(row) else {
            return;
        };
        let pool = self
            .pool_of_row
            .get(row)
            .copied()
            .flatten()
            .and_then(|p| self.param_pools.get(p));
        let (Some(_), Some(pool)) = (&line.params, pool) else {
            out.push_str(&line.content);
            return;
        };
        for (i, segment) in line.segments.iter().enumerate() {
            out.push_str(segment);
            if i + 1 == line.segments.len() {
                break;
            }
            let donor = pool[rng.index(pool.len())];
            let value = self.rows[donor]
                .params
                .as_ref()
                .and_then(|p| p.get(i))
                .or_else(|| line.params.as_ref().and_then(|p| p.get(i)))
                .map_or("", String::as_str);
            if rng.one_in(2) {
                redraw_digit_runs(value, rng, out);
            } else {
                out.push_str(value);
            }
        }
    }
}

/// Extracts the `<*>` values of `content` given its template split into literal segments.
fn match_template(segments: &[String], content: &str) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let mut tail = content.strip_prefix(first.as_str())?;
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty().then(Vec::new);
    };
    let mut params = Vec::with_capacity(rest.len());
    for segment in middle {
        if segment.is_empty() {
            // Adjacent parameters cannot be told apart: give the first one nothing.
            params.push(String::new());
            continue;
        }
        let at = tail.find(segment.as_str())?;
        params.push(tail[..at].to_string());
        tail = &tail[at + segment.len()..];
    }
    let value = tail.strip_suffix(last.as_str())?;
    params.push(value.to_string());
    Some(params)
}

/// Copies `value`, re-drawing digits while keeping the shape: a whole number of two or more
/// digits (sizes, counts) is re-drawn entirely; elsewhere only runs of five or more digits
/// (ids, block numbers) are, so IP addresses, ports, dates and versions stay as they are.
fn redraw_digit_runs(value: &str, rng: &mut SplitMix64, out: &mut String) {
    let bytes = value.as_bytes();
    let whole_number = bytes.len() >= 2 && bytes.iter().all(u8::is_ascii_digit);
    let min_run = if whole_number { 2 } else { 5 };
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if run >= min_run {
            for k in 0..run {
                let low = u64::from(k == 0);
                out.push(char::from(b'0' + (low + rng.below(10 - low)) as u8));
            }
            i += run;
        } else if run > 0 {
            out.push_str(&value[i..i + run]);
            i += run;
        } else {
            // Text up to the next digit, copied whole (a digit is ASCII, so this ends at a
            // character boundary).
            let end = bytes[i..]
                .iter()
                .position(u8::is_ascii_digit)
                .map_or(bytes.len(), |at| i + at);
            out.push_str(&value[i..end]);
            i = end;
        }
    }
}

/// Parses RFC 4180 CSV: fields separated by commas, optionally double-quoted, `""` inside
/// quotes for a quote; records end at a newline outside quotes (`\r\n` accepted).
pub(crate) fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut in_quotes = false;
    let mut at_field_start = true;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if at_field_start => {
                in_quotes = true;
                at_field_start = false;
            }
            ',' => {
                record.push(std::mem::take(&mut field));
                at_field_start = true;
            }
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                at_field_start = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            _ => {
                field.push(c);
                at_field_start = false;
            }
        }
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_and_commas() {
        let text = "a,b,c\n1,\"x, \"\"y\"\"\",3\r\n2,,\"\"\n";
        assert_eq!(
            parse_csv(text),
            vec![
                vec!["a", "b", "c"],
                vec!["1", "x, \"y\"", "3"],
                vec!["2", "", ""],
            ]
        );
        assert_eq!(parse_csv("a,b"), vec![vec!["a", "b"]]);
    }

    #[test]
    fn every_dataset_parses_with_templates() {
        for dataset in datasets() {
            assert!(
                dataset.rows.len() >= 400,
                "{} has {}",
                dataset.name,
                dataset.rows.len()
            );
            let matched = dataset.rows.iter().filter(|r| r.params.is_some()).count();
            assert!(
                matched * 10 >= dataset.rows.len() * 9,
                "{}: only {matched} of {} lines match their template",
                dataset.name,
                dataset.rows.len()
            );
        }
    }

    #[test]
    fn template_matching_and_filling() {
        let segments: Vec<String> = "PacketResponder <*> for block blk_<*> terminating"
            .split("<*>")
            .map(str::to_string)
            .collect();
        assert_eq!(
            match_template(&segments, "PacketResponder 1 for block blk_-69 terminating"),
            Some(vec!["1".to_string(), "-69".to_string()])
        );
        assert_eq!(match_template(&segments, "something else"), None);

        let hdfs = dataset("HDFS").expect("HDFS is embedded");
        let row = hdfs
            .rows
            .iter()
            .position(|r| r.event_id == "E10")
            .expect("HDFS has E10 lines");
        let mut rng = SplitMix64::new(3);
        let mut body = String::new();
        for _ in 0..20 {
            hdfs.fill_body(row, &mut rng, &mut body);
            assert!(body.starts_with("PacketResponder "), "{body}");
            assert!(body.ends_with(" terminating"), "{body}");
            assert!(!body.contains("<*>"));
        }
    }

    #[test]
    fn digit_runs_keep_their_shape() {
        let mut rng = SplitMix64::new(9);
        let mut out = String::new();
        redraw_digit_runs(
            "10.250.19.102:50010 blk_38865049064139660",
            &mut rng,
            &mut out,
        );
        assert!(out.starts_with("10.250.19.102:"), "{out}");
        assert_eq!(out.len(), "10.250.19.102:50010 blk_38865049064139660".len());
        assert!(out.contains(" blk_"));
        assert_ne!(out, "10.250.19.102:50010 blk_38865049064139660");

        for (value, changes) in [("2017-10-17", false), ("7", false), ("1893", true)] {
            out.clear();
            redraw_digit_runs(value, &mut rng, &mut out);
            assert_eq!(out.len(), value.len());
            assert_eq!(out != value, changes, "{value} -> {out}");
        }
        assert!(!out.starts_with('0'));
    }
}
