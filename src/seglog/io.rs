//! The file-system seam under the log.
//!
//! Every operation that changes what is durable in a log directory — a
//! write, a `fdatasync` of a file, an `fsync` of the directory, creating,
//! removing or resizing a file — goes through [`Fs`]. Without a hook (every
//! production log) `Fs` is the plain system call behind one `if`, taken once
//! per group commit, never per event. With an [`IoHook`] in
//! [`LogOptions::io_hook`](super::LogOptions::io_hook), tests see each
//! operation before and after it happens, so they can
//!
//! * fail it (`ENOSPC`, `EIO`) or let only part of a write through, the way a
//!   filling disk does, and check that the log stays consistent;
//! * record what reached the page cache and what a sync made durable, and
//!   rebuild the directory as a power cut would have left it.
//!
//! The real I/O still happens: the hook observes and may refuse, it never
//! replaces the file system. Reads, memory maps and the `LOCK` file (which
//! holds no data) are not reported.
//!
//! # State at rest is private
//!
//! Everything the daemon keeps under `data_dir` (segments, cursors, locks,
//! checkpoints, requests) can hold the events themselves, so it is created
//! with explicit modes, [`PRIVATE_DIR`] and [`PRIVATE_FILE`], whatever the
//! umask: [`Fs::create`] sets the file mode, and [`create_private_dir_all`],
//! [`private_file`] and [`write_private`] serve the state files written
//! outside the log. What an older holdfast (or a looser umask) left behind
//! is tightened once at start-up by [`tighten_tree`].
//!
//! # State outside the log
//!
//! The state files (`src/state_file.rs`), the quarantine and a `file`
//! sink's output use the same seam for their writes, syncs and renames, so
//! there is one `sync_dir` in the program ([`sync_dir`]: the seam's,
//! without a hook).

use std::fmt::Debug;
use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

/// The mode of every directory holdfast creates under `data_dir`.
pub const PRIVATE_DIR: u32 = 0o700;
/// The mode of every file holdfast creates under `data_dir`.
pub const PRIVATE_FILE: u32 = 0o600;

/// Creates `dir` and any missing parent, each [`PRIVATE_DIR`].
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
}

/// `opts` creating a file [`PRIVATE_FILE`] (an existing one keeps its mode).
pub fn private_file(opts: &mut OpenOptions) -> &mut OpenOptions {
    opts.mode(PRIVATE_FILE)
}

/// `std::fs::write`, creating the file [`PRIVATE_FILE`].
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    private_file(OpenOptions::new().write(true).create(true).truncate(true))
        .open(path)?
        .write_all(bytes)
}

/// Makes creations, renames and removals in `dir` durable: [`Fs::sync_dir`]
/// without a hook, for the state kept outside the log (state files, the
/// quarantine, a `file` sink's output).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    Fs::default().sync_dir(dir)
}

/// Takes the group's and others' bits off every directory and file below
/// `root` (not `root` itself, whose mode its creator chose: the package
/// makes `/var/lib/holdfast` 0750 for its group), except the trees in
/// `except` (a `file` sink's output, meant for its readers), without
/// following symlinks. Returns how many were tightened and the first of
/// them; an entry that cannot be changed (another owner) is an error
/// naming it.
pub fn tighten_tree(
    root: &Path,
    except: &[&Path],
) -> io::Result<(usize, Option<std::path::PathBuf>)> {
    let mut changed = 0;
    let mut first = None;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            if except.contains(&path.as_path()) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.file_type().is_symlink() {
                continue;
            }
            if meta.is_dir() {
                dirs.push(path.clone());
            }
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                std::fs::set_permissions(&path, Permissions::from_mode(mode & !0o077))
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
                changed += 1;
                first.get_or_insert(path);
            }
        }
    }
    Ok((changed, first))
}

