/*!
A strict OTLP/JSON decoder: the JSON mapping of the OTLP protobuf messages
(lowerCamelCase keys, hex trace and span ids, 64-bit integers as decimal
strings or numbers, enums as integers) into the prost types, accepting only
what it can represent exactly.

Why not the serde derive that `opentelemetry-proto` ships: it skips keys it
does not know (so `"log_records"` or `"logRecord"` silently yields a scope
with no records), treats an `AnyValue` with an unknown member as empty, and
keeps only the last of duplicate keys. Each of those would let holdfast
answer 200 for records it never stored. Here, every one of them is a 400
naming the JSON path:

* unknown keys (with the lowerCamelCase spelling, or the nearest known key,
  as a hint) and duplicate keys in one object;
* two members of one oneof (`stringValue` and `intValue`, `asDouble` and
  `asInt`, `gauge` and `sum`);
* a value of the wrong JSON type, `null` inside an array, an integer out of
  range or not exactly representable (write 64-bit integers as strings),
  trace ids that are not 32 hex digits and span ids that are not 16.

`null` stands for an absent field (proto3 JSON). Enum values may be integers
or their proto names (`"SPAN_KIND_SERVER"`). The input is first parsed into
a small tree ([`J`]) that keeps every key in order, so duplicates are seen;
serde_json bounds its nesting depth (128), so the recursive walk is bounded
too.
*/

use std::fmt;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point,
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Why a body is not OTLP/JSON holdfast can store faithfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonError {
    /// Where, like `resourceLogs[0].scopeLogs[1].logRecords[2].body`; empty
    /// for the document as a whole.
    pub path: String,
    pub problem: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "invalid OTLP/JSON: {}", self.problem)
        } else {
            write!(f, "invalid OTLP/JSON at {}: {}", self.path, self.problem)
        }
    }
}

type Result<T, E = JsonError> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------
// The tree

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
    fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::U(_) | J::I(_) | J::F(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }

    fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn items(&self, key: &str) -> &[J] {
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

// ---------------------------------------------------------------------------
// Paths and errors

/// Where in the document a value is; rendered only for errors.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    fn key(&'a self, k: &'a str) -> Path<'a> {
        Path::Key(self, k)
    }
    fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(p, k) => {
                if matches!(p, Path::Root) {
                    write!(f, "{k}")
                } else {
                    write!(f, "{p}.{k}")
                }
            }
            Path::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

fn err(p: &Path<'_>, problem: impl Into<String>) -> JsonError {
    JsonError {
        path: p.to_string(),
        problem: problem.into(),
    }
}

fn snake_to_camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn unknown(p: &Path<'_>, key: &str, known: &[&str]) -> JsonError {
    let camel = snake_to_camel(key);
    let hint = if camel != key && known.contains(&camel.as_str()) {
        format!("OTLP/JSON keys are lowerCamelCase: write {camel:?}")
    } else if let Some(best) = known
        .iter()
        .map(|k| {
            (
                k,
                strsim::jaro_winkler(&key.to_ascii_lowercase(), &k.to_ascii_lowercase()),
            )
        })
        .filter(|(_, score)| *score >= 0.85)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
    {
        format!("did you mean {best:?}?")
    } else {
        format!("the keys of this object are {}", known.join(", "))
    };
    err(
        p,
        format!(
            "unknown key {key:?} ({hint}); holdfast refuses keys it cannot store rather than \
             drop what they hold"
        ),
    )
}

/// Remembers which member of a oneof was set, to refuse a second one.
struct OneOf<'k> {
    set: Option<&'k str>,
}

impl<'k> OneOf<'k> {
    fn new() -> Self {
        OneOf { set: None }
    }

    /// Records `key` as the member given; `null` members do not count.
    fn take(&mut self, p: &Path<'_>, key: &'k str, v: &J) -> Result<bool> {
        if matches!(v, J::Null) {
            return Ok(false);
        }
        if let Some(first) = self.set {
            return Err(err(
                p,
                format!(
                    "both {first:?} and {key:?} are given, but they are alternatives (a oneof): \
                     give only one"
                ),
            ));
        }
        self.set = Some(key);
        Ok(true)
    }
}

// ---------------------------------------------------------------------------
// Shapes and scalars

fn object<'j>(v: &'j J, p: &Path<'_>, what: &str) -> Result<&'j [(String, J)]> {
    match v {
        J::Obj(fields) => Ok(fields),
        J::Null => Ok(&[]),
        other => Err(err(
            p,
            format!("expected {what} (an object), found {}", other.kind()),
        )),
    }
}

fn list<T>(v: &J, p: &Path<'_>, f: impl Fn(&J, &Path<'_>) -> Result<T>) -> Result<Vec<T>> {
    let items = match v {
        J::Arr(items) => items,
        J::Null => return Ok(Vec::new()),
        other => return Err(err(p, format!("expected an array, found {}", other.kind()))),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ip = p.index(i);
        if matches!(item, J::Null) {
            return Err(err(&ip, "null is not allowed inside an array"));
        }
        out.push(f(item, &ip)?);
    }
    Ok(out)
}

