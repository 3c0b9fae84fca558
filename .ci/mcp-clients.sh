#!/usr/bin/env bash
# Installs the outside MCP clients orca's MCP server is tested with (pinned versions), for
# crates/orca/tests/it/mcp_clients.rs:
#
#   .ci/mcp-clients.sh [DIR]   (DIR defaults to target/mcp-clients)
#     → DIR/venv/bin/python    the official Python SDK (PyPI `mcp`) and `jsonschema`
#     → DIR/npm/node_modules/.bin/mcp-inspector   the MCP Inspector (npm)
#
# Reused when already installed (a stamp names the pinned versions). Exit status: 0 installed
# (or already there), 3 python/npm missing or a registry unreachable (the tests then skip
# LOUDLY, and fail when CI is set), anything else a real failure.
set -euo pipefail
dir=${1:-"$(cd "$(dirname "$0")/.." && pwd)/target/mcp-clients"}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# Bump together with the versions named in docs/mcp.md.
py_pkgs=(mcp==2.3.0 jsonschema==4.26.0)
npm_pkgs=(@modelcontextprotocol/inspector@2.12.0)
want="${py_pkgs[*]} ${npm_pkgs[*]}"
stamp="$dir/installed.txt"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/venv/bin/python" ] \
  && [ -x "$dir/npm/node_modules/.bin/mcp-inspector" ]; then
  echo "mcp-clients: cached in $dir ($want)"
  exit 0
fi
for tool in python3 node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "mcp-clients: $tool not installed" >&2
    exit 3
  fi
done
rm -f "$stamp"
echo "mcp-clients: installing $want into $dir"
if [ ! -x "$dir/venv/bin/python" ]; then
  python3 -m venv "$dir/venv"
fi
if ! timeout 300 "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${py_pkgs[@]}"; then
  echo "mcp-clients: pip could not install ${py_pkgs[*]} (PyPI unreachable?)" >&2
  exit 3
fi
mkdir -p "$dir/npm"
cd "$dir/npm"
[ -f package.json ] || echo '{"name":"orca-mcp-clients","private":true}' > package.json
if ! timeout 300 npm install --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}"; then
  echo "mcp-clients: npm could not install ${npm_pkgs[*]} (registry unreachable?)" >&2
  exit 3
fi
echo "$want" > "$stamp"
echo "mcp-clients: installed"
