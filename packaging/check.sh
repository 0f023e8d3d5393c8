#!/usr/bin/env bash
# Check a holdfast .deb: what it contains, its maintainer scripts, its unit,
# and (with --install) a real install / reinstall / remove / purge.
#
# Usage: packaging/check.sh [--install] DEB
#
#   DEB        the package built by packaging/build-deb.sh
#   --install  also dpkg -i / -r / -P the package on this machine and check
#              the user, files, modes and cleanup. Needs root and a machine
#              you may change (CI, a throwaway container): it creates the
#              holdfast user (removed again if this run created it) and, if
#              systemd is running, starts the service.
#
# Needs dpkg-deb and systemd-analyze (apt-get install systemd). Runs lintian
# and shellcheck when installed and reports them as skipped otherwise.
# lintian errors fail the check; its warnings and infos are printed.
#
# systemd-analyze verify refuses a unit whose ExecStart= binary is missing,
# so the unit is verified as installed from the extracted package: the
# ExecStart= path must exist in the package, and a copy of the unit with that
# path pointed into the extraction directory is what gets verified.
#
# Ends with "check.sh: N passed, M failed[, K skipped]"; exit status 1 if
# anything failed.
set -euo pipefail

# The daemon's default drain deadline (SIGTERM to exit). The unit's
# TimeoutStopSec= must leave room above it.
DAEMON_DRAIN_SECS=20
# systemd-analyze security's --threshold is the exposure level times ten;
# the unit scores 1.5 today.
MAX_EXPOSURE=20

install_test=0
deb=""
while [ $# -gt 0 ]; do
    case "$1" in
        --install) install_test=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        -*) echo "check.sh: unknown option '$1'" >&2; exit 2 ;;
        *) [ -z "$deb" ] || { echo "check.sh: one DEB only" >&2; exit 2; }; deb=$1; shift ;;
    esac
done
[ -n "$deb" ] || { echo "usage: packaging/check.sh [--install] DEB" >&2; exit 2; }
[ -f "$deb" ] || { echo "check.sh: '$deb' not found" >&2; exit 2; }
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
for tool in dpkg-deb systemd-analyze; do
    command -v "$tool" >/dev/null || { echo "check.sh: '$tool' not found (apt-get install dpkg systemd)" >&2; exit 2; }
done