fn optional<T>(v: &J, p: &Path<'_>, f: impl Fn(&J, &Path<'_>) -> Result<T>) -> Result<Option<T>> {
    match v {
        J::Null => Ok(None),
        v => f(v, p).map(Some),
    }
}

fn string(v: &J, p: &Path<'_>) -> Result<String> {
    match v {
        J::Str(s) => Ok(s.clone()),
        J::Null => Ok(String::new()),
        other => Err(err(p, format!("expected a string, found {}", other.kind()))),
    }
}

fn boolean(v: &J, p: &Path<'_>) -> Result<bool> {
    match v {
        J::Bool(b) => Ok(*b),
        J::Null => Ok(false),
        other => Err(err(
            p,
            format!("expected true or false, found {}", other.kind()),
        )),
    }
}

/// Largest integer every f64 at or below it represents exactly.
const EXACT_F64: f64 = 9_007_199_254_740_992.0; // 2^53

fn int_from_float(x: f64, p: &Path<'_>) -> Result<i128> {
    if x.fract() != 0.0 || !x.is_finite() {
        return Err(err(p, format!("expected an integer, found {x}")));
    }
    if x.abs() > EXACT_F64 {
        return Err(err(
            p,
            format!(
                "the number {x} is too large to be read exactly from a JSON number: write \
                 64-bit integers as decimal strings, like \"1700000000000000000\""
            ),
        ));
    }
    Ok(x as i128)
}

fn integer(v: &J, p: &Path<'_>, min: i128, max: i128, what: &str) -> Result<i128> {
    let n: i128 = match v {
        J::Null => 0,
        J::U(n) => *n as i128,
        J::I(n) => *n as i128,
        J::F(x) => int_from_float(*x, p)?,
        J::Str(s) => s.trim().parse::<i128>().map_err(|_| {
            err(
                p,
                format!("expected {what} as a decimal string or number, found the string {s:?}"),
            )
        })?,
        other => {
            return Err(err(
                p,
                format!(
                    "expected {what} (a decimal string or number), found {}",
                    other.kind()
                ),
            ))
        }
    };
    if n < min || n > max {
        return Err(err(p, format!("{n} is out of range for {what}")));
    }
    Ok(n)
}

fn uint64(v: &J, p: &Path<'_>) -> Result<u64> {
    integer(v, p, 0, u64::MAX as i128, "an unsigned 64-bit integer").map(|n| n as u64)
}

fn int64(v: &J, p: &Path<'_>) -> Result<i64> {
    integer(v, p, i64::MIN as i128, i64::MAX as i128, "a 64-bit integer").map(|n| n as i64)
}

fn uint32(v: &J, p: &Path<'_>) -> Result<u32> {
    integer(v, p, 0, u32::MAX as i128, "an unsigned 32-bit integer").map(|n| n as u32)
}

fn int32(v: &J, p: &Path<'_>) -> Result<i32> {
    integer(v, p, i32::MIN as i128, i32::MAX as i128, "a 32-bit integer").map(|n| n as i32)
}

fn double(v: &J, p: &Path<'_>) -> Result<f64> {
    match v {
        J::Null => Ok(0.0),
        J::U(n) => Ok(*n as f64),
        J::I(n) => Ok(*n as f64),
        J::F(x) => Ok(*x),
        J::Str(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => s
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| {
                    err(
                        p,
                        format!(
                            "expected a number (or \"NaN\", \"Infinity\", \"-Infinity\"), found \
                             the string {s:?}"
                        ),
                    )
                }),
        },
        other => Err(err(p, format!("expected a number, found {}", other.kind()))),
    }
}

fn enumeration(v: &J, p: &Path<'_>, by_name: fn(&str) -> Option<i32>) -> Result<i32> {
    match v {
        J::Str(s) if s.parse::<i64>().is_err() => by_name(s).ok_or_else(|| {
            err(
                p,
                format!("unknown enum value {s:?}: OTLP/JSON writes enums as integers"),
            )
        }),
        v => int32(v, p),
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A trace id (16 bytes) or span id (8 bytes) as hex; empty means unset.
fn id(v: &J, p: &Path<'_>, len: usize) -> Result<Vec<u8>> {
    let s = match v {
        J::Null => return Ok(Vec::new()),
        J::Str(s) => s.as_bytes(),
        other => {
            return Err(err(
                p,
                format!("expected a hex string, found {}", other.kind()),
            ))
        }
    };
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if s.len() != 2 * len {
        return Err(err(
            p,
            format!(
                "expected {} hex digits ({len} bytes), found {} characters (OTLP/JSON ids are \
                 hex, not base64)",
                2 * len,
                s.len()
            ),
        ));
    }
    s.chunks(2)
        .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| err(p, "expected hex digits (0-9, a-f)"))
}

const B64_CONFIG: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const B64_STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, B64_CONFIG);
const B64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, B64_CONFIG);

