//! `[sinks.<name>]`: where events go. The tables are read here by name
//! and type; each type's own keys, check and description live with the
//! sink (its `config.rs`, which checks its `inputs` with
//! `SinkEnv::check_inputs`), found through the lists of kinds ([`crate::sources::SourceKind`], [`crate::sinks::SinkKind`]).

use std::path::Path;

use crate::checking::Checker;
use crate::component::SinkEnv;
use crate::sinks::{SinkKind, SINK_TYPES};

/// One configured sink: a consumer of the log with its own cursor.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// The table's name: 1-64 characters of `[A-Za-z0-9_-]`; also the name
    /// of its cursor in the log.
    pub name: String,
    /// Names of the sources whose events this sink sends; never empty, no
    /// repeats, each one a configured source.
    pub inputs: Vec<String>,
    /// What the sink is.
    pub kind: SinkKind,
}

/// Checks every `[sinks.<name>]` table. `declared_sources` holds every
/// source name in the file.
pub(crate) fn check_sinks(
    cx: &mut Checker<'_>,
    data_dir: &Path,
    declared_sources: &[String],
) -> Vec<SinkSettings> {
    let (tables, _declared) = cx.named_tables("sinks", "sink", SINK_TYPES);
    let hash = config_hash(cx.src.text);
    let env = SinkEnv {
        data_dir,
        declared_sources,
        config_hash: &hash,
    };
    let mut sinks = Vec::new();
    for t in &tables {
        if let Some(kind) = SinkKind::check(cx, t, &env) {
            sinks.push(SinkSettings {
                name: t.name.clone(),
                inputs: kind.component().inputs().to_vec(),
                kind,
            });
        }
    }
    sinks
}

/// A short hash of the config text, stored with quarantined events so an
/// operator can tell which config rejected them.
pub(crate) fn config_hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}
