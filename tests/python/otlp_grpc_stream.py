"""Streams numbered logs, spans and metric points to holdfast's OTLP/gRPC
listener with the real OpenTelemetry Python SDK, and says which exports the
receiver answered OK, so that tests/otlp_grpc_crash.rs can check that
nothing acknowledged was lost when holdfast was killed in the middle.

Usage: python otlp_grpc_stream.py TAG ROUNDS

Each round emits one log record, ends one span and records one counter
point (delta temporality, so that a collection carries only this round's
point), each carrying the attribute `test.id` = `TAG-<signal>-<round>`, and
exports each at once (simple processors, a forced metric collection). One
line on stdout per record of every export, flushed at once:

    OK <test.id>      the export that carried it was answered OK
    FAIL <test.id>    the exporter gave up on it (its retries ran out)

and a last line `DONE <ok> <failed>`. The endpoint, timeout and compression
come from the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, ...), read by
the exporters themselves; the exporters retry UNAVAILABLE with backoff, so a
restart of holdfast within the timeout costs no export.
"""

import sys

from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

tag, rounds = sys.argv[1], int(sys.argv[2])
counts = {"ok": 0, "failed": 0}


def say(word, ids):
    for i in ids:
        print(f"{word} {i}")
    sys.stdout.flush()


def ids_of_logs(batch):
    return [b.log_record.attributes["test.id"] for b in batch]


def ids_of_spans(batch):
    return [s.attributes["test.id"] for s in batch]


def ids_of_metrics(data):
    return [
        dict(p.attributes)["test.id"]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    ]


def reporting(cls, ids_of):
    """The exporter, saying for each export which records it carried and
    whether the receiver said OK."""

    class Reporting(cls):
        def export(self, batch, *args, **kwargs):
            r = super().export(batch, *args, **kwargs)
            ids = ids_of(batch)
            ok = getattr(r, "name", str(r)) == "SUCCESS"
            counts["ok" if ok else "failed"] += len(ids)
            say("OK" if ok else "FAIL", ids)
            return r

    return Reporting


resource = Resource.create({"service.name": "holdfast-crash", "run.tag": tag})

tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(reporting(OTLPSpanExporter, ids_of_spans)()))
tracer = tracer_provider.get_tracer("holdfast.test.stream")

logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(
    SimpleLogRecordProcessor(reporting(OTLPLogExporter, ids_of_logs)())
)
logger = logger_provider.get_logger("holdfast.test.stream")

metric_exporter = reporting(OTLPMetricExporter, ids_of_metrics)(
    preferred_temporality={Counter: AggregationTemporality.DELTA}
)
# Collected only when asked (force_flush), once per round.
reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)
meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
rounds_counter = meter_provider.get_meter("holdfast.test.stream").create_counter("rounds")

for n in range(rounds):
    logger.emit(body=f"log {n} of {tag}", attributes={"test.id": f"{tag}-log-{n}"})
    with tracer.start_as_current_span(f"span {n}", attributes={"test.id": f"{tag}-span-{n}"}):
        pass
    rounds_counter.add(1, {"test.id": f"{tag}-metric-{n}"})
    reader.force_flush()

meter_provider.shutdown()
tracer_provider.shutdown()
logger_provider.shutdown()
print(f"DONE {counts['ok']} {counts['failed']}")
sys.stdout.flush()
