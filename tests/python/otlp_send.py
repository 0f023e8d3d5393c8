"""Sends logs, spans and metrics to holdfast's OTLP source with the real
OpenTelemetry Python SDK, then prints (as one JSON object on stdout) what it
sent, so that tests/otlp_http_sdk.rs and tests/otlp_grpc_sdk.rs can check
what landed field by field.

Usage: python otlp_send.py proto|json|grpc TAG

proto and json are the OTLP/HTTP exporters, grpc the OTLP/gRPC exporter.

The endpoint, compression and headers come from the standard variables
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_COMPRESSION,
OTEL_EXPORTER_OTLP_HEADERS), read by the exporters themselves. Exits 1 if
any export did not succeed.
"""

import json
import sys

from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace import set_span_in_context

encoding, tag = sys.argv[1], sys.argv[2]
if encoding == "proto":
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
elif encoding == "json":
    from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
elif encoding == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    sys.exit(f"unknown encoding {encoding!r}: use proto, json or grpc")

# Every export's result, to fail loudly instead of trusting the SDK's logs.
results = []


def checked(cls):
    class Checked(cls):
        def export(self, *args, **kwargs):
            r = super().export(*args, **kwargs)
            results.append((cls.__name__, r))
            return r

    return Checked


resource = Resource.create(
    {"service.name": "holdfast-test", "host.name": "dev1", "run.tag": tag}
)
T0 = 1_700_000_000_000_000_000
sent = {"logs": [], "spans": [], "metrics": {}}

# Traces: a server span with every attribute type, an event and a link, and
# a client child with an error status.
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(checked(OTLPSpanExporter)()))
tracer = tracer_provider.get_tracer("holdfast.test.tracer", "1.2.3")
link_ctx = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(1),
)
span_attrs = {
    "s": "text",
    "b": True,
    "i": -42,
    "f": 2.5,
    "ss": ["a", "b"],
    "ii": [1, 2, 3],
    "ff": [0.5, 1.5],
    "bb": [True, False],
}
parent = tracer.start_span(
    "GET /items",
    kind=SpanKind.SERVER,
    attributes=span_attrs,
    links=[Link(link_ctx, {"link.kind": "follows"})],
    start_time=T0,
)
parent.add_event("cache.miss", {"key": "item:7"}, timestamp=T0 + 1_000)
child = tracer.start_span(
    "SELECT items",
    context=set_span_in_context(parent),
    kind=SpanKind.CLIENT,
    start_time=T0 + 2_000,
)
child.set_status(Status(StatusCode.ERROR, "timeout"))
child.end(end_time=T0 + 3_000)
pctx, cctx = parent.get_span_context(), child.get_span_context()

# Logs: through the Logs API, with exact timestamps and bodies of several
# shapes, one inside the parent span's context.
logger_provider = LoggerProvider(resource=resource)
log_exporter = checked(OTLPLogExporter)()
logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
# What the exporter was configured with (a private attribute of the pinned
# versions), so the test can tell that gzip really was used. The gRPC
# exporter holds a grpc.Compression (or None for the default, none).
if encoding == "grpc":
    import grpc

    sent["compression"] = "gzip" if log_exporter._compression == grpc.Compression.Gzip else "none"
else:
    sent["compression"] = log_exporter._client._compression.value
logger = logger_provider.get_logger("holdfast.test.logger", "0.1")
logs = [
    dict(
        timestamp=T0 + 10,
        observed_timestamp=T0 + 11,
        severity_number=SeverityNumber.WARN,
        severity_text="WARN",
        body="disk /dev/sda1 almost full",
        attributes={"pct": 93.5, "mount": "/", "retries": 3, "alert": True},
        context=set_span_in_context(parent),
    ),
    dict(
        timestamp=T0 + 20,
        observed_timestamp=T0 + 21,
        severity_number=SeverityNumber.ERROR,
        severity_text="ERROR",
        body={"event": "login", "user": {"id": 7, "roles": ["a", "b"]}, "ok": False},
        attributes={"tags": ["x", "y"]},
        event_name="user.login",
    ),
    dict(
        timestamp=T0 + 30,
        observed_timestamp=T0 + 31,
        severity_number=SeverityNumber.INFO,
        body=b"\x00\x01binary\xff",
    ),
]
for rec in logs:
    logger.emit(**rec)
