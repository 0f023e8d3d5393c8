//! Forgetting a removed sink's cursor: `holdfast forget --sink NAME`.
//!
//! A sink taken out of the config keeps its cursor in the log (a reload or a
//! restart never deletes one), so that putting the sink back resumes where
//! it stopped. Until it is forgotten, the log keeps its unsent events like
//! any sink's, up to `log.max_bytes`. The operator's command leaves a
//! request in `<data_dir>/forget/`; the daemon carries it out at its next
//! start or reload (`systemctl reload holdfast`), because only the daemon
//! may write the log while it runs. A request naming a sink that is still
//! configured is refused (logged) and dropped: the running sink needs its
//! cursor.

use std::io;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::config::Settings;
use crate::seglog::Log;

const DIR: &str = "forget";

fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join(DIR)
}

/// Leaves a request to forget `sink`'s cursor; returns its path.
pub fn request(data_dir: &Path, sink: &str) -> io::Result<PathBuf> {
    if crate::checking::check_name(sink).is_err() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{sink:?} is not a sink name: 1-64 characters of A-Z a-z 0-9 _ -"),
        ));
    }
    let dir = dir(data_dir);
    crate::seglog::create_private_dir_all(&dir)?;
    let path = dir.join(sink);
    crate::seglog::write_private(&path, b"")?;
    Ok(path)
}

/// The sinks whose cursors are waiting to be forgotten.
pub fn pending(data_dir: &Path) -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir(data_dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for e in entries {
        if let Some(name) = e?.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Carries out the waiting requests against `log`, for the sinks
/// `settings` does not configure; every request is then dropped.
pub(super) fn apply(log: &Log, settings: &Settings) {
    let names = match pending(&settings.data_dir) {
        Ok(n) => n,
        Err(e) => {
            warn!(dir = %dir(&settings.data_dir).display(), error = %e, "reading the requests to forget sink cursors");
            return;
        }
    };
    let known = log.consumers();
    for name in names {
        if settings.sinks.contains_key(&name) {
            warn!(sink = %name, "not forgetting the cursor of a configured sink: remove the sink from the config first");
        } else if !known.contains(&name) {
            info!(sink = %name, "no cursor to forget: the log has no such sink");
        } else {
            match log.remove_consumer(&name) {
                Ok(()) => {
                    info!(sink = %name, "forgot the cursor of a removed sink: its unsent events no longer hold back deletion")
                }
                Err(e) => {
                    warn!(sink = %name, error = %e, "forgetting the cursor failed; the request stays for the next reload");
                    continue;
                }
            }
        }
        let path = dir(&settings.data_dir).join(&name);
        if let Err(e) = std::fs::remove_file(&path) {
            warn!(path = %path.display(), error = %e, "removing a carried-out request");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_files_by_sink_name() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(pending(tmp.path()).unwrap().is_empty());
        request(tmp.path(), "old-es").unwrap();
        request(tmp.path(), "archive").unwrap();
        assert_eq!(pending(tmp.path()).unwrap(), ["archive", "old-es"]);
        assert!(request(tmp.path(), "../etc").is_err());
        assert!(request(tmp.path(), "").is_err());
    }
}
