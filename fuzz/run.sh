#!/bin/sh
# Runs one fuzz target for a while: seeds its corpus from the saved inputs
# in tests/fixtures/fuzz/<target>/, uses its dictionary, one process.
#
#   fuzz/run.sh TARGET [SECONDS] [extra libFuzzer flags...]
#
# Needs the nightly toolchain and cargo-fuzz (see docs/fuzzing.md).
set -eu
target=${1:?usage: fuzz/run.sh TARGET [SECONDS] [libFuzzer flags...]}
secs=${2:-600}
[ $# -ge 2 ] && shift 2 || shift 1
cd "$(dirname "$0")"
case $target in
seglog_scan | seglog_recover) dict=dicts/seglog.dict max_len=8192 ;;
seglog_block) dict=dicts/seglog.dict max_len=4096 ;;
otlp_decode) dict=dicts/otlp_decode.dict max_len=16384 ;;
config_parse) dict=dicts/config_parse.dict max_len=8192 ;;
syslog) dict=dicts/syslog.dict max_len=4096 ;;
process_parse) dict=dicts/process_parse.dict max_len=4096 ;;
journald_mapping) dict=dicts/journald_mapping.dict max_len=4096 ;;
file_lines) dict=dicts/file_lines.dict max_len=4096 ;;
quarantine_ndjson) dict=dicts/quarantine_ndjson.dict max_len=8192 ;;
prometheus_text) dict=dicts/prometheus_text.dict max_len=8192 ;;
*) echo "unknown target $target (try: cargo +nightly fuzz list)" >&2; exit 2 ;;
esac
mkdir -p "corpus/$target"
cp -n ../tests/fixtures/fuzz/"$target"/* "corpus/$target/"
exec cargo +nightly fuzz run "$target" "corpus/$target" -- \
    -dict="$dict" -max_len="$max_len" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$@"
