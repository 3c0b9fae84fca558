'use strict';

function parsePort(value) {
  return Number(value);
}

module.exports = { parsePort };
