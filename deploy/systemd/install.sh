#!/bin/sh
# Install gpuwait as a hardened systemd service:
#   /opt/gpuwait                     a virtualenv with the exporter (--prefix to change)
#   /etc/systemd/system/gpuwait.service
#   /usr/lib/sysusers.d/gpuwait.conf and the gpuwait system user
#   /usr/lib/tmpfiles.d/gpuwait.conf and the directories it names (workload spool, NCCL dumps)
#   /etc/gpuwait/config.yml, /etc/gpuwait/web-config.yml   (kept if they exist)
#   /opt/gpuwait/share/rules/*.yml   example alerting rules for your Prometheus
#   /opt/gpuwait/share/doc/deploy.md
# then enables and starts the service when systemd is running.
#
# --destdir DIR  stage everything under DIR (packaging, tests): no user is created and
#                no service is started.
# --no-venv      do not create the virtualenv (the exporter is installed some other way
#                at PREFIX/bin/gpuwait-exporter).
# --no-start     install and enable, but do not start now.
set -eu

prefix=/opt/gpuwait
destdir=
make_venv=1
start=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        --destdir) destdir=$2; shift 2 ;;
        --destdir=*) destdir=${1#*=}; shift ;;
        --no-venv) make_venv=0; shift ;;
        --no-start) start=0; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$prefix" in
    /*) ;;
    *) echo "install.sh: --prefix must be an absolute path" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
live=1
[ -n "$destdir" ] && live=0

if [ "$live" = 1 ] && [ "$(id -u)" != 0 ]; then
    echo "install.sh: run as root (or stage with --destdir)" >&2
    exit 1
fi

if [ "$make_venv" = 1 ]; then
    python3 -m venv "$destdir$prefix"
    "$destdir$prefix/bin/pip" install --no-cache-dir --quiet "$repo"
fi

# The unit names /opt/gpuwait; follow --prefix.
install -d -m 0755 "$destdir/etc/systemd/system"
sed "s|/opt/gpuwait|$prefix|g" "$here/gpuwait.service" > "$destdir/etc/systemd/system/gpuwait.service"
chmod 0644 "$destdir/etc/systemd/system/gpuwait.service"

install -D -m 0644 "$here/gpuwait.sysusers" "$destdir/usr/lib/sysusers.d/gpuwait.conf"
if [ "$live" = 1 ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /usr/lib/sysusers.d/gpuwait.conf
    elif ! id gpuwait >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin gpuwait
    fi
fi

install -D -m 0644 "$here/gpuwait.tmpfiles" "$destdir/usr/lib/tmpfiles.d/gpuwait.conf"
if [ "$live" = 1 ] && command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create /usr/lib/tmpfiles.d/gpuwait.conf
fi

# Configuration: readable by the service's group only (web-config.yml holds password
# hashes and may name private keys); an existing file is the administrator's and is kept.
install -d -m 0755 "$destdir/etc/gpuwait"
for name in config.yml web-config.yml; do
    target="$destdir/etc/gpuwait/$name"
    if [ -e "$target" ]; then
        echo "install.sh: keeping existing $target"
        continue
    fi
    install -m 0640 "$here/$name" "$target"
    if [ "$live" = 1 ]; then
        chgrp gpuwait "$target"
    fi
done

install -d -m 0755 "$destdir$prefix/share/rules" "$destdir$prefix/share/doc"
for rules in "$repo"/alerts/*.yml "$repo"/alerts/*.yaml; do
    [ -e "$rules" ] || continue
    # promtool's unit tests of the rules live beside them; Prometheus cannot load those.
    if grep -q '^rule_files:' "$rules"; then
        continue
    fi
    install -m 0644 "$rules" "$destdir$prefix/share/rules/"
done
install -m 0644 "$repo/docs/deploy.md" "$destdir$prefix/share/doc/deploy.md"

if [ "$live" = 1 ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    if [ "$start" = 1 ]; then
        systemctl enable --now gpuwait.service
        echo "install.sh: gpuwait is running; check: curl -s localhost:9975/metrics | head"
    else
        systemctl enable gpuwait.service
    fi
else
    echo "install.sh: installed under ${destdir:-/}; systemd is not running here, nothing was started"
fi
