//! `severity`: a field mapped to the record's OpenTelemetry severity number
//! (1-24: TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17, FATAL 21), its text
//! kept as `severity_text`. The built-in names cover the usual spellings
//! (syslog's too); a step's `map` adds or overrides names. A value no name
//! matches is flagged and counted as unparsed.

use super::{Event, Flow};

/// Names every severity step knows, lowercase.
pub const DEFAULT_NAMES: &[(&str, i32)] = &[
    ("trace", 1),
    ("debug", 5),
    ("dbg", 5),
    ("d", 5),
    ("verbose", 5),
    ("v", 5),
    ("info", 9),
    ("information", 9),
    ("informational", 9),
    ("i", 9),
    ("notice", 10),
    ("warn", 13),
    ("warning", 13),
    ("w", 13),
    ("error", 17),
    ("err", 17),
    ("e", 17),
    ("severe", 17),
    ("crit", 18),
    ("critical", 18),
    ("alert", 19),
    ("emerg", 21),
    ("emergency", 21),
    ("fatal", 21),
    ("f", 21),
    ("panic", 21),
];

/// The severity number of a level name (`"info"`, `"WARN"`), for config
/// checks (`severity_below`); also plain numbers 1-24.
pub fn number_of(name: &str) -> Option<i32> {
    let lower = name.to_ascii_lowercase();
    DEFAULT_NAMES
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, v)| *v)
        .or_else(|| name.parse().ok().filter(|n| (1..=24).contains(n)))
}

#[derive(Debug, Clone)]
pub struct Severity {
    pub field: String,
    /// Lowercase names and their numbers, checked before the defaults.
    pub map: Vec<(String, i32)>,
}

impl Severity {
    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        let Some(text) = ev.attr(&self.field).and_then(|v| v.as_text()) else {
            return Flow::Unparsed;
        };
        let t = text.trim();
        let number = self
            .map
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(t))
            .map(|(_, v)| *v)
            .or_else(|| number_of(t));
        match number {
            Some(n) => {
                ev.severity_text = t.to_string();
                ev.severity_number = n;
                Flow::Next
            }
            None => Flow::Unparsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventId;
    use crate::process::Value;

    #[test]
    fn names_map_to_otel_numbers() {
        let s = Severity {
            field: "level".into(),
            map: vec![("chatty".into(), 1)],
        };
        for (text, n) in [
            ("INFO", 9),
            ("Warning", 13),
            ("E", 17),
            ("chatty", 1),
            ("21", 21),
        ] {
            let mut ev = Event::new("x", EventId([0; 16]));
            ev.set("level", Value::Str(text.into()));
            assert_eq!(s.apply(&mut ev), Flow::Next, "{text}");
            assert_eq!((ev.severity_number, ev.severity_text.as_str()), (n, text));
        }
        let mut ev = Event::new("x", EventId([0; 16]));
        ev.set("level", Value::Str("loud".into()));
        assert_eq!(s.apply(&mut ev), Flow::Unparsed);
        assert_eq!(ev.severity_number, 0);
    }
}
