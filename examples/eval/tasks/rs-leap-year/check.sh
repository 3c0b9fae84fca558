set -e
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat src/lib.rs - > "$work/all.rs" <<'HIDDEN'
#[cfg(test)]
mod hidden {
    #[test]
    fn more_centuries() {
        assert!(!super::is_leap(2100));
        assert!(super::is_leap(2400));
        assert!(super::is_leap(1996));
    }
}
HIDDEN
rustc --edition 2021 --test -o "$work/t" "$work/all.rs" 2>&1
"$work/t" -q 2>&1
grep -q 'assert!(!is_leap(1900))' src/lib.rs
