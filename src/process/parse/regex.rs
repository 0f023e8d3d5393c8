//! `regex`: a pattern's named captures become string attributes; a line
//! it does not match does not parse. Groups that took no part in the match
//! add nothing.

use super::Sink;
use crate::process::Value;

#[derive(Debug, Clone)]
pub struct RegexParser {
    pub regex: regex::Regex,
    /// The capture names, by group index (`None`: unnamed).
    names: Vec<Option<String>>,
}

impl RegexParser {
    pub fn new(regex: regex::Regex) -> RegexParser {
        let names = regex
            .capture_names()
            .map(|n| n.map(str::to_string))
            .collect();
        RegexParser { regex, names }
    }

    pub fn parse(&self, input: &str, sink: &mut Sink<'_, '_>) -> bool {
        let Some(caps) = self.regex.captures(input) else {
            return false;
        };
        for (i, name) in self.names.iter().enumerate() {
            if let (Some(name), Some(m)) = (name, caps.get(i)) {
                sink.put(name, Value::Str(m.as_str().to_string()));
            }
        }
        true
    }
}
