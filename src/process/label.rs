//! Labels: constant attributes a source adds to every event (`site`,
//! `device.id`), on the resource or on the record. They are the same for
//! every event of a source, so in format 2 they live in the batch's context
//! group, once per append: a chain that only labels costs nothing per event.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

/// Constant resource and record attributes, in the order written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    pub resource: Vec<(String, String)>,
    pub attributes: Vec<(String, String)>,
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

/// Sets each of `labels` in `list`: a key already there gets the label's
/// value in its place, a new key goes at the end.
fn overlay(list: &mut Vec<KeyValue>, labels: &[(String, String)]) {
    for (k, v) in labels {
        match list.iter_mut().find(|x| &x.key == k) {
            Some(x) => *x = kv(k, v),
            None => list.push(kv(k, v)),
        }
    }
}

impl Labels {
    pub fn is_empty(&self) -> bool {
        self.resource.is_empty() && self.attributes.is_empty()
    }

    pub fn has_attribute(&self, key: &str) -> bool {
        self.attributes.iter().any(|(k, _)| k == key)
    }

    /// Adds or overrides the resource labels in a resource's attributes
    /// (`host.name` may be overridden).
    pub fn apply_resource(&self, attrs: &mut Vec<KeyValue>) {
        overlay(attrs, &self.resource);
    }

    /// Adds or overrides the record labels in attributes every event of a
    /// group shares (`log.file.path` may be overridden).
    pub fn apply_attributes(&self, attrs: &mut Vec<KeyValue>) {
        overlay(attrs, &self.attributes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_override_in_place_and_add_at_the_end() {
        let l = Labels {
            resource: vec![
                ("host.name".into(), "gw-7".into()),
                ("site".into(), "berlin".into()),
            ],
            attributes: vec![],
        };
        let mut attrs = vec![kv("host.name", "box"), kv("os", "linux")];
        l.apply_resource(&mut attrs);
        let keys: Vec<_> = attrs.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["host.name", "os", "site"]);
        assert_eq!(attrs[0], kv("host.name", "gw-7"));
    }
}
