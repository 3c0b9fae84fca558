//! Fixtures shared by the integration tests (from the crate's `testkit`), and the harness of
//! the `harness = false` test binaries.

#![allow(dead_code, unreachable_pub, reason = "each test file uses a part")]

pub use orca_store::testkit::fixtures::*;

/// A named test of a `harness = false` test binary (one that re-executes itself as a child).
pub type Test = fn(&tokio::runtime::Runtime);

/// Runs the tests whose name contains a command-line filter (every test without one), printing
/// as libtest does.
#[allow(clippy::print_stderr, reason = "a test harness reports on stderr")]
pub fn run_tests(rt: &tokio::runtime::Runtime, tests: &[(&str, Test)]) {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut ran = 0;
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        eprint!("test {name} ... ");
        test(rt);
        eprintln!("ok");
        ran += 1;
    }
    eprintln!("test result: ok. {ran} passed");
}
