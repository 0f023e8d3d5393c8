//! Discovery: which files the `include`/`exclude` globs match, and early
//! wake-ups when something changes.
//!
//! Each include pattern is split into a literal base directory and the
//! globbed rest; a scan lists only the base directories, down as many levels
//! as the pattern has components (any depth below a `**`, capped at
//! [`MAX_DEPTH`]), and matches full paths with globset (`*` does not cross
//! `/`). Symlinks are judged by `follow_symlinks` (`open.rs`): followed,
//! to files and to directories, when allowed (a directory reached twice is
//! listed once, so symlink loops end). A matched path that is a FIFO,
//! socket or device, or a link the policy refuses, is not returned but
//! listed in [`Patterns::skipped`], never opened. Exclude patterns
//! containing a `/` are matched against the full path, others against the
//! file name.
//!
//! Scans run every `scan_interval`. Where inotify is available (the `notify`
//! crate) the base directories are watched as well: a file created, removed
//! or renamed triggers a scan at once, and a write marks that file for
//! reading. Polling alone still finds everything (network file systems,
//! inotify limits reached), only later.

use std::collections::HashSet;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode, Watcher};
use tracing::{debug, warn};

use super::identity::FileMeta;
use super::open::{is_special, Opener, Skip};

/// How deep a `**` pattern descends.
pub const MAX_DEPTH: usize = 16;
/// Paths remembered between two wake-ups before falling back to a scan.
const MAX_DIRTY: usize = 100_000;

/// A file a scan found.
#[derive(Debug, Clone)]
pub struct FoundFile {
    pub path: PathBuf,
    pub meta: FileMeta,
}

#[derive(Debug, Clone)]
struct Root {
    dir: PathBuf,
    /// Directory levels listed below `dir` (1: only `dir` itself).
    depth: usize,
    /// The pattern is a plain path: stat it, list nothing.
    literal: Option<PathBuf>,
}

/// The compiled globs.
#[derive(Debug)]
pub struct Patterns {
    include: GlobSet,
    exclude_path: GlobSet,
    exclude_name: GlobSet,
    roots: Vec<Root>,
    /// Directories whose listing failed, warned about once.
    warned: HashSet<PathBuf>,
    /// Matched paths the last scan did not return, and why.
    pub skipped: Vec<(PathBuf, Skip)>,
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

fn glob(p: &str) -> Result<Glob, String> {
    GlobBuilder::new(p)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob {p:?}: {e}"))
}

fn root_of(pattern: &str) -> Root {
    let path = Path::new(pattern);
    let mut base = PathBuf::new();
    let mut rest: Vec<String> = Vec::new();
    for c in path.components() {
        let s = c.as_os_str().to_string_lossy();
        if rest.is_empty() && !(matches!(c, Component::Normal(_)) && is_glob(&s)) {
            base.push(c.as_os_str());
        } else {
            rest.push(s.into_owned());
        }
    }
    if rest.is_empty() {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        return Root {
            dir,
            depth: 1,
            literal: Some(path.to_path_buf()),
        };
    }
    let depth = if rest.iter().any(|r| r.contains("**")) {
        MAX_DEPTH
    } else {
        rest.len()
    };
    Root {
        dir: base,
        depth,
        literal: None,
    }
}

impl Patterns {
    pub fn compile(include: &[String], exclude: &[String]) -> Result<Patterns, String> {
        if include.is_empty() {
            return Err("include lists no pattern".into());
        }
        let mut inc = GlobSetBuilder::new();
        let mut roots = Vec::new();
        for p in include {
            inc.add(glob(p)?);
            roots.push(root_of(p));
        }
        let mut exp = GlobSetBuilder::new();
        let mut exn = GlobSetBuilder::new();
        for p in exclude {
            if p.contains('/') {
                exp.add(glob(p)?);
            } else {
                exn.add(glob(p)?);
            }
        }
        let e = |r: Result<GlobSet, globset::Error>| r.map_err(|e| e.to_string());
        Ok(Patterns {
            include: e(inc.build())?,
            exclude_path: e(exp.build())?,
            exclude_name: e(exn.build())?,
            roots,
            warned: HashSet::new(),
            skipped: Vec::new(),
        })
    }

