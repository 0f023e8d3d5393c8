#!/usr/bin/env bash
# Run the packaged unit under a real systemd: boot a throwaway container, install
# the .deb there, and check the unit's contract with the daemon.
#
# Usage: packaging/systemd-smoke.sh [--dropin FILE] DEB
#
#   DEB           the package built by packaging/build-deb.sh
#   --dropin FILE install FILE as /etc/systemd/system/holdfast.service.d/
#                 smoke.conf before installing the package: try a sandbox
#                 change, add Environment=RUST_LOG=debug, or point ExecStart=
#                 at another build
#
# What it checks, in a container booted with systemd as PID 1:
#   * dpkg -i starts the service and it reaches "active": READY=1 arrived
#     (Type=notify) inside the sandbox, as user holdfast, with a STATUS= text;
#   * systemctl stop ends in Result=success well inside TimeoutStopSec=
#     (SIGTERM drain);
#   * after kill -9 the service is restarted (Restart=on-failure) and becomes
#     ready again;
#   * no watchdog timeout in the journal; dpkg -P removes unit and state.
#
# The container's root is an overlay on this machine's own / with a tmpfs on
# top, so nothing it does reaches the host and no image is downloaded; the
# host's OS must therefore have systemd installed. Needs root, overlayfs and
# systemd-nspawn (apt-get install systemd-container). Works whether or not
# systemd is PID 1 on the host. Ends with
# "systemd-smoke.sh: N passed, M failed"; exit status 1 if anything failed.
set -euo pipefail

dropin=""
deb=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dropin) dropin=${2:?--dropin needs a file}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) echo "systemd-smoke.sh: unknown option '$1'" >&2; exit 2 ;;
        *) deb=$1; shift ;;
    esac
done
if [ -z "$deb" ] || [ ! -f "$deb" ]; then
    echo "usage: packaging/systemd-smoke.sh [--dropin FILE] DEB" >&2
    exit 2
fi
[ -z "$dropin" ] || [ -f "$dropin" ] || { echo "systemd-smoke.sh: '$dropin' not found" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "systemd-smoke.sh: needs root" >&2; exit 2; }
command -v systemd-nspawn >/dev/null || { echo "systemd-smoke.sh: apt-get install systemd-container" >&2; exit 2; }
[ -x /lib/systemd/systemd ] || { echo "systemd-smoke.sh: this machine's OS has no systemd to boot" >&2; exit 2; }

passed=0
failed=0
ok() { echo "ok    $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

work=$(mktemp -d /tmp/holdfast-smoke.XXXXXX)
merged=$work/merged
nspawn_pid=""
teardown() {
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        # SIGTERM asks nspawn to power the container off cleanly.
        kill "$nspawn_pid" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 1; done
        kill -9 "$nspawn_pid" 2>/dev/null || true
    fi
    umount "$merged" 2>/dev/null || true
    umount "$work" 2>/dev/null || true
    rmdir "$work" 2>/dev/null || true
}
trap teardown EXIT

# --- a container on an overlay of / ----------------------------------------------
mount -t tmpfs -o size=2g,mode=0700 holdfast-smoke "$work"
mkdir -p "$work/upper" "$work/work" "$merged"
mount -t overlay holdfast-smoke -o "lowerdir=/,upperdir=$work/upper,workdir=$work/work" "$merged"
# Start from a clean slate even if this machine has holdfast installed.
rm -rf "$merged/var/lib/holdfast" "$merged/etc/systemd/system/holdfast.service.d"
cp "$deb" "$merged/root/holdfast.deb"
# Docker-style images forbid service starts during package installs; the
# point here is to see them happen.
rm -f "$merged/usr/sbin/policy-rc.d"
if [ -n "$dropin" ]; then
    install -D -m 0644 "$dropin" "$merged/etc/systemd/system/holdfast.service.d/smoke.conf"
fi

# --register=no and --keep-unit: no machined or host systemd needed.
systemd-nspawn -D "$merged" --boot --private-network --register=no --keep-unit \
    -M holdfast-smoke --console=passive >"$work/upper/nspawn.log" 2>&1 &
nspawn_pid=$!
pid1=""
for _ in $(seq 1 30); do
    # nspawn forks helpers first; the container's PID 1 is its child "systemd".
    pid1=$(pgrep -x -P "$nspawn_pid" systemd | head -n1 || true)
    [ -n "$pid1" ] && break
    sleep 1
done
[ -n "$pid1" ] || { cat "$work/upper/nspawn.log" >&2; echo "systemd-smoke.sh: container did not start" >&2; exit 1; }
in_ct() { nsenter -t "$pid1" -a "$@"; }
prop() { in_ct systemctl show holdfast.service -p "$1" --value || true; }
# systemctl inside needs the container's /run/systemd/system first.
for _ in $(seq 1 30); do
    in_ct test -d /run/systemd/system 2>/dev/null && break
    sleep 1
done
state=$(timeout 90 nsenter -t "$pid1" -a systemctl is-system-running --wait 2>/dev/null || true)
echo "== container booted: $state (host pid $pid1)"

journal() { in_ct journalctl -u holdfast.service --no-pager -o cat; }
wait_active() {
    for _ in $(seq 1 "$1"); do
        [ "$(prop ActiveState)" = active ] && return 0
        sleep 1
    done
    return 1
}

# --- install: postinst starts the service -----------------------------------------
check "dpkg -i succeeds" in_ct dpkg -i /root/holdfast.deb
if wait_active 30; then
    ok "service active after install: READY=1 received"
else
    fail "service active after install (state $(prop ActiveState)/$(prop SubState), result $(prop Result))"
fi
main_pid=$(prop MainPID)
check "daemon runs as user holdfast" test "$(in_ct ps -o user= -p "$main_pid" 2>/dev/null | tr -d ' ')" = holdfast
status_text=$(prop StatusText)
check "daemon reports a STATUS= text ('$status_text')" test -n "$status_text"
check "state dir /var/lib/holdfast exists, holdfast 0750" \
    test "$(in_ct stat -c '%U %a' /var/lib/holdfast 2>/dev/null)" = "holdfast 750"

# --- stop: a drain inside TimeoutStopSec --------------------------------------
stop_limit=$(prop TimeoutStopUSec)
start=$(date +%s)
in_ct systemctl stop holdfast.service || true
took=$(($(date +%s) - start))
check "systemctl stop took ${took}s (limit $stop_limit)" test "$took" -lt 30
check "stop ended in Result=success" test "$(prop Result)" = success

# --- kill -9: Restart=on-failure brings it back --------------------------------
in_ct systemctl start holdfast.service || true
if wait_active 30; then
    in_ct kill -9 "$(prop MainPID)"
    sleep 1
    if wait_active 40 && [ "$(prop NRestarts)" -ge 1 ]; then
        ok "restarted and ready again after kill -9 (NRestarts=$(prop NRestarts))"
    else
        fail "restart after kill -9 (state $(prop ActiveState)/$(prop SubState), NRestarts=$(prop NRestarts))"
    fi
else
    fail "service active after a second start"
fi
check "no watchdog timeout in the journal" test -z "$(journal | grep -i 'watchdog timeout' || true)"

# --- purge -----------------------------------------------------------------------
check "dpkg -P succeeds (stops the service)" in_ct dpkg -P holdfast
check "service inactive after purge" test "$(prop ActiveState)" = inactive
check "purge removed /var/lib/holdfast" test ! -e "$merged/var/lib/holdfast"

if [ "$failed" -gt 0 ]; then
    echo "== journal of holdfast.service (last 40 lines)"
    journal | tail -n 40 | sed 's/^/      /'
fi
echo "systemd-smoke.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
