set -e
! grep -q APP_DIR config.sh run.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp config.sh run.sh "$work/"
cd "$work"
test "$(sh run.sh)" = "running in ./app, logging to ./app/app.log"
test "$(APP_HOME="$work/home" sh run.sh)" = "running in $work/home, logging to $work/home/app.log"
test -d "$work/home"
