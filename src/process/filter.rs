//! `filter`: keep or drop the events a condition selects. A condition is
//! every test it names (all must hold): severity below or at least a level,
//! a regex on the body, a field's value equal to a string or matching a
//! regex. The same conditions choose which events a `sample` step samples.

use super::{Event, Flow};

/// A test on a field's value.
#[derive(Debug, Clone)]
pub enum FieldTest {
    Equals(String),
    Matches(regex::Regex),
    /// The field is set (any value).
    Exists,
}

/// What a filter or sample step looks at; an empty condition holds for
/// every event.
#[derive(Debug, Clone, Default)]
pub struct Condition {
    /// Holds for events with a known severity below this number. An event
    /// without one never matches: unparsed lines are not dropped as debug.
    pub severity_below: Option<i32>,
    /// Holds for events with a known severity at or above this number.
    pub severity_at_least: Option<i32>,
    pub body: Option<regex::Regex>,
    pub field: Option<(String, FieldTest)>,
}

impl Condition {
    pub fn is_empty(&self) -> bool {
        self.severity_below.is_none()
            && self.severity_at_least.is_none()
            && self.body.is_none()
            && self.field.is_none()
    }

    pub fn holds(&self, ev: &Event<'_>) -> bool {
        let sev = ev.severity_number;
        if let Some(b) = self.severity_below {
            if sev == 0 || sev >= b {
                return false;
            }
        }
        if let Some(a) = self.severity_at_least {
            if sev == 0 || sev < a {
                return false;
            }
        }
        if let Some(r) = &self.body {
            if !r.is_match(&ev.body) {
                return false;
            }
        }
        if let Some((key, test)) = &self.field {
            let v = ev.attr(key);
            let ok = match (test, v.and_then(|v| v.as_text())) {
                (FieldTest::Exists, _) => v.is_some(),
                (FieldTest::Equals(s), Some(t)) => t == s.as_str(),
                (FieldTest::Matches(r), Some(t)) => r.is_match(&t),
                (_, None) => false,
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// The condition in words, for `holdfast check`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.severity_below {
            parts.push(format!("severity below {b}"));
        }
        if let Some(a) = self.severity_at_least {
            parts.push(format!("severity at least {a}"));
        }
        if let Some(r) = &self.body {
            parts.push(format!("body matches '{}'", r.as_str()));
        }
        match &self.field {
            Some((k, FieldTest::Equals(s))) => parts.push(format!("{k} = \"{s}\"")),
            Some((k, FieldTest::Matches(r))) => parts.push(format!("{k} matches '{}'", r.as_str())),
            Some((k, FieldTest::Exists)) => parts.push(format!("{k} is set")),
            None => {}
        }
        if parts.is_empty() {
            "every event".into()
        } else {
            parts.join(" and ")
        }
    }
}

/// Whether a filter drops what its condition selects or all the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Drop,
    Keep,
}

#[derive(Debug, Clone)]
pub struct Filter {
    pub action: Action,
    pub when: Condition,
}

impl Filter {
    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        let selected = self.when.holds(ev);
        match (self.action, selected) {
            (Action::Drop, true) | (Action::Keep, false) => Flow::Drop,
            _ => Flow::Next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventId;
    use crate::process::Value;

    fn ev(body: &str, sev: i32) -> Event<'_> {
        let mut e = Event::new(body, EventId([0; 16]));
        e.severity_number = sev;
        e.set("path", Value::Str("/health".into()));
        e
    }

    #[test]
    fn conditions_combine_and_unknown_severity_never_matches() {
        let debug = Filter {
            action: Action::Drop,
            when: Condition {
                severity_below: Some(9),
                ..Default::default()
            },
        };
        assert_eq!(debug.apply(&mut ev("x", 5)), Flow::Drop);
        assert_eq!(debug.apply(&mut ev("x", 9)), Flow::Next);
        assert_eq!(debug.apply(&mut ev("x", 0)), Flow::Next);
        let keep = Filter {
            action: Action::Keep,
            when: Condition {
                body: Some(regex::Regex::new("ERROR").expect("regex")),
                field: Some(("path".into(), FieldTest::Equals("/health".into()))),
                ..Default::default()
            },
        };
        assert_eq!(keep.apply(&mut ev("an ERROR", 0)), Flow::Next);
        assert_eq!(keep.apply(&mut ev("fine", 0)), Flow::Drop);
        assert!(keep.when.describe().contains("path = \"/health\""));
    }
}
