set -e
test -f slugify.test.js
node --test slugify.test.js >/dev/null 2>&1
# The tests must catch broken implementations: each mutant must fail them.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp slugify.test.js "$work/"
for body in "return text;" \
            "return text.replace(/[^a-zA-Z0-9]+/g, '-').replace(/^-+|-+\$/g, '');" \
            "return text.toLowerCase().replace(/[^a-z0-9]+/g, '-');"; do
  printf "'use strict';\nfunction slugify(text) { %s }\nmodule.exports = { slugify };\n" "$body" > "$work/slugify.js"
  if (cd "$work" && node --test slugify.test.js >/dev/null 2>&1); then
    echo "a broken slugify passes the tests: $body"
    exit 1
  fi
done
