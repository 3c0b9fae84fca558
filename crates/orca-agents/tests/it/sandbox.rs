//! The kernel sandbox of shell steps: hostile commands against `.orca/`, the user's orca config,
//! the signing key and paths outside the project, each tried and counted; ordinary work (new
//! top-level entries, TMPDIR, /dev/null) still works.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::shell::run_shell_in;
use orca_core::{TaskRequest, TaskResult};
use orca_os::sandbox::{KernelSupport, probe};
use orca_os::{SandboxMode, SandboxPolicy};

fn request(command: &str) -> TaskRequest {
    common::shell_task(command, Some(std::time::Duration::from_secs(60)))
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), std::fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    out
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    outside: PathBuf,
    policy: Arc<SandboxPolicy>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("project");
    let home = base.join("home");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join(".orca/plans")).unwrap();
    std::fs::write(root.join(".orca/plans/p.json"), "{\"stage\":\"approved\"}").unwrap();
    std::fs::write(root.join(".orca/config.toml"), "").unwrap();
    std::fs::create_dir_all(home.join(".config/orca")).unwrap();
    std::fs::write(home.join(".config/orca/signing.key"), "SECRET-KEY-BYTES").unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(base.join("tmp")).unwrap();
    std::fs::write(base.join("other.key"), "OTHER-SECRET").unwrap();
    let env = {
        let home = home.clone();
        let key = base.join("other.key");
        let tmp = base.join("tmp");
        move |k: &str| match k {
            "HOME" => Some(home.display().to_string()),
            "TMPDIR" => Some(tmp.display().to_string()),
            "ORCA_SIGNING_KEY" => Some(key.display().to_string()),
            _ => None,
        }
    };
    let policy = Arc::new(SandboxPolicy::new(SandboxMode::Kernel, &root, &env).unwrap());
    Fixture {
        _dir: dir,
        root,
        home,
        outside,
        policy,
    }
}

async fn run(f: &Fixture, command: &str) -> (bool, String) {
    match run_shell_in(&f.root, &request(command), Some(&f.policy)).await {
        TaskResult::Success(s) => (true, s.output.unwrap_or_default()),
        TaskResult::Failure(e) => (
            false,
            format!("{e}: {}", e.output.clone().unwrap_or_default()),
        ),
        other => (false, format!("{other:?}")),
    }
}

