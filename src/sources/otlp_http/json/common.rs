/*!
The messages every signal shares: attribute values (`AnyValue` and what
nests in it), the resource and the instrumentation scope.
*/

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::scalar::{base64_bytes, boolean, double, int32, int64, string, uint32};
use super::table::{list, object, optional, unknown, OneOf, Path};
use super::tree::J;
use super::Result;

messages! {
    /// Every member is one alternative of `value`.
    pub(super) fn any_value("an AnyValue") -> AnyValue {
        "stringValue" => value = oneof(Value::StringValue, string),
        "boolValue" => value = oneof(Value::BoolValue, boolean),
        "intValue" => value = oneof(Value::IntValue, int64),
        "doubleValue" => value = oneof(Value::DoubleValue, double),
        "arrayValue" => value = oneof(Value::ArrayValue, array_value),
        "kvlistValue" => value = oneof(Value::KvlistValue, kvlist_value),
        "bytesValue" => value = oneof(Value::BytesValue, base64_bytes),
        "stringValueStrindex" => value = oneof(Value::StringValueStrindex, int32),
    }

    pub(super) fn key_value("a KeyValue") -> KeyValue {
        "key" => key = string,
        "value" => value = optional(any_value),
        "keyStrindex" => key_strindex = int32,
    }

    fn array_value("an ArrayValue") -> ArrayValue {
        "values" => values = list(any_value),
    }

    fn kvlist_value("a KeyValueList") -> KeyValueList {
        "values" => values = list(key_value),
    }

    pub(super) fn scope("an InstrumentationScope") -> InstrumentationScope {
        "name" => name = string,
        "version" => version = string,
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
    }

    fn entity_ref("an EntityRef") -> EntityRef {
        "schemaUrl" => schema_url = string,
        "type" => r#type = string,
        "idKeys" => id_keys = list(string),
        "descriptionKeys" => description_keys = list(string),
    }

    pub(super) fn resource("a Resource") -> Resource {
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
        "entityRefs" => entity_refs = list(entity_ref),
    }
}
