#!/usr/bin/env bash
# Make headless Chromium and its WebDriver available for the portal's browser tests (SPEC U5).
#
# Idempotent: when /usr/bin/chromium and /usr/bin/chromedriver both exist it only prints their
# versions. Otherwise it installs Debian's `chromium` and `chromium-driver` packages with apt-get
# (needs root, or sudo without a password). Any failure exits non-zero so CI fails loudly
# instead of skipping the browser tests.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

have_both() { [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; }

if ! have_both; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo_cmd=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo -n)
  else
    echo "install-browser.sh: chromium is missing and neither root nor sudo is available" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser.sh: chromium is missing and apt-get is not available" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver \
    fonts-dejavu-core >/dev/null
fi

if ! have_both; then
  echo "install-browser.sh: $CHROMIUM or $CHROMEDRIVER still missing after installing" >&2
  exit 1
fi
"$CHROMIUM" --version 2>/dev/null | head -n 1
"$CHROMEDRIVER" --version 2>/dev/null | head -n 1
