//! `holdfast forget --sink NAME`: ask the daemon to forget the cursor of a
//! sink taken out of the config (see `daemon/forget.rs`).

use std::path::Path;

use anyhow::{bail, Context};

use crate::daemon::forget;
use crate::seglog::Log;

/// Checks that the log in `log_dir` has a cursor named `sink` and leaves
/// the request; returns what to tell the operator.
pub fn forget(log_dir: &Path, sink: &str) -> anyhow::Result<String> {
    let log = Log::open_read_only(log_dir)
        .with_context(|| format!("opening the log in {}", log_dir.display()))?;
    let stats = log.stats();
    let Some(c) = stats.consumers.iter().find(|c| c.name == sink) else {
        let names: Vec<&str> = stats.consumers.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "the log has no cursor named {sink:?}; its cursors: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    let data_dir = log_dir.parent().unwrap_or(log_dir);
    let path = forget::request(data_dir, sink)
        .with_context(|| format!("writing the request in {}", data_dir.display()))?;
    Ok(format!(
        "sink {sink:?} is {} event(s) behind; its cursor will be forgotten at holdfast's next \
         reload or start (`systemctl reload holdfast`), unless the sink is still configured \
         (request: {})",
        c.lag_events,
        path.display()
    ))
}
