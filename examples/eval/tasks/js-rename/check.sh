set -e
! grep -rq fmtDate --include='*.js' .
test "$(node index.js)" = "$(printf '2024-01-05\n2024-01-05 release')"
node -e "const f = require('./lib/format'); if (typeof f.formatDate !== 'function') process.exit(1)"
