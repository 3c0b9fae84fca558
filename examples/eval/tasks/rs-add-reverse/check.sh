set -e
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat src/lib.rs - > "$work/all.rs" <<'HIDDEN'
#[cfg(test)]
mod hidden {
    #[test]
    fn reverses_characters() {
        assert_eq!(super::reverse(""), "");
        assert_eq!(super::reverse("abc"), "cba");
        assert_eq!(super::reverse("héllo"), "olléh");
    }
}
HIDDEN
rustc --edition 2021 --test -o "$work/t" "$work/all.rs" 2>&1
"$work/t" -q 2>&1
# A unit test of its own that calls reverse.
grep -q '#\[test\]' src/lib.rs
test "$(grep -c 'reverse(' src/lib.rs)" -ge 2
