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
                    b'\\' if i + 1 < b.len() => {
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
                        // whole (keeps multi-byte characters intact).
                        let run = i;
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
