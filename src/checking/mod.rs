/*!
The config's checking machinery: what turns TOML text into checked values
with every problem placed, and nothing of what the settings are. The
settings assembly (`src/config/`) and each component's `config.rs` use it;
it imports neither (the layer table in `docs/ARCHITECTURE.md`).

* `checker.rs` — the `Checker` that collects every problem (not just the
  first) with its place, and the `[sources.*]`/`[sinks.*]` tables read by
  name and type (`NamedTable`);
* `text.rs` — positions and key paths; `serde_messages.rs` — serde's
  messages in the config's terms; `error.rs` — [`Diagnostic`],
  [`ConfigError`] and the did-you-mean;
* `units.rs` — sizes (`"64MiB"`) and durations (`"30s"`);
* `raw.rs` — the raw table structs' macros (`raw_table!`,
  `one_of_newtype!`) and `one_of`;
* `interpolate.rs` — `${VAR}` references, with a map back to the file's
  positions; `effective.rs` — secrets masked, in messages and in the
  effective config of `check --print-config`;
* `environment.rs` — `Env`, the probes of the machine checks (writable
  directories, bindable ports, readable files) that components call.
*/

mod checker;
pub(crate) mod effective;
pub(crate) mod environment;
pub(crate) mod error;
pub(crate) mod interpolate;
pub(crate) mod raw;
mod serde_messages;
pub(crate) mod text;
pub(crate) mod units;

pub(crate) use checker::{check_name, normalize, Checker, NamedTable};
pub(crate) use environment::Env;
pub use error::{ConfigError, Diagnostic, Position, Severity};
