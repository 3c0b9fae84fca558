#!/bin/sh
set -eu
. ./config.sh
mkdir -p "$APP_DIR"
echo "running in $APP_DIR, logging to $LOG_FILE"
