//! `redact`: a regex's matches replaced (tokens, passwords, card numbers)
//! in the body and in string attributes before anything reaches the disk.
//! `$name` / `$1` in the replacement refer to the pattern's groups, so a
//! key can stay and only its value be masked.

use std::borrow::Cow;

use super::{Event, Flow, Value};

#[derive(Debug, Clone)]
pub struct Redact {
    pub pattern: regex::Regex,
    pub replacement: String,
    /// Where to look: the body (`"body"`) and attributes by name; empty:
    /// the body and every string attribute.
    pub fields: Vec<String>,
}

impl Redact {
    fn wants(&self, field: &str) -> bool {
        self.fields.is_empty() || self.fields.iter().any(|f| f == field)
    }

    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        let mut changed = false;
        if self.wants("body") {
            if let Cow::Owned(s) = self
                .pattern
                .replace_all(&ev.body, self.replacement.as_str())
            {
                ev.body = Cow::Owned(s);
                changed = true;
            }
        }
        for (k, v) in ev.attrs.iter_mut() {
            if let Value::Str(s) = v {
                if self.wants(k) {
                    if let Cow::Owned(n) = self.pattern.replace_all(s, self.replacement.as_str()) {
                        *s = n;
                        changed = true;
                    }
                }
            }
        }
        if changed {
            Flow::Redacted
        } else {
            Flow::Next
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventId;

    #[test]
    fn masks_body_and_attributes_keeping_the_key() {
        let r = Redact {
            pattern: regex::Regex::new(r"(?P<k>password=)\S+").expect("regex"),
            replacement: "${k}***".into(),
            fields: vec![],
        };
        let mut ev = Event::new("login password=hunter2 ok", EventId([0; 16]));
        ev.set("q", Value::Str("password=x".into()));
        ev.set("n", Value::Int(4));
        assert_eq!(r.apply(&mut ev), Flow::Redacted);
        assert_eq!(ev.body, "login password=*** ok");
        assert_eq!(ev.attr("q"), Some(&Value::Str("password=***".into())));
        let mut clean = Event::new("nothing here", EventId([0; 16]));
        assert_eq!(r.apply(&mut clean), Flow::Next);
    }
}
