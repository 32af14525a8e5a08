#!/usr/bin/env bash
# Make `prometheus` and `promtool` available for hookstream's observability checks (SPEC O3).
#
# Idempotent: when both commands are already on PATH it only prints their versions. Otherwise it
# installs Debian's `prometheus` package, which ships both, with apt-get (needs root, or sudo
# without a password). Any failure exits non-zero so CI fails loudly instead of skipping.
set -euo pipefail

have_both() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; }

if ! have_both; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo_cmd=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo -n)
  else
    echo "install.sh: prometheus is missing and neither root nor sudo is available" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install.sh: prometheus is missing and apt-get is not available; install it by hand" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  # --no-install-recommends keeps node-exporter and friends out; policy-rc.d-style services
  # are not started in containers, and hookstream's tests start their own Prometheus anyway.
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! have_both; then
  echo "install.sh: prometheus or promtool still missing after installing" >&2
  exit 1
fi
prometheus --version 2>&1 | head -n 1
promtool --version 2>&1 | head -n 1
