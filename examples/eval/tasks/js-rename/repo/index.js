'use strict';

const { fmtDate } = require('./lib/format');
const { line } = require('./lib/report');

const d = new Date(Date.UTC(2024, 0, 5));
console.log(fmtDate(d));
console.log(line('release', d));