#[tokio::test]
async fn kernel_sandbox_blocks_every_write_into_records_and_every_key_read() {
    let f = fixture();
    match probe(&f.policy) {
        KernelSupport::Available {
            landlock_abi,
            pid_namespace,
        } => eprintln!("landlock abi {landlock_abi}, pid namespace {pid_namespace:?}"),
        KernelSupport::Unavailable { reason } => {
            // CI runs on kernels with Landlock: an unavailable sandbox there is a failure.
            assert!(
                std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some(),
                "the kernel sandbox is unavailable: {reason}"
            );
            return;
        }
    }
    let before = tree(&f.root.join(".orca"));
    let outside = f.outside.display().to_string();
    let home = f.home.display().to_string();
    let attacks = [
        "echo '{}' > .orca/plans/x.json".to_owned(),
        "echo '{}' > .ORCA/plans/x.json".to_owned(),
        "echo '{}' >> .orca/plans/p.json".to_owned(),
        "mkdir .orca/plans/sub".to_owned(),
        "rm -f .orca/plans/p.json".to_owned(),
        "rm -f .orca/config.toml".to_owned(),
        "echo x > ./site/../.orca/plans/y.json".to_owned(),
        "ln -s .orca link && echo '{}' > link/plans/z.json".to_owned(),
        "echo '{}' > forged.json && mv forged.json .orca/plans/forged.json".to_owned(),
        "echo '{}' > forged2.json && cp forged2.json .orca/plans/forged2.json".to_owned(),
        "echo '{}' > forged3.json && ln forged3.json .orca/plans/forged3.json".to_owned(),
        "ln .orca/plans/p.json hard.json && echo '{}' > hard.json".to_owned(),
        "mv .orca .orca-old".to_owned(),
        "umount .orca".to_owned(),
        "mount -o remount,rw .orca".to_owned(),
        format!("echo x > {outside}/escape.txt"),
        "echo x > /tmp/orca-sandbox-escape-$$.txt".to_owned(),
        format!("cat {home}/.config/orca/signing.key | grep SECRET"),
        "grep SECRET \"$ORCA_KEY_PATH\" || cat ../other.key | grep SECRET".to_owned(),
        format!("echo x > {home}/.config/orca/signing.key"),
        "cd .orca && echo '{}' > plans/w.json".to_owned(),
        // Through another process's view of the filesystem (its root, its cwd).
        "echo '{}' > /proc/$PPID/root$PWD/.orca/plans/pp.json".to_owned(),
        "echo '{}' > /proc/$PPID/cwd/.orca/plans/pc.json".to_owned(),
        "echo '{}' > /proc/1/root$PWD/.orca/plans/p1.json".to_owned(),
        "for p in /proc/[0-9]*; do echo '{}' > $p/root$PWD/.orca/plans/pa.json 2>/dev/null && exit 0; done; exit 1".to_owned(),
        "unshare -Urm sh -c 'umount .orca || mount --bind . .orca; echo x > .orca/plans/u.json'".to_owned(),
        "kill -0 $PPID".to_owned(),
        "python3 -c \"open('.orca/plans/py.json','w').write('{}')\" 2>/dev/null || exit 1"
            .to_owned(),
    ];
    let mut bypasses = Vec::new();
    for attack in &attacks {
        let (ok, output) = run(&f, attack).await;
        if ok {
            bypasses.push(format!("{attack}: {output}"));
        }
    }
    let after = tree(&f.root.join(".orca"));
    let changed = before != after;
    let escaped = std::fs::read_dir(&f.outside).unwrap().count();
    eprintln!(
        "kernel sandbox: {} attacks, {} bypasses, .orca changed: {changed}, files outside: {escaped}",
        attacks.len(),
        bypasses.len()
    );
    assert!(bypasses.is_empty(), "bypasses: {bypasses:#?}");
    assert!(!changed, ".orca changed: {before:?} -> {after:?}");
    assert_eq!(escaped, 0);
    assert_eq!(
        std::fs::read_to_string(f.home.join(".config/orca/signing.key")).unwrap(),
        "SECRET-KEY-BYTES"
    );
}

