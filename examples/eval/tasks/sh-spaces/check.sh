set -e
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp count.sh "$work/"
cd "$work"
printf 'a\nb\n' > 'my file.txt'
printf 'x\n' > plain.txt
out=$(sh count.sh 'my file.txt' plain.txt | sed 's/^ *//')
test "$out" = "$(printf '2 my file.txt\n1 plain.txt')"
