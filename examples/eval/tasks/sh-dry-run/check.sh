set -e
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp backup.sh "$work/"
cd "$work"
echo data > a.txt
out=$(sh backup.sh -n a.txt)
test ! -e a.txt.bak
echo "$out" | grep -q 'would copy a.txt to a.txt.bak'
sh backup.sh a.txt | grep -q 'copied a.txt to a.txt.bak'
test "$(cat a.txt.bak)" = data
