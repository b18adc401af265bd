//! The ingest key template: how a writer lays its partitions out in keys (`--layout`,
//! `OURIOS_LAYOUT`), parsed once, then used both ways: to format a partition's directory and
//! to read a partition out of a key.
//!
//! ```text
//! data/tenant={tenant}/year=%Y/month=%m/day=%d/hour=%H     this project's default
//! logs/dt=%Y%m%d/hour=%H                                  Vector's aws_s3 sink, Hive style
//! logs/%Y/%m/%d/%H                                        Firehose's default prefix (no tenant)
//! logs/year=%Y/month=%m/day=%d/hr=%H/min=%M               Fluent Bit, minute sub-partitions
//! ```
//!
//! Placeholders: `%Y` (4 digits), `%m`, `%d`, `%H`, `%M` (2 digits each, UTC) and `{tenant}`
//! (1-128 of letters, digits, `-`, `_`, `.`). The template's literal head (its segments without
//! placeholders) is the ingest prefix. `%Y %m %d %H` each appear once; `{tenant}` at most once,
//! before the segment holding `%H`; `%M` at most once, alone with literals in the last segment,
//! after the hour's: files in the hour's directory and in its minute directories are one
//! partition. Every key is matched strictly: fixed widths, no normalisation.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Timelike, Utc};

use crate::error::{Error, Result};

/// The default template: this project's own layout under `data/`.
pub const DEFAULT_TEMPLATE: &str = "data/tenant={tenant}/year=%Y/month=%m/day=%d/hour=%H";

/// One part of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    Tenant,
    Year,
    Month,
    Day,
    Hour,
    Minute,
}

impl Token {
    /// Digits of a time placeholder; `None` for the tenant and literals.
    fn width(&self) -> Option<usize> {
        match self {
            Token::Year => Some(4),
            Token::Month | Token::Day | Token::Hour | Token::Minute => Some(2),
            Token::Literal(_) | Token::Tenant => None,
        }
    }
}

/// One `/`-separated part of the template below its head.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment(Vec<Token>);

/// What one key's directory segments say.
#[derive(Debug, Default)]
struct Fields {
    tenant: Option<String>,
    year: Option<u32>,
    month: Option<u32>,
    day: Option<u32>,
    hour: Option<u32>,
    minute: Option<u32>,
}

/// A key read through the template: its partition's tenant and hour, and the file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateKey {
    /// The tenant, when the template has one.
    pub tenant: Option<String>,
    /// The first instant of the hour.
    pub hour: DateTime<Utc>,
    /// The minute directory the file sits in, when it sits in one.
    pub minute: Option<u32>,
    /// The file's name.
    pub file: String,
}

/// A parsed ingest key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    head: String,
    /// The segments below the head, through the one holding `%H`.
    hour_path: Vec<Segment>,
    /// The minute sub-partition's segment, after the hour's.
    minute: Option<Segment>,
}

impl Default for KeyTemplate {
    fn default() -> Self {
        Self::parse(DEFAULT_TEMPLATE).expect("the default template parses")
    }
}

