//! `cargo xtask fuzz [--cases N]`: the proptest fuzz targets (cargo-fuzz needs a nightly
//! toolchain; this project pins stable 1.95, so the targets are proptest properties).
//!
//! The targets live in `crates/orca-services/tests/it/fuzz.rs` (plan documents, stored plan /
//! execution / task files, audit lines through the file store's `verify`, and signed, sealed
//! logs whose lines and seal are both mutated (ADR 0013)) and
//! `crates/orca-agents/tests/it/fuzz.rs` (config files, LLM replies); they also run, with few
//! cases, in the normal test suite. Seeds come from `fuzz/corpus/<target>/`.

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut cases: u32 = 1000;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cases" => {
                cases = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--cases needs a number")?;
            }
            other => return Err(format!("fuzz: unknown option {other}")),
        }
    }
    crate::util::say(&format!("fuzz: {cases} cases per target"));
    let cases = cases.to_string();
    // Each crate's integration tests are one binary (`tests/it`); `fuzz::` picks the targets.
    for (package, test) in [("orca-services", "fuzz::"), ("orca-agents", "fuzz::")] {
        crate::cargo_env(
            &[
                "test",
                "-p",
                package,
                "--test",
                "it",
                test,
                "--",
                "--test-threads",
                "2",
            ],
            &[
                ("PROPTEST_CASES", cases.as_str()),
                ("ORCA_FUZZ_CASES", cases.as_str()),
            ],
        )?;
    }
    Ok(())
}