/// Bytes as base64 (proto3 JSON accepts both alphabets, padded or not).
fn base64_bytes(v: &J, p: &Path<'_>) -> Result<Vec<u8>> {
    let s = match v {
        J::Null => return Ok(Vec::new()),
        J::Str(s) => s,
        other => {
            return Err(err(
                p,
                format!("expected a base64 string, found {}", other.kind()),
            ))
        }
    };
    let engine = if s.contains(['-', '_']) {
        &B64_URL_SAFE
    } else {
        &B64_STANDARD
    };
    engine
        .decode(s)
        .map_err(|e| err(p, format!("not valid base64: {e}")))
}

// ---------------------------------------------------------------------------
// Common messages

fn any_value(v: &J, p: &Path<'_>) -> Result<AnyValue> {
    use any_value::Value;
    const KEYS: &[&str] = &[
        "stringValue",
        "boolValue",
        "intValue",
        "doubleValue",
        "arrayValue",
        "kvlistValue",
        "bytesValue",
        "stringValueStrindex",
    ];
    let mut out = AnyValue::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "an AnyValue")? {
        let kp = p.key(k);
        if !KEYS.contains(&k.as_str()) {
            return Err(unknown(p, k, KEYS));
        }
        if !one.take(p, k, v)? {
            continue;
        }
        out.value = Some(match k.as_str() {
            "stringValue" => Value::StringValue(string(v, &kp)?),
            "boolValue" => Value::BoolValue(boolean(v, &kp)?),
            "intValue" => Value::IntValue(int64(v, &kp)?),
            "doubleValue" => Value::DoubleValue(double(v, &kp)?),
            "arrayValue" => Value::ArrayValue(array_value(v, &kp)?),
            "kvlistValue" => Value::KvlistValue(kvlist_value(v, &kp)?),
            "bytesValue" => Value::BytesValue(base64_bytes(v, &kp)?),
            _ => Value::StringValueStrindex(int32(v, &kp)?),
        });
    }
    Ok(out)
}

fn array_value(v: &J, p: &Path<'_>) -> Result<ArrayValue> {
    let mut out = ArrayValue::default();
    for (k, v) in object(v, p, "an ArrayValue")? {
        match k.as_str() {
            "values" => out.values = list(v, &p.key(k), any_value)?,
            _ => return Err(unknown(p, k, &["values"])),
        }
    }
    Ok(out)
}

fn kvlist_value(v: &J, p: &Path<'_>) -> Result<KeyValueList> {
    let mut out = KeyValueList::default();
    for (k, v) in object(v, p, "a KeyValueList")? {
        match k.as_str() {
            "values" => out.values = list(v, &p.key(k), key_value)?,
            _ => return Err(unknown(p, k, &["values"])),
        }
    }
    Ok(out)
}

fn key_value(v: &J, p: &Path<'_>) -> Result<KeyValue> {
    let mut out = KeyValue::default();
    for (k, v) in object(v, p, "a KeyValue")? {
        let kp = p.key(k);
        match k.as_str() {
            "key" => out.key = string(v, &kp)?,
            "value" => out.value = optional(v, &kp, any_value)?,
            "keyStrindex" => out.key_strindex = int32(v, &kp)?,
            _ => return Err(unknown(p, k, &["key", "value", "keyStrindex"])),
        }
    }
    Ok(out)
}

fn scope(v: &J, p: &Path<'_>) -> Result<InstrumentationScope> {
    let mut out = InstrumentationScope::default();
    for (k, v) in object(v, p, "an InstrumentationScope")? {
        let kp = p.key(k);
        match k.as_str() {
            "name" => out.name = string(v, &kp)?,
            "version" => out.version = string(v, &kp)?,
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &["name", "version", "attributes", "droppedAttributesCount"],
                ))
            }
        }
    }
    Ok(out)
}

fn entity_ref(v: &J, p: &Path<'_>) -> Result<EntityRef> {
    let mut out = EntityRef::default();
    for (k, v) in object(v, p, "an EntityRef")? {
        let kp = p.key(k);
        match k.as_str() {
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            "type" => out.r#type = string(v, &kp)?,
            "idKeys" => out.id_keys = list(v, &kp, string)?,
            "descriptionKeys" => out.description_keys = list(v, &kp, string)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &["schemaUrl", "type", "idKeys", "descriptionKeys"],
                ))
            }
        }
    }
    Ok(out)
}

