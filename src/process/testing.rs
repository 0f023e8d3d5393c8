//! Chains for unit tests, a step to a line: the parse and drop steps most
//! tests build (here and in the modules that run chains).

use super::filter::{Action, Condition, Filter};
use super::parse::{Format, Parser};
use super::{Kind, Step};

pub(crate) fn step(name: &str, kind: Kind) -> Step {
    Step {
        name: name.into(),
        kind,
    }
}

/// Parses the body as `format`, taking the body from `body_key` if given.
pub(crate) fn parse(format: Format, body_key: Option<&str>) -> Kind {
    Kind::Parse(Parser {
        format,
        field: None,
        body_key: body_key.map(str::to_string),
    })
}

/// Drops the events that match `when`.
pub(crate) fn drop_when(when: Condition) -> Kind {
    Kind::Filter(Filter {
        action: Action::Drop,
        when,
    })
}
