/*!
The config: one TOML file (by default `/etc/holdfast/holdfast.toml`) read in
two stages, the way `holdfast check` and `holdfast run` both use it.

First, `${VAR}` / `${VAR:-default}` references are replaced with values from
the environment (`crate::checking::interpolate`: escaped so that no value can change the
document's structure; positions in messages still point into the file as
written), so one file serves a fleet. [`Settings::effective_config`]
(`crate::checking::effective`) is the result with secrets masked.

1. **Raw** (`raw.rs`; each source's and sink's own in its folder's
   `config.rs`, found through the lists of kinds ([`crate::sources::SourceKind`], [`crate::sinks::SinkKind`])): serde structs with `deny_unknown_fields`, every field optional and
   documented with its default. Sizes (`"64MiB"`) and durations (`"30s"`)
   are parsed here (`crate::checking::units`). Values that later checks point at keep
   their place in the file (`toml::Spanned`).
2. **Validated** ([`Settings`], `settings.rs`): defaults applied, paths
   resolved (relative ones against the config file's directory), bounds and
   cross-references checked, the `[log]` table turned into the
   [`LogOptions`](crate::seglog::LogOptions) that
   [`Log::open`](crate::seglog::Log::open) takes (`log.rs`), each
   `[sources.<name>]` and `[sinks.<name>]` table by its type's check
   (`sources.rs`, `sinks.rs` read the tables and a sink's `inputs`; the
   rest is the component's). The machinery between the stages, which the
   components' checks use too, is a room of its own below the components
   ([`crate::checking`]: the checker that collects every problem,
   positions and key paths, units, interpolation, the machine checks'
   probes); this module assembles the settings with it.

Every problem is a [`Diagnostic`] naming the file, line, column and key path
and saying what to change, for example

```text
/etc/holdfast/holdfast.toml:31:11: sinks.archive.inputs[0]: no source named "syslg" (did you mean "syslog"?); sources defined: otlp, syslog
```

and all problems are reported at once, not just the first. Things that are
allowed but probably unintended (a public listener without authentication,
a source no sink reads) are warnings: [`Settings::warnings`]. Checks that
touch the machine (is the data directory writable, is the port free) are
separate: [`Settings::check_environment`]. [`Settings::describe`] prints what
the config will do, in plain words, for `holdfast check`.

An empty file is a valid config: every default, no sources, no sinks.

```
let settings = holdfast::config::parse(
    r#"
    [sources.syslog]
    type = "file"
    include = ["/var/log/syslog"]

    [sinks.archive]
    type = "file"
    inputs = ["syslog"]
    "#,
    "/etc/holdfast/holdfast.toml",
)?;
assert_eq!(settings.log_dir(), std::path::Path::new("/var/lib/holdfast/log"));
assert_eq!(settings.sinks["archive"].inputs, ["syslog"]);
# Ok::<(), holdfast::config::ConfigError>(())
```

The keys, their defaults and what they mean for the operator are in
`docs/configuration.md`; `config/holdfast.toml` is the default config and
`config/examples/` holds annotated ones.
*/

mod describe;
mod log;
mod machine;
mod raw;
mod settings;
mod sinks;
mod sources;

#[cfg(test)]
mod interpolate_tests;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use toml::de::DeTable;

pub use crate::checking::{ConfigError, Diagnostic, Position, Severity};
pub use settings::{
    ApiSettings, DaemonSettings, LogFormat, LoggingSettings, Settings, DEFAULT_API_LISTEN,
    DEFAULT_DATA_DIR, DEFAULT_MALLOC_ARENAS, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_WORKER_THREADS,
    SYSTEMD_STOP_TIMEOUT,
};
pub use sinks::SinkSettings;
pub use sources::SourceSettings;

use crate::checking::text::{self, SourceText};
use crate::checking::{effective, interpolate, normalize, Checker};

/// Where `holdfast` looks for its config unless told otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/holdfast/holdfast.toml";

/// Reads and validates the config file at `path`.
///
/// Fails with [`ConfigError::Read`] when the file cannot be read and with
/// [`ConfigError::Invalid`] (every problem found, including a file that is
/// not UTF-8) otherwise.
pub fn load(path: impl AsRef<Path>) -> Result<Settings, ConfigError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    match std::str::from_utf8(&bytes) {
        Ok(text) => parse(text, path),
        Err(e) => Err(ConfigError::Invalid {
            problems: vec![not_utf8(&bytes, e.valid_up_to(), path)],
        }),
    }
}

