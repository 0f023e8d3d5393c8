#!/usr/bin/env bash
# Build holdfast_<version>-<revision>_<arch>.deb with dpkg-deb alone.
#
# No cargo-deb and no debhelper: CI would have to compile or install a tool
# just to lay out a dozen files. This script stages the package tree,
# writes DEBIAN/ by hand and runs `dpkg-deb --build --root-owner-group`.
#
# Usage: packaging/build-deb.sh [--target-dir DIR] [--out DIR] [--no-build]
#                               [--config FILE] [--revision N]
#
#   --target-dir DIR  cargo's target directory (default: $CARGO_TARGET_DIR
#                     or <repo>/target); the binary is DIR/release/holdfast
#   --out DIR         where the .deb goes (default: <target-dir>/debian)
#   --no-build        package the existing DIR/release/holdfast as it is
#   --config FILE     the default config to ship (default: config/holdfast.toml)
#   --revision N      Debian revision appended to Cargo's version (default: 1)
#
# Prints the path of the .deb as its last line. Needs dpkg-deb, binutils
# (strip, objcopy) and gzip; dpkg-shlibdeps (dpkg-dev) computes Depends when
# present, otherwise Depends falls back to libc6.
set -euo pipefail

usage() {
    if [ "${1:-0}" = 0 ]; then
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
    else
        echo "usage: packaging/build-deb.sh [--target-dir DIR] [--out DIR] [--no-build] [--config FILE] [--revision N]" >&2
    fi
    exit "${1:-0}"
}

die() {
    echo "build-deb: $*" >&2
    exit 1
}

repo=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
out=""
build=1
config=$repo/config/holdfast.toml
revision=1

while [ $# -gt 0 ]; do
    case "$1" in
        --target-dir) target_dir=${2:?--target-dir needs a directory}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        --no-build) build=0; shift ;;
        --config) config=${2:?--config needs a file}; shift 2 ;;
        --revision) revision=${2:?--revision needs a number}; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "build-deb: unknown argument '$1'" >&2; usage 2 ;;
    esac
done

for tool in dpkg-deb dpkg strip objcopy gzip; do
    command -v "$tool" >/dev/null || die "'$tool' not found (apt-get install dpkg binutils gzip)"
done
case "$revision" in
    '' | *[!0-9A-Za-z.+~]*) die "--revision '$revision' is not a valid Debian revision" ;;
esac

# Absolute paths: cargo runs from the repository, dpkg-shlibdeps elsewhere.
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
out=${out:-$target_dir/debian}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -f "$config" ] || die "default config '$config' not found; write config/holdfast.toml or pass --config FILE"

