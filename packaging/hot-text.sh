#!/usr/bin/env bash
# Regenerates packaging/hot-text.order: the functions holdfast runs once it
# is up, which build.rs has the linker lay out together (see build.rs).
#
# It profiles the release binary with perf (cpu-clock at 20 kHz, with DWARF
# call stacks; a function the steady state calls but the samples miss costs
# a 64 KiB fault-around of its own, so the denser the better) through the e2e benchmark's steady, file and otlp phases and
# lists every holdfast function on a sampled stack, steady phase first. The names carry their hashes, which
# change with the compiler and with the code: names the linker no longer
# finds are passed over, so a stale list only loses its effect. Re-run it
# after a toolchain upgrade or a large change of the data path (the
# steady-state RSS figure of `HOLDFAST_E2E_ONLY=steady cargo bench --bench e2e`
# tells).
#
# Needs perf (Debian: linux-perf) and a quiet machine. Usage, from the
# repository: packaging/hot-text.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The bench's own executable: the holdfast binary it runs is listed too,
# in no fixed order.
bench=$(cargo bench --bench e2e --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["bench"\]' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bench" ] || { echo "could not build the e2e benchmark" >&2; exit 1; }

for phase in steady file otlp; do
    HOLDFAST_E2E_GIB=0.2 HOLDFAST_E2E_STEADY_SECS=40 HOLDFAST_E2E_SHAPE=app HOLDFAST_E2E_ONLY=$phase \
        "$bench" --bench >"$work/$phase.log" 2>&1 &
    run=$!
    pid=
    for _ in $(seq 1 3000); do
        pid=$(pgrep -f "$PWD/target/release/holdfast run" | head -n 1 || true)
        [ -n "$pid" ] && break
        sleep 0.01
    done
    [ -n "$pid" ] || { echo "phase $phase: holdfast did not start" >&2; exit 1; }
    perf record -q -e cpu-clock -F 20000 --call-graph dwarf,8192 -p "$pid" \
        -o "$work/$phase.data" 2>/dev/null &
    rec=$!
    wait "$run"
    kill -INT "$rec" 2>/dev/null || true
    wait "$rec" || true
    # Every holdfast function on a sampled stack, not only where the sample
    # landed: the callers run too. The most sampled first.
    perf script -i "$work/$phase.data" -F ip,sym,dso --no-demangle 2>/dev/null |
        awk '/release\/holdfast\)/ {print $2}' | sort | uniq -c | sort -rn |
        awk '{print $2}' >>"$work/symbols"
done

grep -v -e '^0x' -e '^$' "$work/symbols" | awk '!seen[$0]++' >packaging/hot-text.order
echo "packaging/hot-text.order: $(wc -l <packaging/hot-text.order) functions"