/// Validates config text; `path` is named in messages and is the base for
/// relative paths in the config. `${VAR}` references are read from the
/// process environment.
pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<Settings, ConfigError> {
    parse_with_env(text, path, &|name| std::env::var(name).ok())
}

/// The errors `check` gives for a whole config `text`, as (key, message):
/// what the components' config tests compare (warnings left out).
#[cfg(test)]
pub(crate) fn error_messages(text: &str) -> Vec<(String, String)> {
    match parse(text, "/etc/holdfast/holdfast.toml") {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems()
            .iter()
            .filter(|d| d.severity == crate::checking::Severity::Error)
            .map(|d| (d.key.clone(), d.message.clone()))
            .collect(),
    }
}

/// [`parse`] with the environment given: `env` returns a variable's value,
/// or `None` when it is unset.
pub fn parse_with_env(
    text: &str,
    path: impl AsRef<Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, ConfigError> {
    let path = path.as_ref();
    // A byte-order mark is harmless; drop it rather than call it a syntax
    // error (columns on line 1 then count from after it).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let interpolated = interpolate::interpolate(text, env);
    let src = SourceText::interpolated(text, &interpolated.text, &interpolated.pieces, path);
    // A message may quote a value (a URL holding a token): never a secret.
    let secrets = effective::secret_spellings(&interpolated.pieces);
    let redacted = |mut d: Diagnostic| {
        d.message = effective::redact(&d.message, &secrets);
        d
    };
    let root = match DeTable::parse(&interpolated.text) {
        Ok(root) => root,
        Err(e) => {
            // The references' own problems first: a failed one may be why
            // the text does not parse.
            let mut problems: Vec<Diagnostic> = interpolated
                .problems
                .iter()
                .map(|p| src.diagnostic(Severity::Error, Some(p.to.clone()), "", &p.message))
                .collect();
            problems.push(src.syntax_error(&e));
            return Err(ConfigError::Invalid {
                problems: problems.into_iter().map(redacted).collect(),
            });
        }
    };
    let mut cx = Checker::new(&src, root.get_ref(), base_dir(path));
    for p in &interpolated.problems {
        let key = text::key_path_at(root.get_ref(), "", &p.to).unwrap_or_default();
        cx.error(Some(p.to.clone()), &key, &p.message);
    }
    cx.ignore_problems_at(
        interpolated
            .pieces
            .iter()
            .filter(|p| p.failed)
            .map(|p| p.to.clone())
            .collect(),
    );
    let mut settings = settings::check_document(&mut cx, &root, path);
    let (errors, warnings, origins) = cx.finish();
    if !errors.is_empty() {
        return Err(ConfigError::Invalid {
            problems: errors.into_iter().map(redacted).collect(),
        });
    }
    settings.warnings = warnings.into_iter().map(redacted).collect();
    settings.origins = origins;
    settings.effective =
        effective::masked(&interpolated.text, root.get_ref(), &interpolated.pieces);
    settings.secrets = secrets;
    Ok(settings)
}

/// The directory relative paths in the config are resolved against: the
/// config file's own, made absolute.
fn base_dir(config: &Path) -> PathBuf {
    let parent = config.parent().unwrap_or(Path::new(""));
    if parent.is_absolute() {
        return parent.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(cwd) => normalize(&cwd.join(parent)),
        Err(_) => parent.to_path_buf(),
    }
}

fn not_utf8(bytes: &[u8], valid: usize, path: &Path) -> Diagnostic {
    // The prefix is valid UTF-8 by definition of `valid_up_to`.
    let prefix = std::str::from_utf8(&bytes[..valid]).unwrap_or("");
    let src = SourceText::new(prefix, path);
    Diagnostic {
        severity: Severity::Error,
        file: path.to_path_buf(),
        position: Some(src.position(valid)),
        key: String::new(),
        message: format!(
            "the file is not valid UTF-8 (byte 0x{:02x}): TOML files must be UTF-8; convert it, \
             for example with `iconv -f latin1 -t utf-8`",
            bytes[valid]
        ),
    }
}
