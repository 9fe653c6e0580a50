#!/usr/bin/env bash
# Vendor the dashboard's charting library (Chart.js 4, UMD build) from the npm registry into
# src/strait/web/static/vendor/ (git-ignored). Run by the build; a second run with the file
# present does nothing. Needs `npm` (the registry client only: nothing is installed globally).
set -euo pipefail
cd "$(dirname "$0")/.."

version="${CHART_JS_VERSION:-4}"
target=src/strait/web/static/vendor/chart.umd.js
if [ -s "$target" ] && [ "${1:-}" != "--force" ]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "vendor_ui: npm is needed to fetch chart.js from the npm registry" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tarball="$(cd "$work" && npm pack --silent "chart.js@${version}" | tail -n 1)"
tar -xzf "$work/$tarball" -C "$work"
mkdir -p "$(dirname "$target")"
cp "$work/package/dist/chart.umd.js" "$target"
cp "$work/package/LICENSE.md" "$(dirname "$target")/chart.js.LICENSE.md"
echo "vendored chart.js $(node -p "require('$work/package/package.json').version" 2>/dev/null || echo "$version") -> $target"
