//! How much a document repeats: `document = "lean"` (the default) writes
//! each fact once, `"full"` the shape of holdfast 0.x before it, for
//! pipelines that read the repeated fields.
//!
//! A lean document leaves out what the receiver would store again for
//! every event without learning anything:
//!
//! * `observed_timestamp` when it equals `@timestamp` (no time was parsed
//!   from the record, so both are the moment holdfast read it);
//! * `event_id` where the sink sends the event id beside the document
//!   already (Elasticsearch's `_id` of a log record, NATS's
//!   `Nats-Msg-Id`); OpenObserve, which has no such place, keeps it for
//!   reconciliation, and so do spans and metric points, whose `_id` is
//!   their own identity;
//! * the `log.file.path` and `log.file.name` attributes of a file event,
//!   which the top-level `log.file.path` beside `log.file.offset` says;
//! * the `scope` of holdfast's own sources (`holdfast.sources.<type>` and
//!   the agent's version): the same for every event of a source, and
//!   `source` names it.

use crate::checking::raw::one_of_newtype;
use crate::event::Stored;

/// `document` of a document sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Lean,
    Full,
}

one_of_newtype! {
    /// `document` of a sink that writes JSON documents.
    RawLayout(Layout) {
        "lean" => Layout::Lean,
        "full" => Layout::Full,
    }
}

impl Layout {
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Lean => "lean",
            Layout::Full => "full",
        }
    }
}

impl Layout {
    pub(super) fn lean(self) -> bool {
        self == Layout::Lean
    }

    /// The attributes `ev`'s document leaves out: the file's path and
    /// name, which the top-level `log.file.path` of a file event says.
    pub(super) fn skipped_attributes(self, ev: &Stored) -> &'static [&'static str] {
        if self.lean() && ev.origin().is_some() {
            FILE_ATTRIBUTES
        } else {
            &[]
        }
    }
}

/// The scope name prefix of holdfast's own sources.
pub(super) const OWN_SCOPE_PREFIX: &str = "holdfast.";

/// The attributes the `file` source names a line's file with (OpenTelemetry's
/// semantic conventions, `src/sources/file/encode.rs`).
const FILE_ATTRIBUTES: &[&str] = &["log.file.path", "log.file.name"];

/// The checked `document` key at `key`: lean when absent.
pub(crate) fn check(
    cx: &mut crate::checking::Checker<'_>,
    key: &str,
    raw: Option<&toml::Spanned<RawLayout>>,
) -> Layout {
    raw.map_or(Layout::Lean, |v| {
        cx.note(key, v);
        v.get_ref().0
    })
}
