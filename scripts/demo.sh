#!/usr/bin/env bash
# scripts/demo.sh: installs what is missing, builds cgr and runs the demo.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/deps.sh"
"$top/scripts/build.sh" build
exec "$top/build/examples/demo" "$@"
