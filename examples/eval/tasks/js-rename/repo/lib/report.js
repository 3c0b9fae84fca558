'use strict';

const { fmtDate } = require('./format');

function line(title, when) {
  return `${fmtDate(when)} ${title}`;
}

module.exports = { line };