impl KeyTemplate {
    /// Parses `template`; an error names what cannot work (no hour, an unknown placeholder,
    /// `%M` not last, an empty head, ...).
    pub fn parse(template: &str) -> Result<Self> {
        let bad = |why: String| Error::Config {
            message: format!("layout {template:?}: {why}"),
        };
        let trimmed = template.trim_matches('/');
        let mut segments = Vec::new();
        for part in trimmed.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Err(bad(format!("segment {part:?} is not a directory name")));
            }
            segments.push(Segment(tokens(part).map_err(&bad)?));
        }
        let head_len = segments
            .iter()
            .take_while(|s| s.0.iter().all(|t| matches!(t, Token::Literal(_))))
            .count();
        if head_len == 0 {
            return Err(bad(
                "it must start with a literal prefix (the ingest prefix), e.g. logs/".into(),
            ));
        }
        let head = trimmed
            .split('/')
            .take(head_len)
            .collect::<Vec<_>>()
            .join("/");
        let rest: Vec<Segment> = segments.split_off(head_len);
        let count = |token: &Token| -> usize {
            rest.iter()
                .map(|s| s.0.iter().filter(|t| *t == token).count())
                .sum()
        };
        for (token, name) in [
            (Token::Year, "%Y"),
            (Token::Month, "%m"),
            (Token::Day, "%d"),
            (Token::Hour, "%H"),
        ] {
            match count(&token) {
                1 => {}
                0 => return Err(bad(format!("it has no {name}: a partition is an hour"))),
                _ => return Err(bad(format!("{name} appears more than once"))),
            }
        }
        if count(&Token::Tenant) > 1 {
            return Err(bad("{tenant} appears more than once".into()));
        }
        let hour_at = rest
            .iter()
            .position(|s| s.0.contains(&Token::Hour))
            .ok_or_else(|| bad("it has no %H".into()))?;
        let (hour_path, after) = rest.split_at(hour_at + 1);
        let minute = match after {
            [] => None,
            [segment] if segment.0.contains(&Token::Minute) => Some(segment.clone()),
            _ => {
                return Err(bad(
                    "nothing but one minute segment (%M) may follow the hour's".into(),
                ));
            }
        };
        if count(&Token::Minute) > 1 || (count(&Token::Minute) == 1 && minute.is_none()) {
            return Err(bad(
                "%M must appear once, in a segment of its own after the hour's (minutes belong to their hour)".into(),
            ));
        }
        if let Some(segment) = &minute
            && segment
                .0
                .iter()
                .any(|t| !matches!(t, Token::Minute | Token::Literal(_)))
        {
            return Err(bad("the minute segment holds only %M and literals".into()));
        }
        if let Some(tenant_at) = hour_path.iter().position(|s| s.0.contains(&Token::Tenant)) {
            let segment = &hour_path[tenant_at].0;
            let at = segment.iter().position(|t| *t == Token::Tenant);
            let hour_in = segment.iter().position(|t| *t == Token::Hour);
            if let (Some(at), Some(hour_in)) = (at, hour_in)
                && at > hour_in
            {
                return Err(bad("{tenant} must come before the hour".into()));
            }
        }
        let head_clash = [
            crate::partition::COMPACTED_PREFIX,
            crate::partition::METADATA_PREFIX,
        ]
        .iter()
        .any(|own| head == *own || head.starts_with(&format!("{own}/")));
        if head_clash {
            return Err(bad(format!(
                "its prefix {head:?} overlaps {}/ or {}/, where the compactor writes",
                crate::partition::COMPACTED_PREFIX,
                crate::partition::METADATA_PREFIX
            )));
        }
        Ok(Self {
            source: template.to_string(),
            head,
            hour_path: hour_path.to_vec(),
            minute,
        })
    }

    /// The template as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The literal head: the ingest prefix, no slash at either end.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// Whether partitions have a tenant.
    pub fn has_tenant(&self) -> bool {
        self.hour_path.iter().any(|s| s.0.contains(&Token::Tenant))
    }

    /// Whether the hour's files may sit in minute directories.
    pub fn has_minutes(&self) -> bool {
        self.minute.is_some()
    }

    /// The directory of the hour `hour` (any instant in it) of `tenant`: the head, then the
    /// template's segments through the hour's. `tenant` is ignored by a template without one.
    pub fn hour_dir(&self, tenant: Option<&str>, hour: DateTime<Utc>) -> String {
        let mut dir = self.head.clone();
        for segment in &self.hour_path {
            dir.push('/');
            dir.push_str(&format_segment(segment, tenant, hour, 0));
        }
        dir
    }

    /// The directory that lists the tenants of hour `hour`: the head and the segments before
    /// the tenant's; `None` without a tenant.
    pub fn tenants_dir(&self, hour: DateTime<Utc>) -> Option<String> {
        let at = self
            .hour_path
            .iter()
            .position(|s| s.0.contains(&Token::Tenant))?;
        let mut dir = self.head.clone();
        for segment in &self.hour_path[..at] {
            dir.push('/');
            dir.push_str(&format_segment(segment, None, hour, 0));
        }
        Some(dir)
    }

    /// Whether the tenants' directory does not depend on the hour (one listing finds every
    /// tenant of every hour).
    pub fn tenants_dir_is_fixed(&self) -> bool {
        self.hour_path
            .iter()
            .take_while(|s| !s.0.contains(&Token::Tenant))
            .all(|s| s.0.iter().all(|t| matches!(t, Token::Literal(_))))
    }

    /// The tenant a child directory name of [`Self::tenants_dir`] names, if it is one.
    pub fn tenant_of_dir(&self, name: &str) -> Option<String> {
        let segment = self
            .hour_path
            .iter()
            .find(|s| s.0.contains(&Token::Tenant))?;
        let mut fields = Fields::default();
        match_segment(&segment.0, name, &mut fields).ok()?;
        fields.tenant
    }

    /// The minute directory's name for minute `minute` (`min=07`), when minutes are used.
    pub fn minute_dir(&self, minute: u32) -> Option<String> {
        let segment = self.minute.as_ref()?;
        Some(format_segment(segment, None, DateTime::UNIX_EPOCH, minute))
    }

    /// Whether `name` is one of an hour's minute directories (`min=00` to `min=59`).
    pub fn is_minute_dir(&self, name: &str) -> bool {
        let Some(segment) = &self.minute else {
            return false;
        };
        let mut fields = Fields::default();
        match_segment(&segment.0, name, &mut fields).is_ok()
            && fields.minute.is_some_and(|m| m < 60)
    }

    /// Reads `key` (relative to the store root) through the template: `Ok(None)` when it is
    /// not under the head, an error naming the key when it is but does not follow the
    /// template below it.
    pub fn read_key(&self, key: &str) -> Result<Option<TemplateKey>> {
        let Some(rest) = key
            .strip_prefix(self.head.as_str())
            .and_then(|r| r.strip_prefix('/'))
        else {
            return Ok(None);
        };
        let bad = |why: String| Error::Partition {
            message: format!(
                "key {key:?} does not follow the layout {:?}: {why}",
                self.source
            ),
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let depth = self.hour_path.len();
        let in_minute = match parts.len() {
            n if n == depth + 1 => false,
            n if n == depth + 2 && self.minute.is_some() => true,
            n => {
                return Err(bad(format!(
                    "{} segments below {}/ where the layout has {}",
                    n,
                    self.head,
                    depth + 1 + usize::from(self.minute.is_some())
                )));
            }
        };
        let mut fields = Fields::default();
        for (segment, part) in self.hour_path.iter().zip(&parts) {
            match_segment(&segment.0, part, &mut fields).map_err(&bad)?;
        }
        if in_minute && let Some(segment) = &self.minute {
            match_segment(&segment.0, parts[depth], &mut fields).map_err(&bad)?;
        }
        let file = parts[parts.len() - 1];
        if file.is_empty() {
            return Err(bad("no file name".into()));
        }
        let (Some(year), Some(month), Some(day), Some(hour)) =
            (fields.year, fields.month, fields.day, fields.hour)
        else {
            return Err(bad("a date or hour field is missing".into()));
        };
        let hour = NaiveDate::from_ymd_opt(year as i32, month, day)
            .and_then(|d| d.and_hms_opt(hour, 0, 0))
            .map(|naive| Utc.from_utc_datetime(&naive))
            .ok_or_else(|| {
                bad(format!(
                    "{year:04}-{month:02}-{day:02} {hour:02}h is no UTC hour"
                ))
            })?;
        if fields.minute.is_some_and(|m| m > 59) {
            return Err(bad("the minute is past 59".into()));
        }
        Ok(Some(TemplateKey {
            tenant: fields.tenant,
            hour,
            minute: fields.minute,
            file: file.to_string(),
        }))
    }
}

