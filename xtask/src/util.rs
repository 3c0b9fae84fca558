//! Helpers shared by `bench`, `torture` and `fuzz`: building, running a child with its peak
//! memory, statistics.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Which cargo profile the tools are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    Release,
    Dev,
}

impl Profile {
    pub(crate) fn dir(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Dev => "debug",
        }
    }
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// `cargo build` of one package's binaries or examples, in a profile.
pub(crate) fn build(profile: Profile, what: &[&str]) -> Result<(), String> {
    let mut args = vec!["build", "--quiet"];
    if profile == Profile::Release {
        args.push("--release");
    }
    args.extend_from_slice(what);
    crate::cargo(&args)
}

/// `cargo build` of one package's benchmark target `name` (`harness = false`, run by
/// `cargo xtask bench`); returns the path of its executable, which cargo names with a hash.
pub(crate) fn build_bench(profile: Profile, package: &str, name: &str) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "--message-format=json-render-diagnostics",
        "-p",
        package,
        "--bench",
        name,
    ]);
    if profile == Profile::Release {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo build -p {package} --bench {name} failed"));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| format!("cargo built no executable for the benchmark {package}/{name}"))
}

/// The path of a built binary.
pub(crate) fn built(root: &Path, profile: Profile, name: &str) -> PathBuf {
    target_dir(root).join(profile.dir()).join(name)
}

/// How a measured child ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) wall: Duration,
    /// Peak resident set of the child, KiB.
    pub(crate) max_rss_kib: u64,
    pub(crate) success: bool,
}

/// Runs a command to its end (stdout and stderr discarded) and measures its wall time and
/// peak memory (`wait4`'s `ru_maxrss`).
pub(crate) fn run_measured(cmd: &mut Command) -> Result<Measured, String> {
    let start = Instant::now();
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
    let mut status: libc::c_int = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    #[expect(
        unsafe_code,
        reason = "wait4 is the only way to get one child's peak memory"
    )]
    // SAFETY: `pid` is our own un-reaped child; `status` and `usage` are valid for writes.
    let usage = unsafe {
        if libc::wait4(pid, &raw mut status, 0, usage.as_mut_ptr()) != pid {
            return Err(format!("wait4 failed for {cmd:?}"));
        }
        usage.assume_init()
    };
    let wall = start.elapsed();
    drop(child); // already reaped; dropping a Child neither waits nor kills.
    Ok(Measured {
        wall,
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

/// Median, minimum and maximum.
pub(crate) fn stats(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    (median, v[0], v[n - 1])
}

/// A fresh version-7-shaped UUID (time-ordered), hyphenated.
pub(crate) fn uuid_v7(ms: u64) -> String {
    let rand_a = fastrand::u16(..) & 0x0fff;
    let rand_b = fastrand::u64(..) & 0x3fff_ffff_ffff_ffff;
    let hi = (ms & 0xffff_ffff_ffff) << 16 | 0x7000 | u64::from(rand_a);
    let lo = 0x8000_0000_0000_0000 | rand_b;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// Prints a line for the person running xtask.
pub(crate) fn say(text: &str) {
    #[expect(clippy::print_stdout, reason = "xtask reports to the terminal")]
    {
        println!("{text}");
    }
}

/// A scratch directory under `target/<name>/`, emptied first.
pub(crate) fn scratch(root: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = target_dir(root).join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// A command for a built binary whose user config directory (where orca keeps the signing
/// key, ADR 0013) is a scratch directory: xtask never touches the real home.
pub(crate) fn command(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env(
        "XDG_CONFIG_HOME",
        std::env::temp_dir().join("orca-xtask-config"),
    )
    .env_remove("ORCA_SIGNING_KEY");
    cmd
}

/// Runs the orca binary, returning (success, stdout, stderr).
pub(crate) fn orca(
    bin: &Path,
    root: &Path,
    args: &[&str],
) -> Result<(bool, String, String), String> {
    let out = command(bin)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Runs the orca binary and requires success.
pub(crate) fn orca_ok(bin: &Path, root: &Path, args: &[&str]) -> Result<String, String> {
    let (ok, out, err) = orca(bin, root, args)?;
    if ok {
        Ok(out)
    } else {
        Err(format!(
            "`orca {}` failed: {}{}",
            args.join(" "),
            err.trim(),
            out.trim()
        ))
    }
}
