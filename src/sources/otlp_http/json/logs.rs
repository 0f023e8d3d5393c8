/*! Logs: `ExportLogsServiceRequest` down to `LogRecord`. */

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};

use super::common::{any_value, key_value, resource, scope};
use super::scalar::{enumeration, id, string, uint32, uint64};
use super::table::{list, object, optional, top_list, unknown, OneOf, Path, UnknownKeys};
use super::tree::J;
use super::Result;

signal! {
    pub(crate) fn logs -> ExportLogsServiceRequest {
        "resourceLogs" => resource_logs: ResourceLogs,
        "scopeLogs" => scope_logs: ScopeLogs,
        "logRecords" => log_records: log_record,
    }
}

messages! {
    fn log_record("a LogRecord") -> LogRecord {
        "timeUnixNano" => time_unix_nano = uint64,
        "observedTimeUnixNano" => observed_time_unix_nano = uint64,
        "severityNumber" => severity_number = enumeration(SeverityNumber::from_str_name),
        "severityText" => severity_text = string,
        "body" => body = optional(any_value),
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
        "flags" => flags = uint32,
        "traceId" => trace_id = id(16),
        "spanId" => span_id = id(8),
        "eventName" => event_name = string,
    }
}
