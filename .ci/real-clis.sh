#!/usr/bin/env bash
# Installs the real command-line agents orca runs (pinned versions) into a directory of the
# tests' own, for crates/orca-agents/tests/real_clis.rs. Reused when already installed.
#
#   .ci/real-clis.sh DIR      → DIR/node_modules/.bin/{claude,codex,opencode}
#
# Exit status: 0 installed (or already there), 3 npm missing or the registry unreachable
# (the test then skips LOUDLY), anything else a real failure.
set -euo pipefail
dir=${1:?usage: real-clis.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# Bump together with the fixtures in crates/orca-agents/tests/fixtures/cli/.
pkgs=(@anthropic-ai/claude-code@2.1.330 @openai/codex@0.169.0 opencode-ai@1.18.33)
stamp="$dir/installed.txt"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pkgs[*]}" ] \
  && [ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ] \
  && [ -x "$dir/node_modules/.bin/opencode" ]; then
  echo "real-clis: cached in $dir (${pkgs[*]})"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "real-clis: node/npm not installed" >&2
  exit 3
fi
if ! timeout 30 npm view --loglevel=error @openai/codex@0.169.0 version >/dev/null 2>&1; then
  echo "real-clis: the npm registry is unreachable" >&2
  exit 3
fi
cd "$dir"
[ -f package.json ] || echo '{"name":"orca-real-clis","private":true}' > package.json
echo "real-clis: installing ${pkgs[*]} into $dir (about 1 GB, once)"
timeout 600 npm install --no-audit --no-fund --loglevel=error "${pkgs[@]}"
echo "${pkgs[*]}" > "$stamp"
