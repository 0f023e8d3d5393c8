//! Log output through `tracing`: readable on a terminal, journal-friendly
//! under systemd (no colours, no timestamps: the journal adds its own), or
//! JSON lines for log shippers. `RUST_LOG` overrides the configured level.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LoggingSettings};
use crate::daemon::systemd;

/// Installs the global subscriber. The level is a level name or an
/// `EnvFilter` directive such as `info,holdfast::seglog=debug`.
pub fn init(settings: &LoggingSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let terminal = std::io::stderr().is_terminal();
    let result = match settings.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Auto if systemd::under_journal() || !terminal => {
            builder.with_ansi(false).without_time().try_init()
        }
        LogFormat::Auto => builder.with_ansi(true).try_init(),
        LogFormat::Text => builder.with_ansi(false).try_init(),
    };
    // A subscriber already installed (tests) is not an error.
    let _ = result;
}