passed=0
failed=0
skipped=0
ok() { echo "ok    $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }
skip() { echo "skip  $*"; skipped=$((skipped + 1)); }
# check DESCRIPTION COMMAND...: passes when COMMAND succeeds.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

work=$(mktemp -d)
cleanup_install=0
cleanup() {
    if [ "$cleanup_install" = 1 ] && dpkg-query -W -f='${Status}' holdfast 2>/dev/null | grep -qv not-installed; then
        echo "check.sh: purging holdfast left installed by a failed check" >&2
        dpkg -P holdfast >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== $deb"

# --- control fields ------------------------------------------------------------
field() { dpkg-deb -f "$deb" "$1"; }
version=$(field Version)
check "Package is holdfast" test "$(field Package)" = holdfast
check "Version '$version' has a Debian revision" test "${version%-*}" != "$version"
check "Architecture is $(dpkg --print-architecture)" test "$(field Architecture)" = "$(dpkg --print-architecture)"
check "Maintainer is set" test -n "$(field Maintainer)"
check "Section admin, Priority optional" test "$(field Section)/$(field Priority)" = admin/optional
depends=$(field Depends)
check "Depends on libc6 ($depends)" grep -q 'libc6' <<<"$depends"
check "Depends on libsystemd0 (the journald source links it)" grep -q 'libsystemd0' <<<"$depends"
check "Depends on adduser (postinst creates the user)" grep -qw 'adduser' <<<"$depends"
check "Description has an extended part" test "$(field Description | wc -l)" -gt 2

# --- data archive ----------------------------------------------------------------
dpkg-deb -c "$deb" | awk '{ print $1, $2, $6 }' >"$work/contents"
has() { grep -qxF -- "$1 $2 ./$3" "$work/contents"; }
check "/usr/bin/holdfast root:root 0755" has -rwxr-xr-x root/root usr/bin/holdfast
check "/usr/lib/systemd/system/holdfast.service 0644" has -rw-r--r-- root/root usr/lib/systemd/system/holdfast.service
check "/etc/holdfast/holdfast.toml 0644 in the archive" has -rw-r--r-- root/root etc/holdfast/holdfast.toml
check "/usr/share/doc/holdfast/copyright" has -rw-r--r-- root/root usr/share/doc/holdfast/copyright
check "/usr/share/doc/holdfast/changelog.Debian.gz" has -rw-r--r-- root/root usr/share/doc/holdfast/changelog.Debian.gz
check "/usr/share/holdfast/grafana/holdfast-dashboard.json" has -rw-r--r-- root/root usr/share/holdfast/grafana/holdfast-dashboard.json
check "/usr/share/holdfast/prometheus/holdfast-alerts.yml" has -rw-r--r-- root/root usr/share/holdfast/prometheus/holdfast-alerts.yml
check "/usr/share/holdfast/prometheus/holdfast-alerts.test.yml" has -rw-r--r-- root/root usr/share/holdfast/prometheus/holdfast-alerts.test.yml
check "/usr/share/doc/holdfast/README.md" has -rw-r--r-- root/root usr/share/doc/holdfast/README.md
check "/usr/share/doc/holdfast/docs/metrics.md" has -rw-r--r-- root/root usr/share/doc/holdfast/docs/metrics.md
check "/usr/share/doc/holdfast/docs/dashboards.md" has -rw-r--r-- root/root usr/share/doc/holdfast/docs/dashboards.md
check "every file is owned by root:root" test -z "$(awk '$2 != "root/root"' "$work/contents")"
check "nothing under /var/lib/holdfast (postinst creates it)" test -z "$(grep ' ./var/lib/holdfast' "$work/contents" || true)"

# --- control archive -----------------------------------------------------------
dpkg-deb -e "$deb" "$work/DEBIAN"
check "conffiles lists /etc/holdfast/holdfast.toml" grep -qxF /etc/holdfast/holdfast.toml "$work/DEBIAN/conffiles"
while read -r conffile; do
    check "conffile $conffile is in the package" grep -q " \.$conffile\$" "$work/contents"
done <"$work/DEBIAN/conffiles"
for script in postinst prerm postrm; do
    path=$work/DEBIAN/$script
    check "$script is an executable file" test -f "$path" -a -x "$path"
    check "$script runs under /bin/sh with set -e" \
        grep -q '^set -e$' <(head -n1 "$path" | grep -xF '#!/bin/sh' && cat "$path")
    check "$script parses (sh -n)" sh -n "$path"
done
if command -v shellcheck >/dev/null; then
    check "maintainer scripts are shellcheck-clean" \
        shellcheck "$work/DEBIAN/postinst" "$work/DEBIAN/prerm" "$work/DEBIAN/postrm"
else
    skip "shellcheck not installed (apt-get install shellcheck)"
fi

# --- the binary and the unit, as installed ---------------------------------------
root=$work/root
dpkg-deb -x "$deb" "$root"
upstream=${version%-*}
upstream=${upstream/\~/-}
check "holdfast --version runs and says $upstream" grep -qF "$upstream" <("$root/usr/bin/holdfast" --version 2>&1)

# The installed README's links resolve: every docs/ page it names is there.
grep -o 'docs/[A-Za-z0-9_.-]*\.md' "$root/usr/share/doc/holdfast/README.md" | sort -u >"$work/readme-pages"
while read -r page; do
    check "README.md's $page is installed" test -f "$root/usr/share/doc/holdfast/$page"
done <"$work/readme-pages"
check "the dashboard is JSON with panels" grep -q '"panels"' "$root/usr/share/holdfast/grafana/holdfast-dashboard.json"
if command -v promtool >/dev/null; then
    check "promtool check rules on the installed alert rules" \
        promtool check rules "$root/usr/share/holdfast/prometheus/holdfast-alerts.yml"
    # The unit tests name the rules file relative to themselves.
    test_rules() { (cd "$root/usr/share/holdfast/prometheus" && promtool test rules holdfast-alerts.test.yml); }
    check "promtool test rules on the installed unit tests" test_rules
else
    skip "promtool not installed (apt-get install prometheus)"
fi

unit=$root/usr/lib/systemd/system/holdfast.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_path=${exec_start%% *}
check "ExecStart= binary $exec_path is shipped in the package" test -x "$root$exec_path"
check "unit: Type=notify" grep -qx 'Type=notify' "$unit"
check "unit: NotifyAccess=main" grep -qx 'NotifyAccess=main' "$unit"
check "unit: WatchdogSec= set" grep -q '^WatchdogSec=[1-9]' "$unit"
check "unit: User=holdfast" grep -qx 'User=holdfast' "$unit"
check "unit: StateDirectory=holdfast" grep -qx 'StateDirectory=holdfast' "$unit"
check "unit: reads /etc/holdfast/holdfast.toml" grep -qF -- '--config /etc/holdfast/holdfast.toml' <<<"$exec_start"
stop_timeout=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s\{0,1\}$/\1/p' "$unit")
check "unit: TimeoutStopSec=${stop_timeout:-?}s is above the ${DAEMON_DRAIN_SECS}s drain" \
    test "${stop_timeout:-0}" -gt "$DAEMON_DRAIN_SECS"

mkdir -p "$work/unit"
sed "s#^ExecStart=$exec_path #ExecStart=$root$exec_path #" "$unit" >"$work/unit/holdfast.service"
if (cd "$work/unit" && systemd-analyze verify --man=no holdfast.service) >"$work/verify.log" 2>&1 &&
    [ ! -s "$work/verify.log" ]; then
    ok "systemd-analyze verify: no complaints"
else
    sed 's/^/      /' "$work/verify.log"
    fail "systemd-analyze verify"
fi
if systemd-analyze security --offline=true --threshold="$MAX_EXPOSURE" "$work/unit/holdfast.service" \
    >"$work/security.log" 2>&1; then
    ok "systemd-analyze security: $(grep -o 'exposure level.*' "$work/security.log")"
else
    grep -E '^✗|exposure level' "$work/security.log" | sed 's/^/      /' || cat "$work/security.log"
    fail "systemd-analyze security: exposure above $((MAX_EXPOSURE / 10)).$((MAX_EXPOSURE % 10))"
fi

# --- lintian -----------------------------------------------------------------
if command -v lintian >/dev/null; then
    if lintian --fail-on error --display-info "$deb" >"$work/lintian.log" 2>&1; then
        ok "lintian: no errors"
    else
        fail "lintian: errors"
    fi
    grep -E '^[EWI]:' "$work/lintian.log" | sed 's/^/      /' || true
else
    skip "lintian not installed (apt-get install lintian)"
fi

# --- install / reinstall / remove / purge ---------------------------------------
# mode_of PATH: "owner:group octal-mode" of PATH.
mode_of() { stat -c '%U:%G %a' "$1"; }
status_of() { dpkg-query -W -f='${Status}' holdfast 2>/dev/null || echo not-installed; }
as_holdfast() { setpriv --reuid holdfast --regid holdfast --init-groups -- "$@"; }
in_group() { id -nG holdfast | tr ' ' '\n' | grep -qx "$1"; }

if [ "$install_test" = 1 ]; then
    echo "== dpkg install / reinstall / remove / purge"
    if [ "$(id -u)" != 0 ]; then
        fail "--install needs root"
    elif status_of | grep -qv not-installed; then
        fail "holdfast is already installed here ($(status_of)); purge it first"
    else
        user_existed=0
        getent passwd holdfast >/dev/null && user_existed=1
        cleanup_install=1
        if [ -d /run/systemd/system ]; then
            echo "      systemd is running: postinst will try to start the service"
        else
            echo "      systemd is not running here: postinst must enable without starting"
        fi

        check "dpkg -i succeeds" dpkg -i "$deb"
        check "status: install ok installed" test "$(status_of)" = "install ok installed"
        check "user holdfast exists, home /var/lib/holdfast" \
            test "$(getent passwd holdfast | cut -d: -f6)" = /var/lib/holdfast
        check "user holdfast has no login shell" \
            grep -q 'nologin$' <(getent passwd holdfast | cut -d: -f7)
        check "user holdfast is a system user (uid < 1000)" test "$(id -u holdfast)" -lt 1000
        check "group holdfast is its primary group" test "$(id -gn holdfast)" = holdfast
        for group in adm systemd-journal; do
            if getent group "$group" >/dev/null; then
                check "holdfast is in group $group" in_group "$group"
            else
                skip "group $group does not exist here"
            fi
        done
        check "/usr/bin/holdfast root:root 0755" test "$(mode_of /usr/bin/holdfast)" = "root:root 755"
        check "unit installed 0644" test "$(mode_of /usr/lib/systemd/system/holdfast.service)" = "root:root 644"
        check "config root:holdfast 0640" test "$(mode_of /etc/holdfast/holdfast.toml)" = "root:holdfast 640"
        check "/etc/holdfast root:root 0755" test "$(mode_of /etc/holdfast)" = "root:root 755"
        check "state dir holdfast:holdfast 0750" test "$(mode_of /var/lib/holdfast)" = "holdfast:holdfast 750"
        check "holdfast can read its config" as_holdfast test -r /etc/holdfast/holdfast.toml
        check "holdfast can write its state dir" as_holdfast touch /var/lib/holdfast/.check-probe
        check "others cannot read the config" test "$(stat -c '%a' /etc/holdfast/holdfast.toml | cut -c3)" = 0
        wants=/etc/systemd/system/multi-user.target.wants/holdfast.service
        if command -v deb-systemd-helper >/dev/null; then
            check "unit enabled (multi-user.target.wants link)" test -L "$wants"
        else
            skip "deb-systemd-helper not installed: unit not enabled"
        fi

        echo "# local edit by check.sh" >>/etc/holdfast/holdfast.toml
        check "dpkg -i again (reinstall) succeeds" dpkg -i --force-confold "$deb"
        check "reinstall keeps the administrator's config edit" grep -qx '# local edit by check.sh' /etc/holdfast/holdfast.toml
        check "reinstall keeps config root:holdfast 0640" test "$(mode_of /etc/holdfast/holdfast.toml)" = "root:holdfast 640"
        check "reinstall keeps the state dir's contents" test -f /var/lib/holdfast/.check-probe
        check "reinstall leaves one holdfast user" test "$(getent passwd | grep -c '^holdfast:')" = 1

        check "dpkg -r succeeds" dpkg -r holdfast
        check "status: deinstall ok config-files" test "$(status_of)" = "deinstall ok config-files"
        check "binary removed" test ! -e /usr/bin/holdfast
        check "unit removed" test ! -e /usr/lib/systemd/system/holdfast.service
        check "remove keeps the config" test -f /etc/holdfast/holdfast.toml
        check "remove keeps the state dir (undelivered telemetry)" test -f /var/lib/holdfast/.check-probe
        if command -v deb-systemd-helper >/dev/null; then
            check "remove masks the unit while its wants link dangles" \
                test "$(readlink /etc/systemd/system/holdfast.service)" = /dev/null
        fi

        check "dpkg -i over the removed package succeeds" dpkg -i --force-confold "$deb"
        check "status: install ok installed" test "$(status_of)" = "install ok installed"
        check "reinstall unmasks the unit" test ! -L /etc/systemd/system/holdfast.service
        if command -v deb-systemd-helper >/dev/null; then
            check "unit still enabled" test -L "$wants"
        fi
        check "the config edit survived remove + install" grep -qx '# local edit by check.sh' /etc/holdfast/holdfast.toml
        check "the state survived remove + install" test -f /var/lib/holdfast/.check-probe

        check "dpkg -r succeeds" dpkg -r holdfast
        check "dpkg -P succeeds" dpkg -P holdfast
        check "status: not installed" test "$(status_of)" = not-installed
        check "purge removes /etc/holdfast" test ! -e /etc/holdfast
        check "purge removes /var/lib/holdfast" test ! -e /var/lib/holdfast
        check "purge removes the enablement link" test ! -e "$wants" -a ! -L "$wants"
        check "purge leaves no mask" test ! -L /etc/systemd/system/holdfast.service
        check "purge leaves no deb-systemd-helper state" \
            test -z "$(find /var/lib/systemd -name 'holdfast.service*' 2>/dev/null)"
        check "purge keeps the holdfast user (Debian practice)" getent passwd holdfast >/dev/null
        cleanup_install=0

        if [ "$user_existed" = 0 ]; then
            # Leave the machine as this run found it.
            deluser --quiet --system holdfast >/dev/null 2>&1 || userdel holdfast
            if getent group holdfast >/dev/null; then
                delgroup --quiet --system holdfast >/dev/null 2>&1 || groupdel holdfast
            fi
            echo "      removed the holdfast user and group this run created"
        fi
    fi
fi

if [ "$skipped" -gt 0 ]; then
    echo "check.sh: $passed passed, $failed failed, $skipped skipped"
else
    echo "check.sh: $passed passed, $failed failed"
fi
[ "$failed" = 0 ]
