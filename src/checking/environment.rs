//! The probes of the checks that need the machine
//! ([`Settings::check_environment`](crate::config::Settings::check_environment)
//! runs them over a whole config; each component calls those its table
//! needs). A
//! config can be valid and still fail here: the data directory is not
//! writable by this user, a port is taken, a token file is missing.
//!
//! A port this config listens on is expected to be in use while holdfast
//! runs with it (`holdfast check && systemctl reload holdfast`): when the
//! log's lock is held by a live process, a port in use is a note, not an
//! error. Secret files in systemd's credentials directory
//! (`$CREDENTIALS_DIRECTORY`, from `LoadCredential=`) are not held to the
//! mode check: systemd grants the service user access to them (by ACL, which
//! shows in the group bits) in a directory only the unit can read.
//!
//! These checks leave no trace: directories created to prove they can be
//! created are removed again, probe files are deleted, sockets are closed.
//! They answer for the user running them, so run `holdfast check` as the
//! service's user (`sudo -u holdfast holdfast check`) for a true answer.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use super::error::{Diagnostic, Position, Severity};

/// The machine checks' findings so far; components add theirs through
/// its probes.
pub(crate) struct Env<'a> {
    /// The config file, named in each finding.
    config_file: &'a Path,
    /// Where each key is in the file, to place a finding.
    origins: &'a BTreeMap<String, Position>,
    /// The spellings of secret values, masked in messages.
    secrets: &'a [String],
    /// The checked `data_dir`, named when a port is held by a holdfast
    /// running with it.
    data_dir: &'a Path,
    found: Vec<Diagnostic>,
    /// A live process holds this config's log open: a holdfast running with
    /// it, whose listeners are expected to be bound.
    running: bool,
}

impl<'a> Env<'a> {
    /// No findings yet, about the config file `config_file` whose keys are
    /// at `origins`; whether a holdfast runs with it is read from the
    /// lock of the log in `log_dir`.
    pub(crate) fn new(
        config_file: &'a Path,
        origins: &'a BTreeMap<String, Position>,
        secrets: &'a [String],
        data_dir: &'a Path,
        log_dir: &Path,
    ) -> Env<'a> {
        Env {
            config_file,
            origins,
            secrets,
            data_dir,
            found: Vec::new(),
            running: log_in_use(log_dir),
        }
    }

    /// Every finding, in the order found.
    pub(crate) fn finish(self) -> Vec<Diagnostic> {
        self.found
    }

    fn position_of(&self, key: &str) -> Option<Position> {
        self.origins.get(key).copied()
    }
}

/// Whether a live process holds the log's `LOCK` (taken with `flock` by the
/// daemon; released by the kernel when it dies, so a stale file says
/// nothing).
fn log_in_use(log_dir: &Path) -> bool {
    let Ok(lock) = fs::File::open(log_dir.join("LOCK")) else {
        return false;
    };
    // A shared lock conflicts with the daemon's exclusive one and with no
    // other `check`; it is released when `lock` is dropped.
    matches!(lock.try_lock_shared(), Err(fs::TryLockError::WouldBlock))
}

/// Whether `path` is in systemd's credentials directory for this service.
fn in_credentials_dir(path: &Path) -> bool {
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    dir.is_some_and(|d| path.starts_with(d)) || path.starts_with("/run/credentials")
}