/// The tokens of one template segment.
fn tokens(part: &str) -> std::result::Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut literal = String::new();
    let mut chars = part.chars();
    while let Some(c) = chars.next() {
        let token = match c {
            '%' => match chars.next() {
                Some('Y') => Token::Year,
                Some('m') => Token::Month,
                Some('d') => Token::Day,
                Some('H') => Token::Hour,
                Some('M') => Token::Minute,
                Some(other) => {
                    return Err(format!(
                        "unknown placeholder %{other} (known: %Y %m %d %H %M {{tenant}})"
                    ));
                }
                None => return Err("a % ends a segment".into()),
            },
            '{' => {
                let rest = chars.as_str();
                let Some(end) = rest.find('}') else {
                    return Err(format!("an unclosed {{ in {part:?}"));
                };
                let name = &rest[..end];
                chars = rest[end + 1..].chars();
                match name {
                    "tenant" => Token::Tenant,
                    _ => {
                        return Err(format!(
                            "unknown placeholder {{{name}}} (known: {{tenant}})"
                        ));
                    }
                }
            }
            _ => {
                literal.push(c);
                continue;
            }
        };
        push_literal(&mut tokens, &mut literal)?;
        if matches!(tokens.last(), Some(Token::Tenant)) {
            return Err("{tenant} must be followed by a literal or end its segment".into());
        }
        if token == Token::Tenant && tokens.last().is_some_and(|t| t.width().is_some()) {
            return Err("{tenant} must not follow another placeholder directly".into());
        }
        tokens.push(token);
    }
    push_literal(&mut tokens, &mut literal)?;
    Ok(tokens)
}

