#!/usr/bin/env bash
# Creates the two Python virtual environments the OTLP source tests use as
# real OpenTelemetry SDK clients, with every package pinned:
#
#   target/venv-otlp-proto  opentelemetry-sdk + opentelemetry-exporter-otlp-proto-http
#                           + opentelemetry-exporter-otlp-proto-grpc (and grpcio)
#                           + paho-mqtt (tests/python/mqtt_publish.py, the MQTT devices)
#   target/venv-otlp-json   opentelemetry-sdk + opentelemetry-exporter-otlp-json-http
#
# The gRPC exporter agrees with the HTTP protobuf exporter on every shared
# package, so it shares its venv (tests/otlp_grpc_sdk.rs). The JSON exporter
# pins other versions of the shared helper packages, hence
# two venvs. The tests find them there, or through HOLDFAST_PYTHON_PROTO and
# HOLDFAST_PYTHON_JSON (paths to each venv's python). Needs python3 with the
# venv module (Debian: python3-venv) and access to PyPI. Re-running it is
# cheap: an existing venv whose packages match is left alone.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"

make_venv() {
    local dir="$1" requirements="$2"
    local stamp="$dir/.requirements"
    if [[ -x "$dir/bin/python" && -f "$stamp" ]] && cmp -s "$stamp" "$requirements"; then
        echo "$dir: up to date"
        return
    fi
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-deps --require-virtualenv -r "$requirements"
    "$dir/bin/python" -m pip check --disable-pip-version-check >/dev/null
    cp "$requirements" "$stamp"
    echo "$dir: created"
}

make_venv "$root/target/venv-otlp-proto" "$here/requirements-proto.txt"
make_venv "$root/target/venv-otlp-json" "$here/requirements-json.txt"