impl Env<'_> {
    pub(crate) fn push(&mut self, severity: Severity, key: &str, message: String) {
        // `include[2]` is noted as `include`: fall back to the parent key;
        // a table (`sources.journal`) is where its `type` is.
        let position = self
            .position_of(key)
            .or_else(|| key.rsplit_once('[').and_then(|(k, _)| self.position_of(k)))
            .or_else(|| self.position_of(&format!("{key}.type")));
        self.found.push(Diagnostic {
            severity,
            file: self.config_file.to_path_buf(),
            position,
            key: key.to_string(),
            message: super::effective::redact(&message, self.secrets),
        });
    }

    /// Proves `dir` can be created and written by creating what is missing
    /// and a probe file in it, then removing all of that again.
    pub(crate) fn writable_dir(&mut self, key: &str, dir: &Path) {
        // The missing directories, outermost first.
        let mut missing: Vec<PathBuf> = Vec::new();
        let mut cur = Some(dir);
        while let Some(p) = cur {
            match fs::metadata(p) {
                Ok(m) if m.is_dir() => break,
                Ok(_) => {
                    self.push(
                        Severity::Error,
                        key,
                        format!(
                            "{} exists but is not a directory: remove it, or choose another path",
                            p.display()
                        ),
                    );
                    return;
                }
                // NotADirectory: a file further up; found on the way up.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    missing.push(p.to_path_buf())
                }
                Err(e) => {
                    self.push(
                        Severity::Error,
                        key,
                        format!("cannot inspect {}: {e}", p.display()),
                    );
                    return;
                }
            }
            cur = p.parent();
        }
        missing.reverse();
        let mut created: Vec<&Path> = Vec::new();
        let mut problem = None;
        for p in &missing {
            match fs::create_dir(p) {
                Ok(()) => created.push(p),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    problem = Some(format!("cannot create {}: {e}", p.display()));
                    break;
                }
            }
        }
        if problem.is_none() {
            let probe = dir.join(format!(".holdfast-check-{}", std::process::id()));
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
            {
                Ok(_) => {
                    let _ = fs::remove_file(&probe);
                }
                Err(e) => problem = Some(format!("cannot create a file in {}: {e}", dir.display())),
            }
        }
        for p in created.iter().rev() {
            let _ = fs::remove_dir(p);
        }
        if let Some(problem) = problem {
            self.push(
                Severity::Error,
                key,
                format!(
                    "{problem}; holdfast must be able to create and write {}: create it for the \
                     holdfast user (the shipped unit's StateDirectory= does this for \
                     /var/lib/holdfast), or choose another directory",
                    dir.display()
                ),
            );
        }
    }

    /// The log's whole point is surviving a power cut; tmpfs does not.
    pub(crate) fn not_in_ram(&mut self, key: &str, dir: &Path) {
        let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
            return;
        };
        let mut best: Option<(usize, &str, &str)> = None;
        for line in mounts.lines() {
            let mut fields = line.split_whitespace();
            let (Some(_dev), Some(mount_point), Some(fstype)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let len = mount_point.len();
            if dir.starts_with(mount_point) && best.is_none_or(|(l, _, _)| len > l) {
                best = Some((len, mount_point, fstype));
            }
        }
        if let Some((_, mount_point, fstype @ ("tmpfs" | "ramfs"))) = best {
            self.push(
                Severity::Warning,
                key,
                format!(
                    "{} is on {fstype} (mounted at {mount_point}): its contents vanish at reboot or \
                     power loss, so nothing in the log survives them whatever fsync says; choose a \
                     directory on persistent storage, like /var/lib/holdfast",
                    dir.display()
                ),
            );
        }
    }

    pub(crate) fn bindable(&mut self, key: &str, addr: SocketAddr) {
        if addr.port() == 0 {
            return;
        }
        if let Err(e) = TcpListener::bind(addr) {
            if e.kind() == io::ErrorKind::AddrInUse && self.running {
                self.push(
                    Severity::Note,
                    key,
                    format!(
                        "{addr} is in use, by the holdfast running with this data directory \
                         ({}): fine, a reload or restart takes it over",
                        self.data_dir.display()
                    ),
                );
                return;
            }
            let why = match e.kind() {
                // A holdfast running with this data directory was ruled out
                // above (its log's lock is free).
                io::ErrorKind::AddrInUse => format!(
                    "the address is already in use by another process (not a holdfast \
                     running with this data directory, {}): find it with `ss -ltnp`, stop it \
                     or choose another port",
                    self.data_dir.display()
                ),
                io::ErrorKind::AddrNotAvailable => {
                    "this machine has no such address: use one of its own \
                     addresses, 127.0.0.1 or 0.0.0.0"
                        .to_string()
                }
                io::ErrorKind::PermissionDenied => {
                    "ports below 1024 need CAP_NET_BIND_SERVICE: choose a port \
                     above 1023"
                        .to_string()
                }
                _ => "choose another address".to_string(),
            };
            self.push(
                Severity::Error,
                key,
                format!("cannot listen on {addr}: {e}; {why}"),
            );
        }
    }

    /// A token or key: must be readable, non-empty, and not readable by
    /// other users.
    pub(crate) fn secret_file(&mut self, key: &str, path: &Path, what: &str) {
        match fs::read(path) {
            Err(e) => {
                self.push(
                    Severity::Error,
                    key,
                    format!(
                        "cannot read the {what} file {}: {e}; create it, readable by the holdfast user",
                        path.display()
                    ),
                );
                return;
            }
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
                self.push(
                    Severity::Error,
                    key,
                    format!(
                        "the {what} file {} is empty: write the {what} into it",
                        path.display()
                    ),
                );
                return;
            }
            Ok(_) => {}
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let (Ok(meta), false) = (fs::metadata(path), in_credentials_dir(path)) {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    self.push(
                        Severity::Warning,
                        key,
                        format!(
                            "the {what} file {} is readable by other users (mode {mode:04o}): \
                             chmod 600 it and chown it to the holdfast user",
                            path.display()
                        ),
                    );
                }
            }
        }
    }

    /// A PEM file holding a block of the given kind; whether it does.
    pub(crate) fn pem_file(&mut self, key: &str, path: &Path, block: &str) -> bool {
        let text = match fs::read(path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                self.push(
                    Severity::Error,
                    key,
                    format!(
                        "cannot read {}: {e}; make it readable by the holdfast user",
                        path.display()
                    ),
                );
                return false;
            }
        };
        let has_block = text
            .lines()
            .any(|l| l.starts_with("-----BEGIN ") && l.contains(block));
        if !has_block {
            self.push(
                Severity::Error,
                key,
                format!(
                    "{} holds no PEM \"{block}\" block (a \"-----BEGIN ...{block}-----\" line): \
                     give the PEM file, not DER or PKCS#12",
                    path.display()
                ),
            );
        }
        has_block
    }

    /// A tailed path or glob: warn when its file or fixed directory is
    /// missing or unreadable now (it may appear later).
    pub(crate) fn tail_target(&mut self, key: &str, pattern: &str) {
        let is_glob = |s: &str| s.contains(['*', '?', '[', '{']);
        if !is_glob(pattern) {
            match fs::File::open(pattern) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => self.push(
                    Severity::Warning,
                    key,
                    format!("{pattern} does not exist (yet): it will be tailed once it appears"),
                ),
                Err(e) => self.push(
                    Severity::Warning,
                    key,
                    format!(
                        "cannot read {pattern}: {e}; give the holdfast user read access (on Debian, \
                         log files in /var/log are often readable by group adm)"
                    ),
                ),
            }
            return;
        }
        // The directories before the first wildcard are fixed.
        let fixed: PathBuf = Path::new(pattern)
            .components()
            .take_while(|c| !is_glob(&c.as_os_str().to_string_lossy()))
            .collect();
        if fixed.as_os_str().is_empty() {
            return;
        }
        match fs::read_dir(&fixed) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.push(
                Severity::Warning,
                key,
                format!(
                    "the directory {} does not exist (yet): \"{pattern}\" matches nothing until it does",
                    fixed.display()
                ),
            ),
            Err(e) => self.push(
                Severity::Warning,
                key,
                format!("cannot list {}: {e}; give the holdfast user read access", fixed.display()),
            ),
        }
    }
}