/// Ends the literal run `literal` (if any) as a token. A literal after the tenant ends the
/// tenant: it must not start with a character a tenant name may hold.
fn push_literal(tokens: &mut Vec<Token>, literal: &mut String) -> std::result::Result<(), String> {
    if literal.is_empty() {
        return Ok(());
    }
    if matches!(tokens.last(), Some(Token::Tenant))
        && literal.starts_with(|c: char| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "{{tenant}} is followed by {literal:?}, which a tenant name may hold"
        ));
    }
    tokens.push(Token::Literal(std::mem::take(literal)));
    Ok(())
}

/// `segment` written for `tenant`, `hour` and `minute`.
fn format_segment(
    segment: &Segment,
    tenant: Option<&str>,
    hour: DateTime<Utc>,
    minute: u32,
) -> String {
    let mut out = String::new();
    for token in &segment.0 {
        match token {
            Token::Literal(text) => out.push_str(text),
            Token::Tenant => out.push_str(tenant.unwrap_or_default()),
            Token::Year => out.push_str(&format!("{:04}", hour.year())),
            Token::Month => out.push_str(&format!("{:02}", hour.month())),
            Token::Day => out.push_str(&format!("{:02}", hour.day())),
            Token::Hour => out.push_str(&format!("{:02}", hour.hour())),
            Token::Minute => out.push_str(&format!("{minute:02}")),
        }
    }
    out
}

