set -e
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat src/lib.rs - > "$work/all.rs" <<'HIDDEN'
#[cfg(test)]
mod hidden {
    #[test]
    fn edge_cases() {
        assert_eq!(super::parse_kv("novalue"), None);
        assert_eq!(super::parse_kv(""), None);
        assert_eq!(super::parse_kv(" k = v "), Some(("k", "v")));
        assert_eq!(super::parse_kv("a=b=c"), Some(("a", "b=c")));
    }
}
HIDDEN
rustc --edition 2021 --test -o "$work/t" "$work/all.rs" 2>&1
"$work/t" -q 2>&1
