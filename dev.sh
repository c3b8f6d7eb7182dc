#!/usr/bin/env bash
# The README's entry point on a fresh Debian 12 machine (root): makes sure `make`
# exists, then runs the Makefile target (up, test, unit, bench, ...).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v make >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null
fi
exec make "$@"
