//! Tracing set-up shared by the command line and both functions (feature `logging`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

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

/// Installs the global subscriber. `lookup` reads the environment: `OURIOS_LOG` (an
/// `EnvFilter` directive such as `debug` or `ourios_compaction=trace`) and `NO_COLOR`.
pub fn init_tracing(style: LogStyle, lookup: &dyn Fn(&str) -> Option<String>) {
    let default_level = match style {
        LogStyle::Function => "info",
        LogStyle::Cli { .. } => "warn",
    };
    let filter = lookup("OURIOS_LOG")
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match style {
        LogStyle::Function => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .without_time()
            .init(),
        LogStyle::Cli { json: true } => builder.json().init(),
        LogStyle::Cli { json: false } => {
            let colour = std::io::stderr().is_terminal() && lookup("NO_COLOR").is_none();
            builder.with_ansi(colour).init();
        }
    }
}
