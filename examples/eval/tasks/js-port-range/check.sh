set -e
node -e "
const { parsePort } = require('./port');
const assert = require('node:assert');
assert.strictEqual(parsePort('8080'), 8080);
assert.strictEqual(parsePort(443), 443);
assert.strictEqual(parsePort('65535'), 65535);
for (const bad of ['0', '65536', '-1', '80.5', 'abc', '', '1e3']) {
  assert.throws(() => parsePort(bad), RangeError, 'accepted ' + JSON.stringify(bad));
}
"
