#!/usr/bin/env bash
# Installs the SMTP server the email notification tests send to (Python's aiosmtpd, pinned) into
# a virtual environment of the tests' own, for crates/orca/tests/it/notify_delivery.rs. Reused
# when already installed. Run by .ci/setup, and by the test itself when missing.
#
#   .ci/smtp-venv.sh DIR      → DIR/bin/python with aiosmtpd
set -euo pipefail
dir=${1:?usage: smtp-venv.sh DIR}
pkg=aiosmtpd==1.4.6
stamp="$dir/installed.txt"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkg" ] && [ -x "$dir/bin/python" ]; then
  echo "smtp-venv: cached in $dir ($pkg)"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "smtp-venv: python3 is not installed (bash .ci/setup installs it)" >&2
  exit 3
fi
mkdir -p "$dir"
python3 -m venv "$dir"
echo "smtp-venv: installing $pkg into $dir"
timeout 300 "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$pkg"
echo "$pkg" > "$stamp"