    pub fn matches(&self, path: &Path) -> bool {
        self.include.is_match(path)
            && !self.exclude_path.is_match(path)
            && !path
                .file_name()
                .is_some_and(|n| self.exclude_name.is_match(Path::new(n)))
    }

    /// Directories to watch, and whether recursively.
    pub fn watch_dirs(&self) -> Vec<(PathBuf, bool)> {
        let mut v: Vec<(PathBuf, bool)> = self
            .roots
            .iter()
            .map(|r| (r.dir.clone(), r.depth > 1))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Lists every matching regular file `opener` allows (its roots are
    /// resolved again first); what it refused is in [`Patterns::skipped`].
    pub fn scan(&mut self, opener: &mut Opener) -> Vec<FoundFile> {
        opener.set_roots(self.roots.iter().map(|r| r.dir.as_path()));
        self.skipped.clear();
        let mut out = Vec::new();
        let mut seen_paths = HashSet::new();
        let mut seen_dirs = HashSet::new();
        for root in self.roots.clone() {
            if let Some(p) = &root.literal {
                if !self.matches(p) || seen_paths.contains(p) {
                    continue;
                }
                let Ok(lm) = fs::symlink_metadata(p) else {
                    continue;
                };
                if lm.file_type().is_symlink() {
                    if let Some(why) = opener.judge_link(p) {
                        self.skipped.push((p.clone(), why));
                        continue;
                    }
                }
                match fs::metadata(p) {
                    Ok(m) if m.is_file() => {
                        seen_paths.insert(p.clone());
                        out.push(FoundFile {
                            path: p.clone(),
                            meta: FileMeta::of(&m),
                        });
                    }
                    Ok(m) if is_special(m.file_type()) => {
                        self.skipped.push((p.clone(), Skip::NotRegular));
                    }
                    _ => {}
                }
                continue;
            }
            self.walk(
                &root.dir,
                root.depth,
                opener,
                &mut out,
                &mut seen_paths,
                &mut seen_dirs,
            );
        }
        out
    }

    fn walk(
        &mut self,
        dir: &Path,
        depth: usize,
        opener: &Opener,
        out: &mut Vec<FoundFile>,
        seen_paths: &mut HashSet<PathBuf>,
        seen_dirs: &mut HashSet<(u64, u64)>,
    ) {
        if let Ok(m) = fs::metadata(dir) {
            if !seen_dirs.insert(FileMeta::of(&m).inode()) {
                return;
            }
        }
        let entries = match fs::read_dir(dir) {
            Ok(e) => {
                self.warned.remove(dir);
                e
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound && self.warned.insert(dir.to_path_buf())
                {
                    warn!(dir = %dir.display(), error = %e, "cannot list a directory the include patterns name");
                } else {
                    debug!(dir = %dir.display(), error = %e, "cannot list directory");
                }
                return;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            let meta = if ft.is_symlink() {
                fs::metadata(&path)
            } else if ft.is_file() || ft.is_dir() {
                entry.metadata()
            } else {
                if is_special(ft) && self.matches(&path) {
                    self.skipped.push((path, Skip::NotRegular));
                }
                continue;
            };
            let Ok(meta) = meta else { continue };
            if meta.is_dir() {
                // A linked directory is listed only where links are
                // followed; its files are judged one by one below.
                let refused = ft.is_symlink() && opener.judge_link(&path).is_some();
                if depth > 1 && !refused {
                    self.walk(&path, depth - 1, opener, out, seen_paths, seen_dirs);
                }
                continue;
            }
            if !self.matches(&path) || seen_paths.contains(&path) {
                continue;
            }
            if ft.is_symlink() {
                if let Some(why) = opener.judge_link(&path) {
                    self.skipped.push((path, why));
                    continue;
                }
            }
            if meta.is_file() {
                seen_paths.insert(path.clone());
                out.push(FoundFile {
                    path,
                    meta: FileMeta::of(&meta),
                });
            } else if is_special(meta.file_type()) {
                self.skipped.push((path, Skip::NotRegular));
            }
        }
    }
}

/// Wake-ups for the tailer thread: from inotify, from the stop signal.
#[derive(Debug, Default)]
pub struct Wake {
    state: Mutex<WakeState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct WakeState {
    stop: bool,
    rescan: bool,
    dirty: HashSet<PathBuf>,
    signalled: bool,
}

/// What happened since the last wait.
#[derive(Debug, Default)]
pub struct Woken {
    pub stop: bool,
    pub rescan: bool,
    pub dirty: Vec<PathBuf>,
}

impl Wake {
    fn with<R>(&self, f: impl FnOnce(&mut WakeState) -> R) -> R {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut st);
        st.signalled = true;
        drop(st);
        self.cv.notify_one();
        r
    }

    pub fn stop(&self) {
        self.with(|s| s.stop = true);
    }

    pub fn is_stopped(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stop
    }

    /// Whether a scan was asked for since the last wait, without taking it.
    pub fn rescan_requested(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).rescan
    }

    pub fn rescan(&self) {
        self.with(|s| s.rescan = true);
    }

    pub fn dirty(&self, path: PathBuf) {
        self.with(|s| {
            if s.dirty.len() < MAX_DIRTY {
                s.dirty.insert(path);
            } else {
                s.rescan = true;
            }
        });
    }

    /// Waits until woken or `timeout`, and takes what happened.
    pub fn wait(&self, timeout: Duration) -> Woken {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut st, _) = self
            .cv
            .wait_timeout_while(st, timeout, |s| !s.signalled)
            .unwrap_or_else(|p| p.into_inner());
        Self::take(&mut st)
    }

    /// Takes what happened without waiting.
    pub fn poll(&self) -> Woken {
        Self::take(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn take(st: &mut WakeState) -> Woken {
        st.signalled = false;
        Woken {
            stop: st.stop,
            rescan: std::mem::take(&mut st.rescan),
            dirty: st.dirty.drain().collect(),
        }
    }
}

/// The inotify watches on the base directories.
pub struct Watch {
    watcher: Option<notify::RecommendedWatcher>,
    /// Watched directories and the inode they had, to re-watch a directory
    /// that was removed and created again.
    watched: std::collections::HashMap<PathBuf, (u64, u64)>,
}

impl Watch {
    /// Starts watching; `enabled = false` (or no inotify) means polling only.
    pub fn new(wake: Arc<Wake>, enabled: bool) -> Watch {
        let watcher = if enabled {
            let handler = move |res: notify::Result<notify::Event>| match res {
                Ok(ev) => match ev.kind {
                    EventKind::Access(_) => {}
                    EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_)) => {
                        for p in ev.paths {
                            wake.dirty(p);
                        }
                    }
                    _ => {
                        for p in ev.paths {
                            wake.dirty(p);
                        }
                        wake.rescan();
                    }
                },
                Err(_) => wake.rescan(),
            };
            match notify::recommended_watcher(handler) {
                Ok(w) => Some(w),
                Err(e) => {
                    warn!(error = %e, "inotify is not available; files are found by polling only");
                    None
                }
            }
        } else {
            None
        };
        Watch {
            watcher,
            watched: Default::default(),
        }
    }

    pub fn active(&self) -> bool {
        self.watcher.is_some()
    }

    /// Adds watches for directories that exist and are not watched yet.
    pub fn ensure(&mut self, dirs: &[(PathBuf, bool)]) {
        let Some(w) = &mut self.watcher else { return };
        for (dir, recursive) in dirs {
            let Ok(m) = fs::metadata(dir) else {
                self.watched.remove(dir);
                continue;
            };
            let inode = FileMeta::of(&m).inode();
            if self.watched.get(dir) == Some(&inode) {
                continue;
            }
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match w.watch(dir, mode) {
                Ok(()) => {
                    self.watched.insert(dir.clone(), inode);
                }
                Err(e) => {
                    debug!(dir = %dir.display(), error = %e, "cannot watch directory; polling it");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::open::FollowSymlinks;
    use super::*;

    #[test]
    fn roots_and_depths() {
        let r = root_of("/var/log/*.log");
        assert_eq!(
            (r.dir.as_path(), r.depth, r.literal.is_none()),
            (Path::new("/var/log"), 1, true)
        );
        let r = root_of("/var/log/*/app/*.log");
        assert_eq!((r.dir.as_path(), r.depth), (Path::new("/var/log"), 3));
        let r = root_of("/srv/**/x.log");
        assert_eq!((r.dir.as_path(), r.depth), (Path::new("/srv"), MAX_DEPTH));
        let r = root_of("/var/log/syslog");
        assert_eq!(
            (r.dir.as_path(), r.literal.as_deref()),
            (Path::new("/var/log"), Some(Path::new("/var/log/syslog")))
        );
    }

    #[test]
    fn scan_matches_excludes_and_follows_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        fs::create_dir_all(root.join("a/deep/er")).unwrap();
        for f in ["x.log", "y.log", "z.gz", "a/in.log", "a/deep/er/bottom.log"] {
            fs::write(root.join(f), "l\n").unwrap();
        }
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(elsewhere.path().join("target.txt"), "t\n").unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("target.txt"), root.join("link.log"))
            .unwrap();
        // A symlink loop must not hang the walk.
        std::os::unix::fs::symlink(root, root.join("a/loop")).unwrap();

        let names = |pats: &[&str], excl: &[&str]| {
            let inc: Vec<String> = pats
                .iter()
                .map(|p| format!("{}/{p}", root.display()))
                .collect();
            let exc: Vec<String> = excl
                .iter()
                .map(|p| {
                    if p.contains('/') {
                        format!("{}/{p}", root.display())
                    } else {
                        p.to_string()
                    }
                })
                .collect();
            let mut p = Patterns::compile(&inc, &exc).unwrap();
            let mut v: Vec<String> = p
                .scan(&mut Opener::new(FollowSymlinks::Always, Default::default()))
                .into_iter()
                .map(|f| f.path.strip_prefix(root).unwrap().display().to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&["*.log"], &[]), ["link.log", "x.log", "y.log"]);
        assert_eq!(names(&["*.log"], &["y.*"]), ["link.log", "x.log"]);
        assert_eq!(names(&["*"], &["*.gz", "link.log"]), ["x.log", "y.log"]);
        assert_eq!(
            names(&["**/*.log"], &["a/deep/**"]),
            ["a/in.log", "link.log", "x.log", "y.log"]
        );
        let all = names(&["**/*.log"], &[]);
        assert!(all.contains(&"a/deep/er/bottom.log".to_string()), "{all:?}");
        assert_eq!(
            names(&["x.log", "*.log"], &[]),
            ["link.log", "x.log", "y.log"]
        );
        assert_eq!(names(&["nothing/*.log"], &[]), Vec::<String>::new());
        // The default policy: the link leads outside the globs' directory.
        let mut p = Patterns::compile(&[format!("{}/*.log", root.display())], &[]).unwrap();
        let found = p.scan(&mut Opener::new(FollowSymlinks::Inside, Default::default()));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(p.skipped, [(root.join("link.log"), Skip::SymlinkOutside)]);
        assert!(Patterns::compile(&["/a/[".into()], &[]).is_err());
        assert!(Patterns::compile(&[], &[]).is_err());
    }
}
