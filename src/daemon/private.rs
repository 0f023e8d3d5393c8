//! State at rest is private (promise 11): before the log opens, whatever an
//! older release or a looser umask left under `data_dir` is tightened to
//! owner-only modes. Everything created from then on is private already
//! (`seglog/io.rs`).

use std::path::Path;

use tracing::warn;

use crate::config::Settings;

/// Tightens the modes under `data_dir`, leaving `file` sinks' output
/// directories alone. A failure is a warning: the daemon still runs, the
/// operator is told what to fix.
pub fn tighten(settings: &Settings) {
    let outputs: Vec<&Path> = settings
        .sinks
        .values()
        .filter_map(|s| s.kind.component().output_dir())
        .collect();
    let dir = &settings.data_dir;
    match crate::seglog::tighten_tree(dir, &outputs) {
        Ok((0, _)) => {}
        Ok((n, first)) => {
            warn!(data_dir = %dir.display(), entries = n, first = ?first,
                "state files and directories were readable by others (created by an older release or under a loose umask); made them owner-only (0600 files, 0700 directories)");
        }
        Err(e) => {
            warn!(data_dir = %dir.display(), error = %e,
                "cannot make the state under data_dir owner-only; others may read it: chown it to the holdfast user, or chmod go-rwx it");
        }
    }
}
