//! [`Settings::check_environment`]: the checks that need the machine. A
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

use std::fs;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use super::error::{Diagnostic, Severity};
use super::settings::Settings;

impl Settings {
    /// Checks this config against the machine it runs on: the data
    /// directory and each file sink's directory can be created and written
    /// (by trying, then cleaning up); the data directory is not on a RAM
    /// file system; every listen address can be bound (port 0 is skipped);
    /// token, certificate and key files are readable (and not readable by
    /// everyone); tailed files exist and can be read (warnings only: they
    /// may appear later).
    ///
    /// Returns errors (holdfast would fail to start or to work) and warnings,
    /// each naming the key and, when the key is in the file, its line.
    pub fn check_environment(&self) -> Vec<Diagnostic> {
        let mut env = Env {
            settings: self,
            found: Vec::new(),
            running: log_in_use(&self.log_dir()),
        };

        env.writable_dir("data_dir", &self.log_dir());
        env.not_in_ram("data_dir", &self.data_dir);
        for sink in self.sinks.values() {
            sink.kind
                .component()
                .check_environment(&sink.name, &mut env);
        }

        env.bindable("api.listen", self.api.listen);
        for source in self.sources.values() {
            source
                .kind
                .component()
                .check_environment(&source.name, &mut env);
        }
        env.found
    }
}

/// The machine checks' findings so far; components add theirs through
/// its probes.
pub(crate) struct Env<'a> {
    settings: &'a Settings,
    found: Vec<Diagnostic>,
    /// A live process holds this config's log open: a holdfast running with
    /// it, whose listeners are expected to be bound.
    running: bool,
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
            .settings
            .position_of(key)
            .or_else(|| {
                key.rsplit_once('[')
                    .and_then(|(k, _)| self.settings.position_of(k))
            })
            .or_else(|| self.settings.position_of(&format!("{key}.type")));
        self.found.push(Diagnostic {
            severity,
            file: self.settings.config_file.clone(),
            position,
            key: key.to_string(),
            message: super::effective::redact(&message, &self.settings.secrets),
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
    fn not_in_ram(&mut self, key: &str, dir: &Path) {
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
                        self.settings.data_dir.display()
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
                    self.settings.data_dir.display()
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

// Its table is a journald source.
#[cfg(all(test, feature = "journald"))]
mod tests {
    use super::*;
    use crate::config::Position;

    /// `check --json` gave a table's finding (the journald source's
    /// readability) no line: it is placed where the table's `type` is.
    #[test]
    fn a_finding_about_a_table_is_placed_at_its_type() {
        let s = crate::config::parse(
            "[sources.j]\ntype = \"journald\"\n\n[sinks.a]\ntype = \"file\"\ninputs = [\"j\"]\n",
            "/etc/holdfast/holdfast.toml",
        )
        .expect("a valid config");
        let mut env = Env {
            settings: &s,
            found: Vec::new(),
            running: false,
        };
        env.push(Severity::Warning, "sources.j", "not readable".into());
        env.push(Severity::Warning, "sinks.a.inputs", "written".into());
        let at: Vec<_> = env.found.iter().map(|d| d.position).collect();
        assert_eq!(
            at,
            [
                Some(Position { line: 2, column: 8 }),
                Some(Position {
                    line: 6,
                    column: 10
                })
            ]
        );
    }
}
