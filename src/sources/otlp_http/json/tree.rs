/*!
The tree a body is parsed into before it is decoded: every key kept in
order (so a duplicate is refused while parsing) and every integer exactly.
*/

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{JsonError, Result};

/// A parsed JSON document that keeps object keys in order (and so can see
/// duplicates) and integers exactly.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum J {
    Null,
    Bool(bool),
    U(u64),
    I(i64),
    F(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::U(_) | J::I(_) | J::F(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(super) fn items(&self, key: &str) -> &[J] {
        match self.get(key) {
            Some(J::Arr(items)) => items,
            _ => &[],
        }
    }

    pub(crate) fn parse(body: &[u8]) -> Result<J> {
        serde_json::from_slice(body).map_err(|e| JsonError {
            path: String::new(),
            problem: format!("not valid JSON: {e}"),
        })
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        d.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_none<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<J, E> {
        Ok(J::U(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<J, E> {
        Ok(J::I(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<J, E> {
        Ok(J::F(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(J::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut fields: Vec<(String, J)> = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value()?;
            fields.push((k, v));
        }
        if let Some(k) = first_duplicate(&fields) {
            return Err(de::Error::custom(format!(
                "the key {k:?} appears twice in one object; only one may be given"
            )));
        }
        Ok(J::Obj(fields))
    }
}

fn first_duplicate(fields: &[(String, J)]) -> Option<&str> {
    if fields.len() <= 8 {
        for i in 1..fields.len() {
            if fields[..i].iter().any(|(k, _)| *k == fields[i].0) {
                return Some(&fields[i].0);
            }
        }
        return None;
    }
    let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}
