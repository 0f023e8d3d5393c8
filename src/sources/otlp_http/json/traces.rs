/*! Traces: `ExportTraceServiceRequest` down to `Span` and its events, links and status. */

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};

use super::common::{key_value, resource, scope};
use super::scalar::{enumeration, id, string, uint32, uint64};
use super::table::{list, object, optional, top_list, unknown, OneOf, Path, UnknownKeys};
use super::tree::J;
use super::Result;

signal! {
    pub(crate) fn traces -> ExportTraceServiceRequest {
        "resourceSpans" => resource_spans: ResourceSpans,
        "scopeSpans" => scope_spans: ScopeSpans,
        "spans" => spans: span,
    }
}

messages! {
    fn span("a Span") -> Span {
        "traceId" => trace_id = id(16),
        "spanId" => span_id = id(8),
        "traceState" => trace_state = string,
        "parentSpanId" => parent_span_id = id(8),
        "flags" => flags = uint32,
        "name" => name = string,
        "kind" => kind = enumeration(span::SpanKind::from_str_name),
        "startTimeUnixNano" => start_time_unix_nano = uint64,
        "endTimeUnixNano" => end_time_unix_nano = uint64,
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
        "events" => events = list(span_event),
        "droppedEventsCount" => dropped_events_count = uint32,
        "links" => links = list(span_link),
        "droppedLinksCount" => dropped_links_count = uint32,
        "status" => status = optional(span_status),
    }

    fn span_event("a Span.Event") -> span::Event {
        "timeUnixNano" => time_unix_nano = uint64,
        "name" => name = string,
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
    }

    fn span_link("a Span.Link") -> span::Link {
        "traceId" => trace_id = id(16),
        "spanId" => span_id = id(8),
        "traceState" => trace_state = string,
        "attributes" => attributes = list(key_value),
        "droppedAttributesCount" => dropped_attributes_count = uint32,
        "flags" => flags = uint32,
    }

    fn span_status("a Status") -> Status {
        "message" => message = string,
        "code" => code = enumeration(status::StatusCode::from_str_name),
    }
}
