//! Tracing set-up shared by the command line and both functions (feature `logging`).

use std::io::IsTerminal;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where the log lines go, which decides their format and default level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStyle {
    /// A Lambda function: JSON lines on stderr with the current span and its parents, no
    /// time (CloudWatch stamps each line), `info` and above by default.
    Function,
    /// The command line: `warn` and above by default, as JSON lines when `json`, else as
    /// text coloured on a terminal unless `NO_COLOR` is set (<https://no-color.org>).
    Cli {
        /// JSON lines instead of text.
        json: bool,
    },
}

/// Installs the global subscriber ([`subscriber`]).
pub fn init_tracing(style: LogStyle, lookup: &dyn Fn(&str) -> Option<String>) {
    subscriber(style, lookup).init();
}

/// The subscriber of `style`. `lookup` reads the environment: `OURIOS_LOG` (see
/// [`log_filter`]) and `NO_COLOR`.
pub fn subscriber(
    style: LogStyle,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Box<dyn tracing::Subscriber + Send + Sync> {
    let filter = log_filter(style, lookup("OURIOS_LOG").as_deref());
    // The format's own level would stop at `info` before the filter is asked.
    let builder = (tracing_subscriber::fmt())
        .with_writer(std::io::stderr)
        .with_max_level(tracing::level_filters::LevelFilter::TRACE);
    match style {
        LogStyle::Function => Box::new(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .without_time()
                .finish()
                .with(filter),
        ),
        LogStyle::Cli { json: true } => Box::new(builder.json().finish().with(filter)),
        LogStyle::Cli { json: false } => {
            let colour = std::io::stderr().is_terminal() && lookup("NO_COLOR").is_none();
            Box::new(builder.with_ansi(colour).finish().with(filter))
        }
    }
}

/// The filter `OURIOS_LOG` sets: comma-separated `target=level` directives and at most one bare
/// level for every other target (`debug`, `warn,ourios_compaction::store=debug`); a target
/// covers the modules under it; empty directives are skipped (an empty one would otherwise name
/// every target at `trace`). Unset, empty or unreadable, the style's default level: `info` for
/// a function, `warn` for the command line.
pub fn log_filter(style: LogStyle, directives: Option<&str>) -> Targets {
    let default_level = match style {
        LogStyle::Function => tracing::Level::INFO,
        LogStyle::Cli { .. } => tracing::Level::WARN,
    };
    directives
        .map(|directives| {
            let given: Vec<&str> = directives
                .split(',')
                .map(str::trim)
                .filter(|directive| !directive.is_empty())
                .collect();
            given.join(",")
        })
        .filter(|directives| !directives.is_empty())
        .and_then(|directives| directives.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(default_level))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn the_subscriber_logs_what_ourios_log_enables_below_info() {
        for style in [
            LogStyle::Function,
            LogStyle::Cli { json: true },
            LogStyle::Cli { json: false },
        ] {
            let lookup = |name: &str| {
                (name == "OURIOS_LOG").then(|| "warn,ourios_compaction::store=debug".to_string())
            };
            let enabled = tracing::subscriber::with_default(subscriber(style, &lookup), || {
                (
                    tracing::enabled!(target: "ourios_compaction::store", Level::DEBUG),
                    tracing::enabled!(target: "ourios_compaction::store", Level::TRACE),
                    tracing::enabled!(target: "ourios_compaction::sort", Level::INFO),
                )
            });
            assert_eq!(enabled, (true, false, false), "{style:?}");
        }
    }

    #[test]
    fn unset_empty_or_unreadable_directives_give_the_styles_default_level() {
        let function = log_filter(LogStyle::Function, None);
        assert!(function.would_enable("hyper", &Level::INFO));
        assert!(!function.would_enable("hyper", &Level::DEBUG));
        let cli = log_filter(LogStyle::Cli { json: false }, Some("ourios=loud"));
        assert!(cli.would_enable("ourios_compaction", &Level::WARN));
        assert!(!cli.would_enable("ourios_compaction", &Level::INFO));
        for empty in ["", " ", ","] {
            let filter = log_filter(LogStyle::Function, Some(empty));
            assert!(!filter.would_enable("hyper", &Level::DEBUG), "{empty:?}");
            assert!(filter.would_enable("hyper", &Level::INFO), "{empty:?}");
        }
        let trailing = log_filter(LogStyle::Function, Some("warn, "));
        assert!(!trailing.would_enable("hyper", &Level::INFO));
        assert!(trailing.would_enable("hyper", &Level::WARN));
    }

    #[test]
    fn directives_set_a_default_and_levels_for_targets_and_the_modules_under_them() {
        let filter = log_filter(
            LogStyle::Function,
            Some("warn,ourios_compaction::store=debug"),
        );
        assert!(filter.would_enable("ourios_compaction::store::aws_api", &Level::DEBUG));
        assert!(filter.would_enable("ourios_compaction::compact", &Level::WARN));
        assert!(!filter.would_enable("ourios_compaction::compact", &Level::INFO));
        let only = log_filter(
            LogStyle::Cli { json: true },
            Some("ourios_compaction=debug"),
        );
        assert!(only.would_enable("ourios_compaction::compact", &Level::DEBUG));
        assert!(!only.would_enable("hyper", &Level::ERROR));
    }
}
