#!/usr/bin/env bash
# Regenerates packaging/hot-text.order: the functions holdfast runs once it
# is up, which build.rs has the linker lay out together (see build.rs).
#
# The kernel maps a program's text in 64 KiB windows around each page it
# runs, so one function of the steady state left outside the packed region
# costs a window of its own: the list must hold every function the steady
# state runs, not only those a sampler happened to hit. So:
#
# 1. the e2e benchmark's steady phase (issue 32's line shape) runs the
#    agent under valgrind's callgrind, which records every function
#    executed: those of the steady state (from 15 s on) come first, the
#    most executed first, then those only start-up and the first seconds
#    ran. Start-up's pages are given back once every component runs
#    (src/daemon/startup_pages.rs), but components still finish starting
#    and the first events take paths never taken again: packed next to the
#    steady ones, they keep the peak small as well as the steady state;
# 2. then the functions perf samples (cpu-clock at 20 kHz, DWARF call
#    stacks) in the file and otlp phases at full speed, the most sampled
#    first: a busy agent runs them too.
#
# The names carry their hashes, which change with the compiler and with the
# code: names the linker no longer finds are passed over, so a stale list
# only loses its effect. Re-run it after a toolchain upgrade or a large
# change of the data path (the steady-state RSS figure of
# `HOLDFAST_E2E_ONLY=steady cargo bench --bench e2e` tells).
#
# Needs valgrind and perf (Debian: valgrind, linux-perf) and a quiet
# machine; about five minutes. Usage, from the repository:
# packaging/hot-text.sh
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

bin="$PWD/target/release/holdfast"

# 1. Every function, in two parts: start-up and the first 15 s (which
# take a few seconds under callgrind), then the next 40 s, dumped before
# the bench stops the agent so that shutdown is not counted.
wrap="$work/holdfast-callgrind"
printf '#!/bin/sh\nexec valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no --callgrind-out-file=%s/callgrind.%%p %s "$@"\n' \
    "$work" "$bin" >"$wrap"
chmod +x "$wrap"
HOLDFAST_BENCH_BIN="$wrap" HOLDFAST_E2E_STEADY_SECS=60 HOLDFAST_E2E_SHAPE=app HOLDFAST_E2E_ONLY=steady \
    "$bench" --bench >"$work/steady.log" 2>&1 &
run=$!
pid=
for _ in $(seq 1 3000); do
    pid=$(pgrep -f "callgrind.*$bin run" | head -n 1 || true)
    [ -n "$pid" ] && break
    sleep 0.01
done
[ -n "$pid" ] || { echo "steady phase: holdfast did not start under callgrind" >&2; exit 1; }
sleep 15
callgrind_control -d "$pid" >/dev/null
sleep 40
callgrind_control -d "$pid" >/dev/null
callgrind_control -i off "$pid" >/dev/null
wait "$run" || { echo "steady phase failed under callgrind:" >&2; tail -n 20 "$work/steady.log" >&2; exit 1; }
# Each function of the binary with its own instruction count: a cost line
# belongs to the last fn=, except the one after calls=, a callee's; a
# recursion level's suffix ('2) is not part of the symbol.
functions() {
    [ -s "$1" ] || { echo "no callgrind dump $1" >&2; exit 1; }
    awk -v bin="$bin" '
        /^ob=/ { ob = substr($0, 4); next }
        /^fn=/ { cur = (ob == bin) ? substr($0, 4) : ""; sub(/\x27[0-9]+$/, "", cur); next }
        /^calls=/ { callee = 1; next }
        /^[0-9+-]/ { if (callee) { callee = 0; next } if (cur != "") ir[cur] += $2; next }
        END { for (f in ir) print ir[f], f }
    ' "$1" | sort -rn | awk '{print $2}'
}
functions "$work/callgrind.$pid.2" >"$work/symbols"
echo "steady state: $(wc -l <"$work/symbols") functions of the binary executed (callgrind)"
functions "$work/callgrind.$pid.1" >>"$work/symbols"

# 2. Full speed, sampled.
for phase in file otlp; do
    HOLDFAST_E2E_GIB=0.2 HOLDFAST_E2E_SHAPE=app HOLDFAST_E2E_ONLY=$phase \
        "$bench" --bench >"$work/$phase.log" 2>&1 &
    run=$!
    pid=
    for _ in $(seq 1 3000); do
        pid=$(pgrep -f "$bin run" | head -n 1 || true)
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
