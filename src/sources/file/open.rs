//! Opening a matched file: the one door every open of the tailer goes
//! through (discovery, reopening, a rotated file found again), so that the
//! source reads only regular files inside what its globs name.
//!
//! Anyone who can write into a tailed directory can put there a symlink to
//! a file holdfast can read and others cannot (`/etc/holdfast/token`), or a
//! FIFO or device whose `open()` blocks or has side effects. So:
//!
//! * the path is checked without opening it first (`stat`; for a symlink,
//!   where it leads under the [`FollowSymlinks`] policy), so a FIFO or a
//!   device found by a scan is never opened at all;
//! * the open itself is non-blocking and never makes a terminal ours
//!   (`O_NONBLOCK | O_NOCTTY`; with `O_NOFOLLOW` on the path already
//!   resolved), so a file swapped for a FIFO between the check and the open
//!   cannot wedge the tailer thread;
//! * the descriptor is then `fstat`ed and refused unless it is a regular
//!   file, and (policy `inside`) the file it names is checked again to lie
//!   inside the directories the globs name, read from `/proc/self/fd`.
//!
//! What is left: with `follow_symlinks = "inside"`, a directory inside the
//! globs swapped for a symlink between the check and the open can make one
//! `open()` reach outside; the descriptor is then refused before any byte
//! is read.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::beat::{Beat, Step};

/// `follow_symlinks`: which symlinks among the matched files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FollowSymlinks {
    /// Only when the link's fully resolved target lies inside a directory
    /// the include globs name.
    #[default]
    Inside,
    /// Every link, wherever it leads (what holdfast did before).
    Always,
    /// No link: a matched file that is a symlink is skipped, and `**` does
    /// not descend into linked directories.
    Never,
}

impl FollowSymlinks {
    pub fn as_str(self) -> &'static str {
        match self {
            FollowSymlinks::Inside => "inside",
            FollowSymlinks::Always => "always",
            FollowSymlinks::Never => "never",
        }
    }
}

/// Why a matched path is not read: the `reason` label of
/// `holdfast_file_source_skipped_files_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    /// A symlink whose target lies outside the globs' directories.
    SymlinkOutside = 0,
    /// A symlink, with `follow_symlinks = "never"`.
    Symlink = 1,
    /// A FIFO, socket, device or directory: only regular files are read.
    NotRegular = 2,
}

impl Skip {
    /// Every reason, in the order the metric's series are created.
    pub const ALL: [Skip; 3] = [Skip::SymlinkOutside, Skip::Symlink, Skip::NotRegular];

    pub fn as_str(self) -> &'static str {
        match self {
            Skip::SymlinkOutside => "symlink_outside",
            Skip::Symlink => "symlink",
            Skip::NotRegular => "not_regular",
        }
    }

    /// What the operator reads in the journal.
    pub fn explain(self) -> &'static str {
        match self {
            Skip::SymlinkOutside => {
                "skipping a symlink whose target lies outside the directories the include globs \
                 name; set follow_symlinks = \"always\" to read it anyway, or include its target"
            }
            Skip::Symlink => "skipping a symlink (follow_symlinks = \"never\")",
            Skip::NotRegular => {
                "skipping a matched path that is not a regular file (FIFO, socket, device or \
                 directory): only regular files are read"
            }
        }
    }
}

/// What an open found.
#[derive(Debug)]
pub enum Opened {
    File(File, Metadata),
    Skipped(Skip),
}

/// The policy and the directories links may lead into.
#[derive(Debug, Clone)]
pub struct Opener {
    pub policy: FollowSymlinks,
    /// Told before every open: an open that does not return is a stall.
    beat: Arc<Beat>,
    /// The globs' base directories, fully resolved (those that exist).
    roots: Vec<PathBuf>,
}

impl Opener {
    pub fn new(policy: FollowSymlinks, beat: Arc<Beat>) -> Opener {
        Opener {
            policy,
            beat,
            roots: Vec::new(),
        }
    }

    /// Resolves the globs' base directories again: one may have been
    /// created, or replaced, since the last scan.
    pub fn set_roots<'a>(&mut self, dirs: impl IntoIterator<Item = &'a Path>) {
        if self.policy != FollowSymlinks::Inside {
            return;
        }
        self.roots.clear();
        for d in dirs {
            if let Ok(c) = std::fs::canonicalize(d) {
                if !self.roots.contains(&c) {
                    self.roots.push(c);
                }
            }
        }
    }

    fn inside(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| p.starts_with(r))
    }

    /// Judges a symlink found by a scan without opening anything: `None`
    /// if it may be read.
    pub fn judge_link(&self, link: &Path) -> Option<Skip> {
        match self.policy {
            FollowSymlinks::Always => None,
            FollowSymlinks::Never => Some(Skip::Symlink),
            FollowSymlinks::Inside => match std::fs::canonicalize(link) {
                Ok(target) if self.inside(&target) => None,
                Ok(_) => Some(Skip::SymlinkOutside),
                // Dangling: the scan's own `stat` finds nothing to read.
                Err(_) => None,
            },
        }
    }

    /// Opens `path` for reading if it is a regular file the policy allows.
    /// `NotFound` is an error like any other; callers treat it as "gone".
    pub fn open(&self, path: &Path) -> io::Result<Opened> {
        self.beat.step(Step::Opening);
        let (target, nofollow) = match self.policy {
            FollowSymlinks::Always => (path.to_path_buf(), false),
            FollowSymlinks::Never => (path.to_path_buf(), true),
            FollowSymlinks::Inside => {
                let c = std::fs::canonicalize(path)?;
                if !self.inside(&c) {
                    return Ok(Opened::Skipped(Skip::SymlinkOutside));
                }
                (c, true)
            }
        };
        let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        if nofollow {
            flags |= libc::O_NOFOLLOW;
        }
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&target)
        {
            Ok(f) => f,
            // O_NOFOLLOW on a symlink: it became one after the scan looked.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Ok(Opened::Skipped(match self.policy {
                    FollowSymlinks::Never => Skip::Symlink,
                    _ => Skip::SymlinkOutside,
                }))
            }
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(Opened::Skipped(Skip::NotRegular));
        }
        if self.policy == FollowSymlinks::Inside {
            if let Ok(real) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
                if !self.inside(&real) {
                    return Ok(Opened::Skipped(Skip::SymlinkOutside));
                }
            }
        }
        clear_nonblock(&file)?;
        Ok(Opened::File(file, meta))
    }
}

