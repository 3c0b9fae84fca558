//! One trial: a fresh copy of the task's repo with its own `.orca/`, the real flow (planner or
//! plan → approval recorded as `eval` → run with checks) in a child `orca`, then the hidden
//! check in the copy. Nothing of the suite but the repo's files and the plan reaches the child.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::measure;
use super::report::Trial;
use super::suite::Task;
use crate::exit::CliError;

/// What every trial of a run shares.
pub(crate) struct Setup {
    /// The `orca` binary to run (this one).
    pub(crate) exe: PathBuf,
    /// The config every trial's `.orca/config.toml` holds.
    pub(crate) config: Option<String>,
    /// The report's directory: trials live under `trials/`.
    pub(crate) out: PathBuf,
    pub(crate) trusted: Vec<PathBuf>,
}

/// Where trial `n` of `task` lives, relative to the report.
pub(crate) fn trial_dir(task: &str, n: u32) -> String {
    format!("trials/{task}/{n}")
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == orca_store::STORE_DIR {
            continue;
        }
        let kind = entry.file_type()?;
        let target = to.join(&name);
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn git(root: &Path, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=orca eval",
            "-c",
            "user.email=eval@orca.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Copies the task's repo to `root`, a git repository with one commit.
fn prepare(task: &Task, root: &Path) -> Result<(), CliError> {
    if root.exists() {
        return Err(CliError::bad_input(format!(
            "{}: already exists; eval run writes only into a new directory",
            root.display()
        )));
    }
    copy_tree(&task.repo, root).map_err(|e| {
        CliError::internal(format!(
            "cannot copy {} to {}: {e}",
            task.repo.display(),
            root.display()
        ))
    })?;
    if !root.join(".git").exists() {
        git(root, &["init", "-q"])
            .and_then(|()| git(root, &["add", "-A"]))
            .and_then(|()| git(root, &["commit", "-q", "--allow-empty", "-m", "the task"]))
            .map_err(|e| CliError::internal(format!("{}: {e}", root.display())))?;
    }
    Ok(())
}

/// The child `orca` for this trial: isolated from the suite (its environment names nothing of
/// it), approving as `eval`.
fn orca(setup: &Setup, root: &Path, log: &Path) -> Result<tokio::process::Command, CliError> {
    let out = std::fs::File::create(log)
        .map_err(|e| CliError::internal(format!("{}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| CliError::internal(format!("{}: {e}", log.display())))?;
    let mut cmd = tokio::process::Command::new(&setup.exe);
    cmd.arg("--root")
        .arg(root)
        .current_dir(root)
        .env("USER", "eval")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true);
    for key in &setup.trusted {
        cmd.arg("--trusted-key").arg(key);
    }
    Ok(cmd)
}

async fn init(setup: &Setup, root: &Path, log: &Path) -> Result<(), CliError> {
    let status = orca(setup, root, log)?
        .arg("init")
        .status()
        .await
        .map_err(|e| CliError::internal(format!("cannot start orca: {e}")))?;
    if !status.success() {
        return Err(CliError::internal(format!(
            "`orca init` in {} failed (see {})",
            root.display(),
            log.display()
        )));
    }
    if let Some(config) = &setup.config {
        let path = root.join(orca_store::STORE_DIR).join("config.toml");
        std::fs::write(&path, config)
            .map_err(|e| CliError::internal(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Runs trial `n` of `task` to its end and measures it.
pub(crate) async fn run(setup: &Setup, task: &Task, n: u32) -> Result<Trial, CliError> {
    let dir = trial_dir(&task.id, n);
    let root = setup.out.join(&dir);
    let side = setup.out.join(format!("{dir}.orca.log"));
    let check_log = setup.out.join(format!("{dir}.check.log"));
    if let Some(parent) = root.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| CliError::internal(format!("{}: {e}", parent.display())))?;
    }
    prepare(task, &root)?;
    let started = Instant::now();
    init(setup, &root, &side).await?;
    let mut cmd = orca(setup, &root, &side)?;
    cmd.args(["--json"]);
    match &task.plan {
        Some(plan) => {
            // A copy beside the trial, so the child's arguments name nothing of the suite.
            let copy = setup.out.join(format!("{dir}.plan.json"));
            std::fs::copy(plan, &copy)
                .map_err(|e| CliError::internal(format!("{}: {e}", plan.display())))?;
            cmd.arg("run").arg(copy);
        }
        None => {
            cmd.arg("ask").arg(&task.request);
        }
    }
    cmd.args(["--yes", "--on-failure", "stop"]);
    let mut child = cmd
        .spawn()
        .map_err(|e| CliError::internal(format!("cannot start orca: {e}")))?;
    let limit = Duration::from_secs(task.timeout_secs);
    if tokio::time::timeout(limit, child.wait()).await.is_err() {
        // Its watchdog ends the steps' process groups when it dies.
        let _ = child.kill().await;
    }
    let store = measure::open_store(&root, &setup.trusted)?;
    let measured = measure::measure_trial(&store, &side).await?;
    let status = match measured.completed {
        Some(run) => Some(measure::run_check(&task.check, &root, &check_log, run).await?),
        None => None,
    };
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Trial {
        task: task.id.clone(),
        trial: n,
        dir,
        wall_ms,
        figures: measure::with_check(measured, status),
    })
}