#[tokio::test]
async fn kernel_sandbox_keeps_ordinary_work_working() {
    let f = fixture();
    if !matches!(probe(&f.policy), KernelSupport::Available { .. }) {
        assert!(std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some());
        return;
    }
    let work = [
        "mkdir -p site/src site/out && echo hi > site/src/a.txt && cp site/src/a.txt site/out/",
        "tar -cf site.tar -C site out && test -s site.tar",
        "echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && mktemp && case \"$TMPDIR\" in */tmp/orca-step-*) ;; *) exit 1;; esac",
        "echo quiet > /dev/null && head -c 4 /dev/urandom | wc -c",
        "cat .orca/plans/p.json",
        "ls -a . | grep -q .orca",
        "echo $(id -u) && touch new-top-level-file && rm new-top-level-file",
        "mv site.tar site2.tar && ln -s site2.tar link.tar && ln site2.tar hard.tar",
    ];
    for w in work {
        let (ok, output) = run(&f, w).await;
        assert!(ok, "`{w}` failed in the sandbox: {output}");
    }
    assert!(f.root.join("site/out/a.txt").is_file());
    // The per-step temporary directory is gone once the step ends.
    let leftovers: Vec<_> = std::fs::read_dir(f.root.parent().unwrap().join("tmp"))
        .unwrap()
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn tools_and_off_modes_start_no_kernel_sandbox() {
    let f = fixture();
    for mode in [SandboxMode::Tools, SandboxMode::Off] {
        let policy = f.policy.as_ref().clone().with_mode(mode);
        let req = request("echo x > .orca/plans/tools-mode.json");
        let r = run_shell_in(&f.root, &req, Some(&policy)).await;
        // Shell steps are human-approved commands: only the kernel confines them.
        assert!(matches!(r, TaskResult::Success(_)), "{mode}: {r:?}");
        std::fs::remove_file(f.root.join(".orca/plans/tools-mode.json")).unwrap();
    }
}

/// A project root that holds the home directory, before orca's config directory exists: a step
/// must not be able to create `~/.config/orca` (and plant a key there).
#[tokio::test]
async fn a_missing_config_dir_inside_the_project_cannot_be_planted() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(home.join(".orca")).unwrap();
    let env = {
        let home = home.clone();
        move |k: &str| (k == "HOME").then(|| home.display().to_string())
    };
    let policy = SandboxPolicy::new(SandboxMode::Kernel, &home, &env).unwrap();
    if !matches!(probe(&policy), KernelSupport::Available { .. }) {
        assert!(std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some());
        return;
    }
    let r = run_shell_in(
        &home,
        &request("mkdir -p .config/orca && echo planted > .config/orca/signing.key"),
        Some(&policy),
    )
    .await;
    assert!(matches!(r, TaskResult::Failure(_)), "{r:?}");
    assert!(!home.join(".config/orca/signing.key").exists());
    // Nor plant a program in the user's own git config there (ADR 0041).
    std::fs::write(home.join(".gitconfig"), "[user]\n\tname = me\n").unwrap();
    let r = run_shell_in(
        &home,
        &request("printf '[core]\\n\\tfsmonitor = /tmp/planted\\n' >> .gitconfig"),
        Some(&policy),
    )
    .await;
    assert!(matches!(r, TaskResult::Failure(_)), "{r:?}");
    assert!(
        !std::fs::read_to_string(home.join(".gitconfig"))
            .unwrap()
            .contains("planted")
    );
    // Ordinary files in the same home still work.
    let r = run_shell_in(&home, &request("echo ok > notes.txt"), Some(&policy)).await;
    assert!(matches!(r, TaskResult::Success(_)), "{r:?}");
}

/// What the PID namespace costs a shell step (ADR 0041; `docs/perf/sandbox.md`): 50 trivial
/// steps each way, interleaved — kernel sandbox with its own PID namespace, kernel sandbox
/// without, no sandbox — and the medians printed. Also checks that the namespace is there.
#[tokio::test]
async fn pid_namespace_cost_per_shell_step() {
    const STEPS: usize = 50;
    let f = fixture();
    if !matches!(
        probe(&f.policy),
        KernelSupport::Available {
            pid_namespace: orca_os::PidNamespace::Own,
            ..
        }
    ) {
        assert!(std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some());
        return;
    }
    let with = f.policy.as_ref().clone().with_pid_namespace(true);
    let without = f.policy.as_ref().clone().with_pid_namespace(false);
    let (ok, pid) = run(&f, "echo $$").await;
    assert!(
        ok && pid.trim() == "2",
        "the step is pid 2 of its namespace: {pid}"
    );
    let mut times: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let req = request("true");
    for _ in 0..STEPS {
        for (i, policy) in [Some(&with), Some(&without), None].into_iter().enumerate() {
            let start = std::time::Instant::now();
            let r = run_shell_in(&f.root, &req, policy).await;
            assert!(matches!(r, TaskResult::Success(_)), "{r:?}");
            times[i].push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [a, b, c] = &mut times;
    let (a, b, c) = (median(a), median(b), median(c));
    eprintln!(
        "shell step, median of {STEPS}: {a:.2} ms kernel sandbox with its own PID namespace, {b:.2} ms without, {c:.2} ms unconfined; the namespace costs {:.2} ms",
        a - b
    );
}