/// One operation on the log directory, as the hook sees it.
#[derive(Debug, Clone, Copy)]
pub enum IoOp<'a> {
    /// `data`, in order, written at `offset` of `path`. Before: what the log
    /// is about to write (already cut to what [`IoHook::allow_write`]
    /// allowed). After: what the kernel took, which may be a prefix.
    Write {
        path: &'a Path,
        offset: u64,
        data: &'a [&'a [u8]],
    },
    /// `fdatasync` of a file: its data written so far becomes durable.
    SyncData { path: &'a Path },
    /// `fsync` of the directory: creations and removals in it become durable.
    SyncDir { path: &'a Path },
    /// A new, empty file.
    Create { path: &'a Path },
    /// A file unlinked.
    Remove { path: &'a Path },
    /// `from` renamed over `to` (the state files' last step; the log
    /// itself renames nothing).
    Rename { from: &'a Path, to: &'a Path },
    /// A file cut (or extended) to `len` bytes.
    SetLen { path: &'a Path, len: u64 },
}

/// Test hook around the log's durable-state operations; see the module docs.
#[doc(hidden)]
pub trait IoHook: Send + Sync + Debug {
    /// Called before `op`; an error fails the operation without doing it.
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        let _ = op;
        Ok(())
    }

    /// Called after `op` succeeded (for a write, with the bytes written).
    fn after(&self, op: &IoOp<'_>) {
        let _ = op;
    }

    /// How many of the `len` bytes about to be written at `offset` of
    /// `path` get through: fewer makes a short write (the log then tries the
    /// rest, as after a real one), an error fails the write with nothing
    /// written. Called before [`before`](Self::before).
    fn allow_write(&self, path: &Path, offset: u64, len: usize) -> io::Result<usize> {
        let _ = (path, offset);
        Ok(len)
    }
}

/// The log's access to the file system: the real calls, reported to the
/// hook when there is one.
#[derive(Debug, Clone, Default)]
pub struct Fs {
    hook: Option<Arc<dyn IoHook>>,
}

impl Fs {
    pub fn new(hook: Option<Arc<dyn IoHook>>) -> Fs {
        Fs { hook }
    }

    /// Runs `f` between the hook's `before` and `after`.
    fn around<T>(&self, op: IoOp<'_>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        match &self.hook {
            None => f(),
            Some(h) => {
                h.before(&op)?;
                let r = f()?;
                h.after(&op);
                Ok(r)
            }
        }
    }

    /// Writes all of `slices` to `file`, whose end (or write position) is
    /// `offset`. A short write is followed by another until everything is
    /// written or the kernel refuses (e.g. `ENOSPC`); the caller undoes a
    /// partial write.
    pub fn write_all(
        &self,
        file: &mut File,
        path: &Path,
        offset: u64,
        mut slices: &mut [IoSlice<'_>],
    ) -> io::Result<()> {
        let Some(hook) = &self.hook else {
            while !slices.is_empty() {
                match file.write_vectored(slices) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => IoSlice::advance_slices(&mut slices, n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        };
        let mut at = offset;
        while !slices.is_empty() {
            let len: usize = slices.iter().map(|s| s.len()).sum();
            let allowed = hook.allow_write(path, at, len)?.min(len);
            if allowed == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let data = prefix(slices, allowed);
            hook.before(&IoOp::Write {
                path,
                offset: at,
                data: &data,
            })?;
            let iov: Vec<IoSlice<'_>> = data.iter().map(|d| IoSlice::new(d)).collect();
            let n = match file.write_vectored(&iov) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hook.after(&IoOp::Write {
                path,
                offset: at,
                data: &prefix(slices, n),
            });
            at += n as u64;
            IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }

    pub fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.around(IoOp::SyncData { path }, || file.sync_data())
    }

    /// Makes creations and removals in `dir` durable.
    pub fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.around(IoOp::SyncDir { path: dir }, || {
            File::open(dir).and_then(|d| d.sync_all())
        })
    }

    /// Opens `path` with `opts`, which must include `create` or
    /// `create_new`; reported as a creation only if the file is new. A new
    /// file is [`PRIVATE_FILE`].
    pub fn create(&self, opts: &OpenOptions, path: &Path) -> io::Result<File> {
        let mut opts = opts.clone();
        let opts = private_file(&mut opts);
        if self.hook.is_none() {
            return opts.open(path);
        }
        let existed = path.exists();
        if existed {
            return opts.open(path);
        }
        self.around(IoOp::Create { path }, || opts.open(path))
    }

    pub fn remove(&self, path: &Path) -> io::Result<()> {
        self.around(IoOp::Remove { path }, || std::fs::remove_file(path))
    }

    /// Renames `from` over `to`; durable once their directory is synced.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.around(IoOp::Rename { from, to }, || std::fs::rename(from, to))
    }

    pub fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        self.around(IoOp::SetLen { path, len }, || file.set_len(len))
    }
}

/// The first `n` bytes of `slices`, as slices.
fn prefix<'a>(slices: &'a [IoSlice<'_>], mut n: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(slices.len());
    for s in slices {
        if n == 0 {
            break;
        }
        let take = n.min(s.len());
        out.push(&s[..take]);
        n -= take;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn private_whatever_the_umask_and_old_state_tightened() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        create_private_dir_all(&root.join("a/b")).unwrap();
        write_private(&root.join("a/b/f"), b"x").unwrap();
        Fs::default()
            .create(
                OpenOptions::new().write(true).create(true),
                &root.join("a/g"),
            )
            .unwrap();
        // Whatever the test's umask, nothing above the private modes.
        for (p, max) in [
            ("a", 0o700),
            ("a/b", 0o700),
            ("a/b/f", 0o600),
            ("a/g", 0o600),
        ] {
            assert_eq!(mode(&root.join(p)) & !max, 0, "{p}");
        }
        // What an older release left under umask 022.
        std::fs::set_permissions(root.join("a/b"), Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(root.join("a/b/f"), Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("a/link")).unwrap();
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::set_permissions(root.join("out"), Permissions::from_mode(0o750)).unwrap();
        let out = root.join("out");
        let (n, _) = tighten_tree(root, &[&out]).unwrap();
        assert_eq!(n, 2);
        assert_eq!(mode(&root.join("a/b")), 0o700);
        assert_eq!(mode(&root.join("a/b/f")), 0o600);
        assert_eq!(mode(&out), 0o750, "a file sink's output is left as it is");
        assert_eq!(tighten_tree(root, &[&out]).unwrap().0, 0);
    }
}