parent.end(end_time=T0 + 5_000)

for rec in logs:
    body = rec["body"]
    sent["logs"].append(
        {
            "time": rec["timestamp"],
            "observed": rec["observed_timestamp"],
            "severity_number": rec["severity_number"].value,
            "severity_text": rec.get("severity_text", ""),
            "body": body.hex() if isinstance(body, bytes) else body,
            "attributes": rec.get("attributes", {}),
            "event_name": rec.get("event_name", ""),
            "trace_id": f"{pctx.trace_id:032x}" if "context" in rec else "",
            "span_id": f"{pctx.span_id:016x}" if "context" in rec else "",
        }
    )
sent["spans"] = [
    {
        "name": "GET /items",
        "trace_id": f"{pctx.trace_id:032x}",
        "span_id": f"{pctx.span_id:016x}",
        "parent_span_id": "",
        "kind": 2,
        "start": T0,
        "end": T0 + 5_000,
        "attributes": span_attrs,
        "event": {"name": "cache.miss", "time": T0 + 1_000, "key": "item:7"},
        "link": {"trace_id": f"{link_ctx.trace_id:032x}", "span_id": f"{link_ctx.span_id:016x}"},
        "status_code": 0,
    },
    {
        "name": "SELECT items",
        "trace_id": f"{cctx.trace_id:032x}",
        "span_id": f"{cctx.span_id:016x}",
        "parent_span_id": f"{pctx.span_id:016x}",
        "kind": 3,
        "start": T0 + 2_000,
        "end": T0 + 3_000,
        "status_code": 2,
        "status_message": "timeout",
    },
]

# Metrics: a counter, an up-down counter, a histogram, an exponential
# histogram and an observable gauge; one collection.
reader = PeriodicExportingMetricReader(
    checked(OTLPMetricExporter)(), export_interval_millis=3_600_000
)
meter_provider = MeterProvider(
    resource=resource,
    metric_readers=[reader],
    views=[View(instrument_name="payload.size", aggregation=ExponentialBucketHistogramAggregation())],
)
meter = meter_provider.get_meter("holdfast.test.meter", "2.0")
requests = meter.create_counter("requests", unit="1", description="requests served")
requests.add(5, {"route": "/x"})
requests.add(2, {"route": "/y"})
meter.create_up_down_counter("queue.depth").add(-3)
latency = meter.create_histogram("latency", unit="ms")
for v in (1.0, 12.5, 300.0):
    latency.record(v)
size = meter.create_histogram("payload.size", unit="By")
for v in (10, 100, 1000):
    size.record(v)
meter.create_observable_gauge("temperature", callbacks=[lambda _: [__import__(
    "opentelemetry.metrics", fromlist=["Observation"]).Observation(21.5, {"room": "lab"})]])
sent["metrics"] = {
    "requests": {"/x": 5, "/y": 2},
    "queue.depth": -3,
    "latency": {"count": 3, "sum": 313.5, "min": 1.0, "max": 300.0},
    "payload.size": {"count": 3, "sum": 1110},
    "temperature": 21.5,
}

# Shutting the reader down collects and exports once.
meter_provider.shutdown()
tracer_provider.shutdown()
logger_provider.shutdown()

failed = [(name, str(r)) for name, r in results if getattr(r, "name", str(r)) != "SUCCESS"]
if failed or not results:
    sys.exit(f"exports failed: {failed or 'none ran'}")
sent["exports"] = len(results)
print(json.dumps(sent))
