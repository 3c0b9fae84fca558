# Sourced by the other scripts.
APP_DIR=${APP_DIR:-./app}
LOG_FILE="$APP_DIR/app.log"
