//! `targets_file`: Prometheus file service discovery's JSON,
//! `[{"targets": ["host:port", …], "labels": {"name": "value", …}}, …]`.
//! Read at start and again whenever its modification time (or size)
//! changes, looked at once per interval (no watcher thread). A file that
//! cannot be read or does not parse keeps the targets of the last good
//! read, and says why in the log.
//!
//! As in Prometheus, `__scheme__` and `__metrics_path__` among a group's
//! labels choose the URL (`http`, `/metrics` by default); other labels
//! starting with `__` are dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use super::config::{is_label_name, target_url};

/// The largest targets file read: far more than any list of targets.
const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// A target the file names: its URL and its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTarget {
    pub url: reqwest::Url,
    pub labels: Vec<(String, String)>,
}

/// The file, and what was last read from it.
#[derive(Debug)]
pub struct TargetsFile {
    path: PathBuf,
    /// (modification time, length) of the last read, good or bad.
    stamp: Option<(SystemTime, u64)>,
    targets: Vec<FileTarget>,
}

impl TargetsFile {
    pub fn new(path: PathBuf) -> TargetsFile {
        TargetsFile {
            path,
            stamp: None,
            targets: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The targets, read again if the file changed: `Ok(true)` when they
    /// were; `Err` (the previous targets kept) when the new file is bad.
    pub fn refresh(&mut self) -> Result<bool, String> {
        let meta = std::fs::metadata(&self.path).map_err(|e| format!("cannot read it: {e}"))?;
        let stamp = (
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta.len(),
        );
        if self.stamp == Some(stamp) {
            return Ok(false);
        }
        // A bad file is reported once, not at every interval.
        self.stamp = Some(stamp);
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "it holds {} bytes, more than the {MAX_FILE_BYTES} a targets file may",
                meta.len()
            ));
        }
        let text =
            std::fs::read_to_string(&self.path).map_err(|e| format!("cannot read it: {e}"))?;
        let targets = parse(&text)?;
        let changed = targets != self.targets;
        self.targets = targets;
        Ok(changed)
    }

    pub fn targets(&self) -> &[FileTarget] {
        &self.targets
    }
}

/// The file's targets, or what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<FileTarget>, String> {
    let groups: Vec<Group> = serde_json::from_str(text).map_err(|e| {
        format!(
            "it is not Prometheus file_sd JSON ([{{\"targets\": [\"host:port\"], \"labels\": \
             {{…}}}}]): {e}"
        )
    })?;
    let mut out = Vec::new();
    for (i, g) in groups.into_iter().enumerate() {
        let scheme = g.labels.get("__scheme__").map_or("http", String::as_str);
        let path = g
            .labels
            .get("__metrics_path__")
            .map_or("/metrics", String::as_str);
        let mut labels = Vec::new();
        for (name, value) in &g.labels {
            if name.starts_with("__") {
                continue;
            }
            if !is_label_name(name) {
                return Err(format!("group {}: {name:?} is not a label name", i + 1));
            }
            labels.push((name.clone(), value.clone()));
        }
        for t in &g.targets {
            if t.contains("://") || t.contains('/') {
                return Err(format!(
                    "group {}: {t:?} must be host:port (set __scheme__ and __metrics_path__ \
                     among the labels for the rest of the URL)",
                    i + 1
                ));
            }
            let url = target_url(&format!("{scheme}://{t}{path}"))
                .map_err(|why| format!("group {}: {why}", i + 1))?;
            out.push(FileTarget {
                url,
                labels: labels.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_give_urls_and_labels() {
        let t = parse(
            r#"[{"targets": ["127.0.0.1:9100", "[::1]:9100"], "labels": {"site": "p3", "__metrics_path__": "/m"}},
                {"targets": ["h:1"], "labels": {"__scheme__": "https"}}]"#,
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].url.as_str(), "http://127.0.0.1:9100/m");
        assert_eq!(t[0].labels, vec![("site".to_string(), "p3".to_string())]);
        assert_eq!(t[1].url.as_str(), "http://[::1]:9100/m");
        assert_eq!(t[2].url.as_str(), "https://h:1/metrics");
        assert!(t[2].labels.is_empty());
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert!(parse("{").unwrap_err().contains("file_sd JSON"));
        assert!(parse(r#"[{"targets": ["http://x:1/metrics"]}]"#)
            .unwrap_err()
            .contains("host:port"));
        assert!(parse(r#"[{"targets": ["x:1"], "labels": {"a-b": "1"}}]"#)
            .unwrap_err()
            .contains("label name"));
    }
}