fn resource(v: &J, p: &Path<'_>) -> Result<Resource> {
    let mut out = Resource::default();
    for (k, v) in object(v, p, "a Resource")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            "entityRefs" => out.entity_refs = list(v, &kp, entity_ref)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &["attributes", "droppedAttributesCount", "entityRefs"],
                ))
            }
        }
    }
    Ok(out)
}

/// The top-level object: one key holding the resource list.
fn top<'j>(tree: &'j J, key: &str) -> Result<&'j J> {
    let root = Path::Root;
    let mut found = &J::Null;
    for (k, v) in object(tree, &root, "an Export*ServiceRequest")? {
        if k == key {
            found = v;
        } else {
            return Err(unknown(&root, k, &[key]));
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------
// Logs

pub(crate) fn logs(tree: &J) -> Result<ExportLogsServiceRequest> {
    let root = Path::Root;
    let p = root.key("resourceLogs");
    Ok(ExportLogsServiceRequest {
        resource_logs: list(top(tree, "resourceLogs")?, &p, resource_logs)?,
    })
}

fn resource_logs(v: &J, p: &Path<'_>) -> Result<ResourceLogs> {
    let mut out = ResourceLogs::default();
    for (k, v) in object(v, p, "a ResourceLogs")? {
        let kp = p.key(k);
        match k.as_str() {
            "resource" => out.resource = optional(v, &kp, resource)?,
            "scopeLogs" => out.scope_logs = list(v, &kp, scope_logs)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["resource", "scopeLogs", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn scope_logs(v: &J, p: &Path<'_>) -> Result<ScopeLogs> {
    let mut out = ScopeLogs::default();
    for (k, v) in object(v, p, "a ScopeLogs")? {
        let kp = p.key(k);
        match k.as_str() {
            "scope" => out.scope = optional(v, &kp, scope)?,
            "logRecords" => out.log_records = list(v, &kp, log_record)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["scope", "logRecords", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn severity(s: &str) -> Option<i32> {
    SeverityNumber::from_str_name(s).map(|e| e as i32)
}

fn log_record(v: &J, p: &Path<'_>) -> Result<LogRecord> {
    const KEYS: &[&str] = &[
        "timeUnixNano",
        "observedTimeUnixNano",
        "severityNumber",
        "severityText",
        "body",
        "attributes",
        "droppedAttributesCount",
        "flags",
        "traceId",
        "spanId",
        "eventName",
    ];
    let mut out = LogRecord::default();
    for (k, v) in object(v, p, "a LogRecord")? {
        let kp = p.key(k);
        match k.as_str() {
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "observedTimeUnixNano" => out.observed_time_unix_nano = uint64(v, &kp)?,
            "severityNumber" => out.severity_number = enumeration(v, &kp, severity)?,
            "severityText" => out.severity_text = string(v, &kp)?,
            "body" => out.body = optional(v, &kp, any_value)?,
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "traceId" => out.trace_id = id(v, &kp, 16)?,
            "spanId" => out.span_id = id(v, &kp, 8)?,
            "eventName" => out.event_name = string(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Traces

pub(crate) fn traces(tree: &J) -> Result<ExportTraceServiceRequest> {
    let root = Path::Root;
    let p = root.key("resourceSpans");
    Ok(ExportTraceServiceRequest {
        resource_spans: list(top(tree, "resourceSpans")?, &p, resource_spans)?,
    })
}

fn resource_spans(v: &J, p: &Path<'_>) -> Result<ResourceSpans> {
    let mut out = ResourceSpans::default();
    for (k, v) in object(v, p, "a ResourceSpans")? {
        let kp = p.key(k);
        match k.as_str() {
            "resource" => out.resource = optional(v, &kp, resource)?,
            "scopeSpans" => out.scope_spans = list(v, &kp, scope_spans)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["resource", "scopeSpans", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn scope_spans(v: &J, p: &Path<'_>) -> Result<ScopeSpans> {
    let mut out = ScopeSpans::default();
    for (k, v) in object(v, p, "a ScopeSpans")? {
        let kp = p.key(k);
        match k.as_str() {
            "scope" => out.scope = optional(v, &kp, scope)?,
            "spans" => out.spans = list(v, &kp, span)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["scope", "spans", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn span_kind(s: &str) -> Option<i32> {
    span::SpanKind::from_str_name(s).map(|e| e as i32)
}

fn span(v: &J, p: &Path<'_>) -> Result<Span> {
    const KEYS: &[&str] = &[
        "traceId",
        "spanId",
        "traceState",
        "parentSpanId",
        "flags",
        "name",
        "kind",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "attributes",
        "droppedAttributesCount",
        "events",
        "droppedEventsCount",
        "links",
        "droppedLinksCount",
        "status",
    ];
    let mut out = Span::default();
    for (k, v) in object(v, p, "a Span")? {
        let kp = p.key(k);
        match k.as_str() {
            "traceId" => out.trace_id = id(v, &kp, 16)?,
            "spanId" => out.span_id = id(v, &kp, 8)?,
            "traceState" => out.trace_state = string(v, &kp)?,
            "parentSpanId" => out.parent_span_id = id(v, &kp, 8)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "name" => out.name = string(v, &kp)?,
            "kind" => out.kind = enumeration(v, &kp, span_kind)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "endTimeUnixNano" => out.end_time_unix_nano = uint64(v, &kp)?,
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            "events" => out.events = list(v, &kp, span_event)?,
            "droppedEventsCount" => out.dropped_events_count = uint32(v, &kp)?,
            "links" => out.links = list(v, &kp, span_link)?,
            "droppedLinksCount" => out.dropped_links_count = uint32(v, &kp)?,
            "status" => out.status = optional(v, &kp, span_status)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn span_event(v: &J, p: &Path<'_>) -> Result<span::Event> {
    let mut out = span::Event::default();
    for (k, v) in object(v, p, "a Span.Event")? {
        let kp = p.key(k);
        match k.as_str() {
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "name" => out.name = string(v, &kp)?,
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &[
                        "timeUnixNano",
                        "name",
                        "attributes",
                        "droppedAttributesCount",
                    ],
                ))
            }
        }
    }
    Ok(out)
}

fn span_link(v: &J, p: &Path<'_>) -> Result<span::Link> {
    const KEYS: &[&str] = &[
        "traceId",
        "spanId",
        "traceState",
        "attributes",
        "droppedAttributesCount",
        "flags",
    ];
    let mut out = span::Link::default();
    for (k, v) in object(v, p, "a Span.Link")? {
        let kp = p.key(k);
        match k.as_str() {
            "traceId" => out.trace_id = id(v, &kp, 16)?,
            "spanId" => out.span_id = id(v, &kp, 8)?,
            "traceState" => out.trace_state = string(v, &kp)?,
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "droppedAttributesCount" => out.dropped_attributes_count = uint32(v, &kp)?,
            "flags" => out.flags = uint32(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn status_code(s: &str) -> Option<i32> {
    status::StatusCode::from_str_name(s).map(|e| e as i32)
}

fn span_status(v: &J, p: &Path<'_>) -> Result<Status> {
    let mut out = Status::default();
    for (k, v) in object(v, p, "a Status")? {
        let kp = p.key(k);
        match k.as_str() {
            "message" => out.message = string(v, &kp)?,
            "code" => out.code = enumeration(v, &kp, status_code)?,
            _ => return Err(unknown(p, k, &["message", "code"])),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Metrics

pub(crate) fn metrics(tree: &J) -> Result<ExportMetricsServiceRequest> {
    let root = Path::Root;
    let p = root.key("resourceMetrics");
    Ok(ExportMetricsServiceRequest {
        resource_metrics: list(top(tree, "resourceMetrics")?, &p, resource_metrics)?,
    })
}

fn resource_metrics(v: &J, p: &Path<'_>) -> Result<ResourceMetrics> {
    let mut out = ResourceMetrics::default();
    for (k, v) in object(v, p, "a ResourceMetrics")? {
        let kp = p.key(k);
        match k.as_str() {
            "resource" => out.resource = optional(v, &kp, resource)?,
            "scopeMetrics" => out.scope_metrics = list(v, &kp, scope_metrics)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["resource", "scopeMetrics", "schemaUrl"])),
        }
    }
    Ok(out)
}

fn scope_metrics(v: &J, p: &Path<'_>) -> Result<ScopeMetrics> {
    let mut out = ScopeMetrics::default();
    for (k, v) in object(v, p, "a ScopeMetrics")? {
        let kp = p.key(k);
        match k.as_str() {
            "scope" => out.scope = optional(v, &kp, scope)?,
            "metrics" => out.metrics = list(v, &kp, metric)?,
            "schemaUrl" => out.schema_url = string(v, &kp)?,
            _ => return Err(unknown(p, k, &["scope", "metrics", "schemaUrl"])),
        }
    }
    Ok(out)
}

/// The metric kinds, which are the members of `Metric.data`.
pub(crate) const METRIC_KINDS: &[&str] = &[
    "gauge",
    "sum",
    "histogram",
    "exponentialHistogram",
    "summary",
];

fn metric(v: &J, p: &Path<'_>) -> Result<Metric> {
    const KEYS: &[&str] = &[
        "name",
        "description",
        "unit",
        "metadata",
        "gauge",
        "sum",
        "histogram",
        "exponentialHistogram",
        "summary",
    ];
    let mut out = Metric::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "a Metric")? {
        let kp = p.key(k);
        match k.as_str() {
            "name" => out.name = string(v, &kp)?,
            "description" => out.description = string(v, &kp)?,
            "unit" => out.unit = string(v, &kp)?,
            "metadata" => out.metadata = list(v, &kp, key_value)?,
            kind if METRIC_KINDS.contains(&kind) => {
                if !one.take(p, k, v)? {
                    continue;
                }
                out.data = Some(match kind {
                    "gauge" => metric::Data::Gauge(gauge(v, &kp)?),
                    "sum" => metric::Data::Sum(sum(v, &kp)?),
                    "histogram" => metric::Data::Histogram(histogram(v, &kp)?),
                    "exponentialHistogram" => {
                        metric::Data::ExponentialHistogram(exponential_histogram(v, &kp)?)
                    }
                    _ => metric::Data::Summary(summary(v, &kp)?),
                });
            }
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn temporality(s: &str) -> Option<i32> {
    AggregationTemporality::from_str_name(s).map(|e| e as i32)
}

fn gauge(v: &J, p: &Path<'_>) -> Result<Gauge> {
    let mut out = Gauge::default();
    for (k, v) in object(v, p, "a Gauge")? {
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &p.key(k), number_point)?,
            _ => return Err(unknown(p, k, &["dataPoints"])),
        }
    }
    Ok(out)
}

fn sum(v: &J, p: &Path<'_>) -> Result<Sum> {
    let mut out = Sum::default();
    for (k, v) in object(v, p, "a Sum")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, number_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            "isMonotonic" => out.is_monotonic = boolean(v, &kp)?,
            _ => {
                return Err(unknown(
                    p,
                    k,
                    &["dataPoints", "aggregationTemporality", "isMonotonic"],
                ))
            }
        }
    }
    Ok(out)
}

fn histogram(v: &J, p: &Path<'_>) -> Result<Histogram> {
    let mut out = Histogram::default();
    for (k, v) in object(v, p, "a Histogram")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, histogram_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            _ => return Err(unknown(p, k, &["dataPoints", "aggregationTemporality"])),
        }
    }
    Ok(out)
}

fn exponential_histogram(v: &J, p: &Path<'_>) -> Result<ExponentialHistogram> {
    let mut out = ExponentialHistogram::default();
    for (k, v) in object(v, p, "an ExponentialHistogram")? {
        let kp = p.key(k);
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &kp, exponential_point)?,
            "aggregationTemporality" => {
                out.aggregation_temporality = enumeration(v, &kp, temporality)?
            }
            _ => return Err(unknown(p, k, &["dataPoints", "aggregationTemporality"])),
        }
    }
    Ok(out)
}

fn summary(v: &J, p: &Path<'_>) -> Result<Summary> {
    let mut out = Summary::default();
    for (k, v) in object(v, p, "a Summary")? {
        match k.as_str() {
            "dataPoints" => out.data_points = list(v, &p.key(k), summary_point)?,
            _ => return Err(unknown(p, k, &["dataPoints"])),
        }
    }
    Ok(out)
}

fn number_point(v: &J, p: &Path<'_>) -> Result<NumberDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "asDouble",
        "asInt",
        "exemplars",
        "flags",
    ];
    let mut out = NumberDataPoint::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "a NumberDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "asDouble" => {
                if one.take(p, k, v)? {
                    out.value = Some(number_data_point::Value::AsDouble(double(v, &kp)?));
                }
            }
            "asInt" => {
                if one.take(p, k, v)? {
                    out.value = Some(number_data_point::Value::AsInt(int64(v, &kp)?));
                }
            }
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "flags" => out.flags = uint32(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn histogram_point(v: &J, p: &Path<'_>) -> Result<HistogramDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "bucketCounts",
        "explicitBounds",
        "exemplars",
        "flags",
        "min",
        "max",
    ];
    let mut out = HistogramDataPoint::default();
    for (k, v) in object(v, p, "a HistogramDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = optional(v, &kp, double)?,
            "bucketCounts" => out.bucket_counts = list(v, &kp, uint64)?,
            "explicitBounds" => out.explicit_bounds = list(v, &kp, double)?,
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "min" => out.min = optional(v, &kp, double)?,
            "max" => out.max = optional(v, &kp, double)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn exponential_point(v: &J, p: &Path<'_>) -> Result<ExponentialHistogramDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "scale",
        "zeroCount",
        "positive",
        "negative",
        "flags",
        "exemplars",
        "min",
        "max",
        "zeroThreshold",
    ];
    let mut out = ExponentialHistogramDataPoint::default();
    for (k, v) in object(v, p, "an ExponentialHistogramDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = optional(v, &kp, double)?,
            "scale" => out.scale = int32(v, &kp)?,
            "zeroCount" => out.zero_count = uint64(v, &kp)?,
            "positive" => out.positive = optional(v, &kp, buckets)?,
            "negative" => out.negative = optional(v, &kp, buckets)?,
            "flags" => out.flags = uint32(v, &kp)?,
            "exemplars" => out.exemplars = list(v, &kp, exemplar)?,
            "min" => out.min = optional(v, &kp, double)?,
            "max" => out.max = optional(v, &kp, double)?,
            "zeroThreshold" => out.zero_threshold = double(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn buckets(v: &J, p: &Path<'_>) -> Result<exponential_histogram_data_point::Buckets> {
    let mut out = exponential_histogram_data_point::Buckets::default();
    for (k, v) in object(v, p, "a Buckets")? {
        let kp = p.key(k);
        match k.as_str() {
            "offset" => out.offset = int32(v, &kp)?,
            "bucketCounts" => out.bucket_counts = list(v, &kp, uint64)?,
            _ => return Err(unknown(p, k, &["offset", "bucketCounts"])),
        }
    }
    Ok(out)
}

fn summary_point(v: &J, p: &Path<'_>) -> Result<SummaryDataPoint> {
    const KEYS: &[&str] = &[
        "attributes",
        "startTimeUnixNano",
        "timeUnixNano",
        "count",
        "sum",
        "quantileValues",
        "flags",
    ];
    let mut out = SummaryDataPoint::default();
    for (k, v) in object(v, p, "a SummaryDataPoint")? {
        let kp = p.key(k);
        match k.as_str() {
            "attributes" => out.attributes = list(v, &kp, key_value)?,
            "startTimeUnixNano" => out.start_time_unix_nano = uint64(v, &kp)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "count" => out.count = uint64(v, &kp)?,
            "sum" => out.sum = double(v, &kp)?,
            "quantileValues" => out.quantile_values = list(v, &kp, quantile)?,
            "flags" => out.flags = uint32(v, &kp)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

fn quantile(v: &J, p: &Path<'_>) -> Result<summary_data_point::ValueAtQuantile> {
    let mut out = summary_data_point::ValueAtQuantile::default();
    for (k, v) in object(v, p, "a ValueAtQuantile")? {
        let kp = p.key(k);
        match k.as_str() {
            "quantile" => out.quantile = double(v, &kp)?,
            "value" => out.value = double(v, &kp)?,
            _ => return Err(unknown(p, k, &["quantile", "value"])),
        }
    }
    Ok(out)
}

fn exemplar(v: &J, p: &Path<'_>) -> Result<Exemplar> {
    const KEYS: &[&str] = &[
        "filteredAttributes",
        "timeUnixNano",
        "asDouble",
        "asInt",
        "spanId",
        "traceId",
    ];
    let mut out = Exemplar::default();
    let mut one = OneOf::new();
    for (k, v) in object(v, p, "an Exemplar")? {
        let kp = p.key(k);
        match k.as_str() {
            "filteredAttributes" => out.filtered_attributes = list(v, &kp, key_value)?,
            "timeUnixNano" => out.time_unix_nano = uint64(v, &kp)?,
            "asDouble" => {
                if one.take(p, k, v)? {
                    out.value = Some(exemplar::Value::AsDouble(double(v, &kp)?));
                }
            }
            "asInt" => {
                if one.take(p, k, v)? {
                    out.value = Some(exemplar::Value::AsInt(int64(v, &kp)?));
                }
            }
            "spanId" => out.span_id = id(v, &kp, 8)?,
            "traceId" => out.trace_id = id(v, &kp, 16)?,
            _ => return Err(unknown(p, k, KEYS)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Counting on the tree

/// Records in the tree, counted by its shape alone (not by the decoder
/// above): the elements of `resource.scope.records` arrays for logs and
/// traces, of every metric kind's `dataPoints` for metrics. Decoding must
/// arrive at the same number, or the request is refused.
pub(crate) fn count_records(tree: &J, signal: crate::event::Signal) -> u64 {
    use crate::event::Signal;
    let (resources, scopes, records) = match signal {
        Signal::Logs => ("resourceLogs", "scopeLogs", "logRecords"),
        Signal::Traces => ("resourceSpans", "scopeSpans", "spans"),
        Signal::Metrics => ("resourceMetrics", "scopeMetrics", "metrics"),
    };
    let mut n = 0u64;
    for r in tree.items(resources) {
        for s in r.items(scopes) {
            for rec in s.items(records) {
                n += match signal {
                    Signal::Metrics => METRIC_KINDS
                        .iter()
                        .filter_map(|k| rec.get(k))
                        .map(|data| data.items("dataPoints").len() as u64)
                        .sum(),
                    _ => 1,
                };
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs_of(s: &str) -> Result<ExportLogsServiceRequest> {
        logs(&J::parse(s.as_bytes())?)
    }

    fn record(fields: &str) -> String {
        format!(r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{{fields}}}]}}]}}]}}"#)
    }

    #[test]
    fn decodes_every_scalar_form() {
        let r = logs_of(&record(
            r#""timeUnixNano":"1700000000000000001","observedTimeUnixNano":1700000000,
               "severityNumber":"SEVERITY_NUMBER_WARN","flags":1,"traceId":"5B8EFFF798038103D269B633813FC60C",
               "spanId":"eee19b7ec3c1b174","eventName":"e",
               "body":{"kvlistValue":{"values":[
                   {"key":"s","value":{"stringValue":"x"}},
                   {"key":"b","value":{"boolValue":true}},
                   {"key":"i","value":{"intValue":"-9223372036854775808"}},
                   {"key":"d","value":{"doubleValue":"NaN"}},
                   {"key":"y","value":{"bytesValue":"aGk="}},
                   {"key":"a","value":{"arrayValue":{"values":[{"intValue":3},{}]}}},
                   {"key":"n","value":null}]}}"#,
        ))
        .unwrap();
        let rec = &r.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(rec.time_unix_nano, 1_700_000_000_000_000_001);
        assert_eq!(rec.observed_time_unix_nano, 1_700_000_000);
        assert_eq!(rec.severity_number, 13);
        assert_eq!(rec.trace_id[0], 0x5b);
        assert_eq!(rec.span_id.len(), 8);
        let Some(any_value::Value::KvlistValue(kv)) = &rec.body.as_ref().unwrap().value else {
            panic!("body is not a kvlist")
        };
        assert_eq!(kv.values.len(), 7);
        assert_eq!(
            kv.values[2].value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(i64::MIN))
        );
        assert_eq!(
            kv.values[4].value.as_ref().unwrap().value,
            Some(any_value::Value::BytesValue(b"hi".to_vec()))
        );
        assert!(kv.values[6].value.is_none());
    }

    fn problem(s: &str) -> JsonError {
        logs_of(s).expect_err(s)
    }

    #[test]
    fn refuses_what_it_cannot_store() {
        let e = problem(r#"{"resourceLogs":[{"scopeLogs":[{"log_records":[{}]}]}]}"#);
        assert_eq!(e.path, "resourceLogs[0].scopeLogs[0]");
        assert!(e.problem.contains("write \"logRecords\""), "{e}");

        let e = problem(r#"{"resourceLogs":[{"scopeLogs":[{"logRecord":[{}]}]}]}"#);
        assert!(e.problem.contains("did you mean \"logRecords\""), "{e}");

        let e = problem(&record(r#""body":{"strValue":"x"}"#));
        assert!(e.problem.contains("unknown key \"strValue\""), "{e}");

        let e = problem(&record(r#""body":{"stringValue":"x","intValue":"1"}"#));
        assert!(e.problem.contains("alternatives"), "{e}");

        let e = problem(&record(r#""timeUnixNano":"1","timeUnixNano":"2""#));
        assert!(e.problem.contains("appears twice"), "{e}");

        // An integer literal is read exactly; a float beyond 2^53 may have
        // been rounded on the way.
        assert!(logs_of(&record(r#""timeUnixNano":1700000000000000001"#)).is_ok());
        let e = problem(&record(r#""timeUnixNano":1.7e18"#));
        assert!(e.problem.contains("decimal strings"), "{e}");
        let e = problem(&record(r#""timeUnixNano":18446744073709551616"#));
        assert!(e.problem.contains("decimal strings"), "{e}");

        let e = problem(&record(r#""timeUnixNano":-1"#));
        assert!(e.problem.contains("out of range"), "{e}");

        let e = problem(&record(r#""traceId":"W47/95gDgQPSabYzgT/GDA==""#));
        assert!(e.problem.contains("not base64"), "{e}");

        let e = problem(&record(r#""spanId":"zzzzzzzzzzzzzzzz""#));
        assert!(e.problem.contains("hex digits"), "{e}");

        let e = problem(&record(r#""severityText":5"#));
        assert_eq!(
            e.path,
            "resourceLogs[0].scopeLogs[0].logRecords[0].severityText"
        );

        let e = problem(r#"{"resourceLogs":[null]}"#);
        assert!(e.problem.contains("null"), "{e}");

        let e = problem(r#"{"resourceLogs":[{}]} x"#);
        assert!(e.problem.contains("not valid JSON"), "{e}");
    }

    #[test]
    fn counts_on_the_tree_independently() {
        let t = J::parse(
            br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
                {"gauge":{"dataPoints":[{},{}]}},{"sum":{"dataPoints":[{}]}},
                {"summary":{}}]}]}]}"#,
        )
        .unwrap();
        assert_eq!(count_records(&t, crate::event::Signal::Metrics), 3);
    }

    #[test]
    fn many_keys_are_checked_for_duplicates_too() {
        let keys: Vec<String> = (0..20).map(|i| format!("\"k{i}\":1")).collect();
        let doc = format!("{{{},\"k7\":2}}", keys.join(","));
        assert!(J::parse(doc.as_bytes()).is_err());
        let doc = format!("{{{}}}", keys.join(","));
        assert!(J::parse(doc.as_bytes()).is_ok());
    }
}