# --- version -----------------------------------------------------------------
# The `version` key of Cargo.toml's [package] table. A SemVer pre-release
# (0.2.0-rc.1) becomes 0.2.0~rc.1 so that dpkg sorts it before 0.2.0.
cargo_version=$(awk '
    /^\[/ { in_package = ($0 == "[package]") }
    in_package && /^version[ \t]*=/ {
        sub(/^version[ \t]*=[ \t]*"/, ""); sub(/".*/, ""); print; exit
    }' "$repo/Cargo.toml")
[ -n "$cargo_version" ] || die "no version in [package] of $repo/Cargo.toml"
upstream_version=${cargo_version/-/\~}
version=$upstream_version-$revision
arch=$(dpkg --print-architecture)
deb=$out/holdfast_${version}_${arch}.deb

# --- binary ------------------------------------------------------------------
if [ "$build" = 1 ]; then
    echo "build-deb: cargo build --release --locked" >&2
    (cd "$repo" && cargo build --release --locked --target-dir "$target_dir" --bin holdfast)
fi
binary=$target_dir/release/holdfast
[ -x "$binary" ] || die "'$binary' not found; build it or drop --no-build"

# Reproducible timestamps: the last commit's time when in git, else now.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
doc=$root/usr/share/doc/holdfast
umask 022

# --- files -------------------------------------------------------------------
install -D -m 0755 "$binary" "$root/usr/bin/holdfast"
# Policy wants stripped binaries (lintian: unstripped-binary-or-object). The
# debug info (the release profile keeps line tables) goes next to the .deb so
# a core from the field can still be symbolized:
#   gdb -s holdfast_<version>_<arch>.debug /usr/bin/holdfast core
objcopy --only-keep-debug "$binary" "$out/holdfast_${version}_${arch}.debug"
chmod 0644 "$out/holdfast_${version}_${arch}.debug"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/holdfast"

# /usr/lib/systemd/system, not /lib: Debian moved unit files under /usr with
# the /usr merge (debhelper and trixie's systemd use it); bookworm's systemd
# and deb-systemd-helper read both.
install -D -m 0644 "$repo/systemd/holdfast.service" "$root/usr/lib/systemd/system/holdfast.service"
# 0644 root:root in the archive; postinst makes it root:holdfast 0640.
install -D -m 0644 "$config" "$root/etc/holdfast/holdfast.toml"

install -D -m 0644 "$repo/packaging/debian/copyright" "$doc/copyright"
install -D -m 0644 "$repo/packaging/debian/lintian-overrides" "$root/usr/share/lintian/overrides/holdfast"
install -m 0644 "$repo/README.md" "$doc/README.md"
# The configuration reference, for operators on a device without the repo.
# Uncompressed: the unit's Documentation= points at it.
if [ -f "$repo/docs/configuration.md" ]; then
    install -m 0644 "$repo/docs/configuration.md" "$doc/configuration.md"
fi
# The pages README.md points to (docs/*.md), under docs/ beside it so its
# relative links resolve on the device too.
grep -o 'docs/[A-Za-z0-9_.-]*\.md' "$repo/README.md" | sort -u >"$stage/readme-pages"
while read -r page; do
    [ -f "$repo/$page" ] || die "README.md points to $page, which does not exist"
    install -D -m 0644 "$repo/$page" "$doc/$page"
done <"$stage/readme-pages"
# The Grafana dashboard and the Prometheus alert rules (with their promtool
# unit tests), for the monitoring host to pick up: docs/dashboards.md.
share=$root/usr/share/holdfast
install -D -m 0644 "$repo/packaging/grafana/holdfast-dashboard.json" "$share/grafana/holdfast-dashboard.json"
for f in holdfast-alerts.yml holdfast-alerts.test.yml; do
    install -D -m 0644 "$repo/packaging/prometheus/$f" "$share/prometheus/$f"
done
if [ -f "$repo/CHANGELOG.md" ]; then
    gzip -9n <"$repo/CHANGELOG.md" >"$doc/changelog.gz"
fi
# A non-native package (version with a Debian revision) carries
# changelog.Debian.gz for its packaging changes.
{
    printf 'holdfast (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * Built from the holdfast source tree by packaging/build-deb.sh.\n'
    printf '    Upstream changes: /usr/share/doc/holdfast/changelog.gz.\n\n'
    printf ' -- holdfast maintainers <maintainers@holdfast.invalid>  %s\n' \
        "$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.Debian.gz"

# --- DEBIAN/ -----------------------------------------------------------------
mkdir -p "$root/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "$repo/packaging/debian/$script" "$root/DEBIAN/$script"
done
# dpkg keeps an administrator's edits to the config across upgrades and
# removes it only on purge.
echo /etc/holdfast/holdfast.toml >"$root/DEBIAN/conffiles"

# Depends: the shared libraries the binary links (libc6, libgcc-s1,
# libsystemd0 for the journald source) as dpkg-shlibdeps computes them, plus
# adduser for postinst.
shlib_depends=""
if command -v dpkg-shlibdeps >/dev/null; then
    # dpkg-shlibdeps wants a source tree with debian/control; give it a stub.
    mkdir -p "$stage/src/debian"
    printf 'Source: holdfast\n\nPackage: holdfast\nArchitecture: any\n' >"$stage/src/debian/control"
    shlib_depends=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/holdfast" 2>/dev/null |
        sed -n 's/^shlibs:Depends=//p') || shlib_depends=""
fi
if [ -z "$shlib_depends" ]; then
    echo "build-deb: dpkg-shlibdeps unavailable or failed; Depends falls back to libc6, libsystemd0" >&2
    shlib_depends="libc6, libsystemd0"
fi

# Installed-Size in KiB, as dpkg-gencontrol computes it (apparent sizes).
installed_size=$(du -sk --apparent-size --exclude=DEBIAN "$root" | cut -f1)

cat >"$root/DEBIAN/control" <<EOF
Package: holdfast
Version: $version
Architecture: $arch
Maintainer: holdfast maintainers <maintainers@holdfast.invalid>
Installed-Size: $installed_size
Depends: $shlib_depends, adduser
Section: admin
Priority: optional
Description: durable telemetry agent for edge devices
 holdfast takes telemetry in (log files, OTLP/HTTP), keeps every record in
 its own append-only, checksummed log on local disk, and ships records to
 backends, advancing each sink only when the backend accepted that record.
 Acknowledged data survives restarts, crashes and power cuts, and every
 event it ever drops is counted, with the reason, in Prometheus metrics.
 .
 This package installs the daemon, a hardened systemd unit (holdfast.service),
 a default configuration in /etc/holdfast and the state directory
 /var/lib/holdfast, and runs the agent as the unprivileged user holdfast.
 A Grafana dashboard and Prometheus alert rules are in /usr/share/holdfast.
EOF

(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' |
    LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
echo "$deb"