/// Matches one directory name against a segment's tokens, recording the fields it holds; a
/// field seen twice must agree.
fn match_segment(
    tokens: &[Token],
    name: &str,
    fields: &mut Fields,
) -> std::result::Result<(), String> {
    let mut rest = name;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Literal(text) => {
                rest = rest
                    .strip_prefix(text.as_str())
                    .ok_or_else(|| format!("{name:?} lacks {text:?}"))?;
            }
            Token::Tenant => {
                let end = match tokens.get(i + 1) {
                    Some(Token::Literal(next)) => rest
                        .find(next.as_str())
                        .ok_or_else(|| format!("{name:?} lacks {next:?} after the tenant"))?,
                    _ => rest.len(),
                };
                let tenant = &rest[..end];
                crate::partition::validate_tenant(tenant).map_err(|e| e.to_string())?;
                fields.tenant = Some(tenant.to_string());
                rest = &rest[end..];
            }
            time => {
                let width = time.width().unwrap_or(2);
                let digits = rest
                    .get(..width)
                    .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| format!("{name:?}: expected {width} digits"))?;
                let value: u32 = digits
                    .parse()
                    .map_err(|_| format!("{name:?}: bad number"))?;
                let slot = match time {
                    Token::Year => &mut fields.year,
                    Token::Month => &mut fields.month,
                    Token::Day => &mut fields.day,
                    Token::Hour => &mut fields.hour,
                    _ => &mut fields.minute,
                };
                *slot = Some(value);
                rest = &rest[width..];
            }
        }
    }
    match rest.is_empty() {
        true => Ok(()),
        false => Err(format!("{name:?} has {rest:?} left over")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a time")
            .with_timezone(&Utc)
    }

    #[test]
    fn the_writers_layouts_format_and_read_back() {
        let hour = at("2026-11-29T10:00:00Z");
        for (template, tenant, dir) in [
            (
                DEFAULT_TEMPLATE,
                Some("acme"),
                "data/tenant=acme/year=2026/month=11/day=29/hour=10",
            ),
            ("logs/dt=%Y%m%d/hour=%H", None, "logs/dt=20261129/hour=10"),
            ("logs/%Y/%m/%d/%H", None, "logs/2026/11/29/10"),
            (
                "logs/year=%Y/month=%m/day=%d/hr=%H/min=%M",
                None,
                "logs/year=2026/month=11/day=29/hr=10",
            ),
            (
                "raw/app/{tenant}/%Y/%m/%d/%H",
                Some("a.b-c"),
                "raw/app/a.b-c/2026/11/29/10",
            ),
            (
                "logs/dt=%Y-%m-%d/svc={tenant}/hour=%H",
                Some("web"),
                "logs/dt=2026-11-29/svc=web/hour=10",
            ),
        ] {
            let t = KeyTemplate::parse(template).unwrap_or_else(|e| panic!("{template}: {e}"));
            assert_eq!(
                t.hour_dir(tenant, hour + chrono::Duration::minutes(17)),
                dir
            );
            assert_eq!(t.has_tenant(), tenant.is_some(), "{template}");
            let read = t
                .read_key(&format!("{dir}/f.parquet"))
                .expect("reads")
                .expect("under the head");
            assert_eq!(
                (
                    read.tenant.as_deref(),
                    read.hour,
                    read.file.as_str(),
                    read.minute
                ),
                (tenant, hour, "f.parquet", None),
                "{template}"
            );
        }
    }

    #[test]
    fn minute_directories_belong_to_their_hour() {
        let t = KeyTemplate::parse("logs/year=%Y/month=%m/day=%d/hr=%H/min=%M").expect("parses");
        assert_eq!(t.minute_dir(7).as_deref(), Some("min=07"));
        assert!(t.is_minute_dir("min=07") && !t.is_minute_dir("min=60") && !t.is_minute_dir("x"));
        assert!(!KeyTemplate::default().is_minute_dir("min=07"));
        let read = t
            .read_key("logs/year=2026/month=11/day=29/hr=10/min=07/abc")
            .expect("reads")
            .expect("under the head");
        assert_eq!(read.hour, at("2026-11-29T10:00:00Z"));
        assert_eq!((read.minute, read.file.as_str()), (Some(7), "abc"));
        for key in [
            "logs/year=2026/month=11/day=29/hr=10/min=60/abc",
            "logs/year=2026/month=11/day=29/hr=10/minute=07/abc",
            "logs/year=2026/month=11/day=29/hr=10/min=07/x/abc",
        ] {
            assert!(t.read_key(key).is_err(), "{key}");
        }
    }

    #[test]
    fn keys_are_read_strictly_and_others_are_not_under_the_head() {
        let t = KeyTemplate::default();
        assert_eq!(
            t.read_key("compacted/tenant=a/x.parquet").expect("ok"),
            None
        );
        assert_eq!(t.read_key("datax/tenant=a/x.parquet").expect("ok"), None);
        for key in [
            "data/tenant=acme/year=2026/month=13/day=29/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=02/day=30/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=1/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=24/f.parquet",
            "data/tenant=/year=2026/month=11/day=29/hour=10/f.parquet",
            "data/tenant=.x/year=2026/month=11/day=29/hour=10/f.parquet",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10",
            "data/tenant=acme/year=2026/month=11/day=29/hour=10/x/f.parquet",
            "data/acme/year=2026/month=11/day=29/hour=10/f.parquet",
        ] {
            let error = t.read_key(key).expect_err(key);
            assert!(error.to_string().contains(key), "{error}");
        }
    }

    #[test]
    fn templates_that_cannot_work_fail_naming_the_problem() {
        for (template, says) in [
            ("logs/%Y/%m/%d", "no %H"),
            ("logs/%Y/%m/%d/%H/%Q", "unknown placeholder %Q"),
            ("logs/{team}/%Y/%m/%d/%H", "unknown placeholder {team}"),
            ("logs/%Y/%m/%d/min=%M/%H", "%M"),
            ("logs/%Y/%m/%d/%H%M", "%M"),
            ("%Y/%m/%d/%H", "literal prefix"),
            ("compacted/%Y/%m/%d/%H", "overlaps"),
            ("_compaction/x/%Y/%m/%d/%H", "overlaps"),
            ("logs/%Y/%m/%d/%H/{tenant}", "follow the hour"),
            ("logs/%Y/%m/%d/%H-{tenant}", "before the hour"),
            ("logs/{tenant}%Y/%m/%d/%H", "followed by a literal"),
            ("logs/%d{tenant}=/%Y/%m/%H", "follow another placeholder"),
            ("logs/{tenant/%Y/%m/%d/%H", "unclosed"),
            ("logs/{tenant}x/%Y/%m/%d/%H", "which a tenant name may hold"),
            ("logs/%Y/%Y/%m/%d/%H", "more than once"),
            ("logs//%Y/%m/%d/%H", "not a directory name"),
        ] {
            let error = KeyTemplate::parse(template).expect_err(template);
            let text = error.to_string();
            assert!(
                text.contains(says) && text.contains(template),
                "{template}: {text}"
            );
        }
    }

    #[test]
    fn tenants_are_listed_where_the_template_puts_them() {
        let hour = at("2026-11-29T10:00:00Z");
        let fixed = KeyTemplate::default();
        assert_eq!(fixed.tenants_dir(hour).as_deref(), Some("data"));
        assert!(fixed.tenants_dir_is_fixed());
        assert_eq!(fixed.tenant_of_dir("tenant=acme").as_deref(), Some("acme"));
        assert_eq!(fixed.tenant_of_dir("acme"), None);
        let dated = KeyTemplate::parse("logs/dt=%Y%m%d/svc={tenant}/hour=%H").expect("parses");
        assert_eq!(dated.tenants_dir(hour).as_deref(), Some("logs/dt=20261129"));
        assert!(!dated.tenants_dir_is_fixed());
        let none = KeyTemplate::parse("logs/%Y/%m/%d/%H").expect("parses");
        assert_eq!(none.tenants_dir(hour), None);
    }
}