/// The paths skipped lately, so that each is logged and counted once while
/// it stays what it is, not on every scan. Bounded by what one scan sees:
/// a path not skipped again by the next scan is forgotten (and counted
/// again if it comes back).
#[derive(Debug, Default)]
pub struct SkipLog {
    /// Path → reason and the number of the scan that last skipped it.
    seen: std::collections::HashMap<PathBuf, (Skip, u64)>,
    scan: u64,
}

impl SkipLog {
    /// A scan starts: what it does not skip again is forgotten at its end.
    pub fn scan_started(&mut self) {
        self.scan += 1;
    }

    pub fn scan_ended(&mut self) {
        let scan = self.scan;
        self.seen.retain(|_, (_, n)| *n == scan);
    }

    /// Notes that `path` was skipped for `why`; true the first time (or
    /// when the reason changed): log and count it then.
    pub fn note(&mut self, path: &Path, why: Skip) -> bool {
        match self.seen.get_mut(path) {
            Some(e) => {
                let new = e.0 != why;
                *e = (why, self.scan);
                new
            }
            None => {
                self.seen.insert(path.to_path_buf(), (why, self.scan));
                true
            }
        }
    }
}

/// Whether a `stat` of a matched path says it is something only regular
/// files may be: a FIFO, socket or device is skipped before any open.
pub fn is_special(ft: std::fs::FileType) -> bool {
    ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device()
}

/// Regular files ignore `O_NONBLOCK`, but a file system that honours it
/// (some FUSE ones) would answer reads with `EAGAIN`: the flag was only
/// for the open.
fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a descriptor `file` owns for the whole call; F_GETFL
    // and F_SETFL read and set its status flags and touch no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn opener(policy: FollowSymlinks, root: &Path) -> Opener {
        let mut o = Opener::new(policy, Arc::default());
        o.set_roots([root]);
        o
    }

    fn skipped(r: io::Result<Opened>) -> Option<Skip> {
        match r.unwrap() {
            Opened::File(..) => None,
            Opened::Skipped(s) => Some(s),
        }
    }

    #[test]
    fn links_inside_outside_and_never() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("logs");
        std::fs::create_dir(&root).unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "token\n").unwrap();
        std::fs::write(root.join("real.log"), "l\n").unwrap();
        symlink(&secret, root.join("evil.log")).unwrap();
        symlink(root.join("real.log"), root.join("good.log")).unwrap();

        let inside = opener(FollowSymlinks::Inside, &root);
        assert_eq!(skipped(inside.open(&root.join("real.log"))), None);
        assert_eq!(skipped(inside.open(&root.join("good.log"))), None);
        assert_eq!(
            skipped(inside.open(&root.join("evil.log"))),
            Some(Skip::SymlinkOutside)
        );
        assert_eq!(
            inside.judge_link(&root.join("evil.log")),
            Some(Skip::SymlinkOutside)
        );
        assert_eq!(inside.judge_link(&root.join("good.log")), None);

        let never = opener(FollowSymlinks::Never, &root);
        assert_eq!(
            skipped(never.open(&root.join("good.log"))),
            Some(Skip::Symlink)
        );
        assert_eq!(skipped(never.open(&root.join("real.log"))), None);

        let always = opener(FollowSymlinks::Always, &root);
        assert_eq!(skipped(always.open(&root.join("evil.log"))), None);
    }

    #[test]
    fn skips_are_noted_once_while_they_last() {
        let mut log = SkipLog::default();
        let p = Path::new("/x/evil.log");
        log.scan_started();
        assert!(log.note(p, Skip::SymlinkOutside));
        log.scan_ended();
        log.scan_started();
        assert!(!log.note(p, Skip::SymlinkOutside));
        assert!(log.note(p, Skip::NotRegular), "a new reason is news");
        log.scan_ended();
        // Gone for a scan, then back: counted again.
        log.scan_started();
        log.scan_ended();
        log.scan_started();
        assert!(log.note(p, Skip::NotRegular));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe.log");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for policy in [
            FollowSymlinks::Inside,
            FollowSymlinks::Always,
            FollowSymlinks::Never,
        ] {
            // Without O_NONBLOCK this open would wait for a writer forever.
            let o = opener(policy, d.path());
            assert_eq!(skipped(o.open(&fifo)), Some(Skip::NotRegular));
        }
    }
}
