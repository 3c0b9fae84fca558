#!/bin/sh
# Usage: backup.sh FILE... — copies each FILE to FILE.bak
set -eu
for f in "$@"; do
  cp -- "$f" "$f.bak"
  echo "copied $f to $f.bak"
done
