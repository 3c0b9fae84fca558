//! Where the kernel refuses PID namespaces, orca says so and falls back to process groups
//! (ADR 0041), shown on the real binary in a kernel that refuses them: orca runs in a user
//! namespace whose `user.max_pid_namespaces` is 0 (user and mount namespaces still work, so the
//! rest of the sandbox holds). Counted: `orca doctor` and the run's audit entry naming the
//! fallback (goal: both), a step's write into `.orca/` (goal 0: Landlock and the mounts still
//! confine it), a daemon left in the step's process group alive 5 s after the step (goal 0),
//! and — the documented limit of process groups — a `setsid` daemon alive (1, then killed).

#![expect(clippy::unwrap_used, reason = "tests")]

use std::process::{Command, Output};
use std::time::Duration;

use crate::escape_support::{Site, Step, allow_no_sandbox};
use crate::procs::{sandbox_entry, step_processes};

/// `cmd`, run in a new user namespace (as its root) where no PID namespace can be made.
fn without_pid_namespaces(cmd: &Command) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_pid_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    wrapped
}

fn run(site: &Site, args: &[&str]) -> Output {
    without_pid_namespaces(&site.command(&[], args))
        .output()
        .unwrap()
}

/// Whether this kernel lets a user namespace refuse PID namespaces to what it runs.
fn can_refuse() -> bool {
    Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg(
            "echo 0 > /proc/sys/user/max_pid_namespaces && ! unshare --pid --fork true 2>/dev/null",
        )
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn without_pid_namespaces_orca_says_so_and_keeps_process_groups() {
    if !can_refuse() {
        assert!(
            allow_no_sandbox(),
            "this kernel cannot refuse PID namespaces inside a user namespace"
        );
        println!("SKIPPED: no user namespaces here");
        return;
    }
    let site = Site::new(false);
    let doctor = run(&site, &["doctor"]);
    let said = String::from_utf8_lossy(&doctor.stdout).into_owned()
        + &String::from_utf8_lossy(&doctor.stderr);
    let doctor_says = said.contains("process groups only");

    let beat = site.mark("beat").display().to_string();
    let grouped = site.mark("grouped").display().to_string();
    let script = format!(
        "setsid sh -c 'while :; do echo s >> {beat}; sleep 0.05; done' >/dev/null 2>&1 < /dev/null &\n\
         ( ( while :; do echo g >> {grouped}; sleep 0.05; done ) >/dev/null 2>&1 < /dev/null & )\n\
         echo planted > .orca/planted 2>/dev/null\n\
         sleep 0.3; echo ran > {}",
        site.mark("ran").display()
    );
    let plan = site.plan("fallback", &[Step::new("leave-daemons", script, None)]);
    let out = run(&site, &["--json", "run", &plan, "--yes"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(site.read_mark("ran").trim(), "ran", "the step did not run");
    let entry = sandbox_entry(&site.root).unwrap_or_default();
    let audit_says = entry["data"]["pid_namespace"] != true
        && entry["data"]["pid_namespace_unavailable"].is_string();
    let written = usize::from(site.root.join(".orca/planted").exists());
    std::thread::sleep(Duration::from_secs(4));
    let count = |name: &str| site.read_mark(name).lines().count();
    let (g0, s0) = (count("grouped"), count("beat"));
    std::thread::sleep(Duration::from_secs(1));
    let (grouped_beats, setsid_beats) = (count("grouped") - g0, count("beat") - s0);
    let left = step_processes(&site.root);
    for pid in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    println!(
        "PID namespaces refused: doctor says so {doctor_says}, audit says so {audit_says} ({}); writes into .orca/ {written}; heartbeats of the daemon in the step's group 5 s after {grouped_beats}; of the setsid daemon {setsid_beats} (the documented limit; {} processes killed)",
        entry["data"]["pid_namespace_unavailable"],
        left.len()
    );
    assert!(doctor_says, "doctor did not say so: {said}");
    assert!(audit_says, "the audit did not say so: {entry}");
    assert_eq!((written, grouped_beats), (0, 0));
    assert!(
        setsid_beats > 0,
        "the control: a setsid daemon outlives a process group"
    );
}
