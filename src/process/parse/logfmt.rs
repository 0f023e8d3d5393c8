//! `logfmt`: `key=value key2="quoted value" flag` pairs into attributes
//! (string values; a bare key is `true`). A line with no `key=value` pair,
//! or with an unclosed quote, does not parse.

use super::Sink;
use crate::process::Value;

pub fn parse(input: &str, sink: &mut Sink<'_, '_>) -> bool {
    let b = input.as_bytes();
    let mut i = 0;
    let mut pairs = 0;
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &input[start..i];
        if i == b.len() || b[i] != b'=' {
            sink.put(key, Value::Bool(true));
            continue;
        }
        i += 1;
        let value = if i < b.len() && b[i] == b'"' {
            i += 1;
            let mut v = String::new();
            let mut closed = false;
            while i < b.len() {
                match b[i] {
                    // Only an ASCII character is escaped: a backslash before
                    // anything else stays as written.
                    b'\\' if i + 1 < b.len() && b[i + 1].is_ascii() => {
                        let c = b[i + 1];
                        v.push(match c {
                            b'n' => '\n',
                            b't' => '\t',
                            _ => c as char,
                        });
                        i += 2;
                        continue;
                    }
                    b'"' => {
                        closed = true;
                        i += 1;
                        break;
                    }
                    _ => {
                        // Copy the run up to the next quote or backslash
                        // whole (keeps multi-byte characters intact); the
                        // first byte is taken whatever it is (a lone
                        // backslash), and the run ends only at ASCII bytes,
                        // so always at a character boundary.
                        let run = i;
                        i += 1;
                        while i < b.len() && b[i] != b'"' && b[i] != b'\\' {
                            i += 1;
                        }
                        v.push_str(&input[run..i]);
                    }
                }
            }
            if !closed {
                return false;
            }
            v
        } else {
            let vs = i;
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            input[vs..i].to_string()
        };
        if key.is_empty() {
            return false;
        }
        sink.put(key, Value::Str(value));
        pairs += 1;
    }
    pairs > 0
}

#[cfg(test)]
mod tests {
    use crate::event::EventId;
    use crate::process::parse::{Format, Parser};
    use crate::process::{Event, Flow, Value};

    /// Found by the chain's property test: a backslash before a multi-byte
    /// character inside quotes cut the character in two (a panic).
    #[test]
    fn a_backslash_before_a_multibyte_character_stays() {
        let p = Parser {
            format: Format::Logfmt,
            field: None,
            body_key: None,
        };
        let mut ev = Event::new(r#"a="x\é\" b=1 c="\""#, EventId([0; 16]));
        assert_eq!(p.apply(&mut ev), Flow::Next);
        assert_eq!(ev.attr("a"), Some(&Value::Str(r#"x\é" b=1 c="#.into())));
        let mut ev = Event::new("k=\"é\\", EventId([0; 16]));
        assert_eq!(p.apply(&mut ev), Flow::Unparsed);
    }
}
