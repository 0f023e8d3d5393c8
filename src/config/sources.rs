//! `[sources.<name>]`: where events come from. The tables are read here
//! by name and type; each type's keys, check and description live with the
//! source (its `config.rs`), found through the lists of kinds ([`crate::sources::SourceKind`], [`crate::sinks::SinkKind`]).

use crate::checking::Checker;
use crate::component::SourceEnv;
use crate::sources::{SourceKind, SOURCE_TYPES};

/// One configured source.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// The table's name: 1-64 characters of `[A-Za-z0-9_-]`. Sinks refer to
    /// it in `inputs`; events carry it.
    pub name: String,
    /// What the source is.
    pub kind: SourceKind,
}

/// Checks every `[sources.<name>]` table. Returns the valid sources and the
/// names of all declared ones (valid or not).
pub(crate) fn check_sources(
    cx: &mut Checker<'_>,
    env: &SourceEnv<'_>,
) -> (Vec<SourceSettings>, Vec<String>) {
    let (tables, declared) = cx.named_tables("sources", "source", SOURCE_TYPES);
    let mut sources = Vec::new();
    for t in &tables {
        if let Some(kind) = SourceKind::check(cx, t, env) {
            sources.push(SourceSettings {
                name: t.name.clone(),
                kind,
            });
        }
    }
    (sources, declared)
}
