//! A step's processes, seen from outside, on the real binary (ADR 0041): in place and in a
//! worktree, a step leaves a `setsid` daemon and a double-forked one, each writing a heartbeat;
//! counted 5 s after the step completes, after `kill -9` of orca, after `orca exec stop`, after
//! a timeout, `orca exec cancel` and Ctrl-C (goal 0 each), with the resume that follows a kill
//! or a stop running no second copy beside an old one (goal 0). A step also looks for orca in its `/proc` — orca's pid, any process whose program is
//! orca, any command line holding orca's arguments (goal 0). Controls: with `ORCA_SANDBOX=off`
//! the daemons survive and orca is visible, so the counts can fail.

#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stdout, reason = "tests print what they counted")]

use std::time::{Duration, Instant};

use crate::escape_support::{PLACES, Site, Step, allow_no_sandbox, pid_namespaces, place};
use crate::procs::step_processes;

/// Starts a `setsid` daemon and a double-forked one, each appending to `beat` every 50 ms.
fn daemons(beat: &str) -> String {
    format!(
        "setsid sh -c 'while :; do echo s >> {beat}; sleep 0.05; done' >/dev/null 2>&1 < /dev/null &\n\
         ( ( while :; do echo d >> {beat}; sleep 0.05; done ) >/dev/null 2>&1 < /dev/null & )\n"
    )
}

fn beats(site: &Site, name: &str) -> usize {
    site.read_mark(name).lines().count()
}

/// Processes of the project's steps alive 5 s after `since`, and heartbeats written in the
/// last second of those 5.
fn alive_after_5s(site: &Site, beat: &str, since: Instant) -> (usize, usize) {
    let wait = Duration::from_secs(4).saturating_sub(since.elapsed());
    std::thread::sleep(wait);
    let before = beats(site, beat);
    std::thread::sleep(Duration::from_secs(1));
    (step_processes(&site.root).len(), beats(site, beat) - before)
}

/// Kills what a control run left.
fn kill_leftovers(site: &Site) {
    for pid in step_processes(&site.root) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

fn must_be_zero(what: &str, count: usize, site: &Site) {
    if pid_namespaces(&site.root) || !allow_no_sandbox() {
        assert_eq!(count, 0, "{what}");
    }
}

#[test]
fn daemons_die_when_their_step_completes() {
    for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let site = Site::new(true);
        let beat = site.mark("beat").display().to_string();
        let step = Step::new(
            "leave-daemons",
            format!(
                "{}sleep 0.3; echo up > {}",
                daemons(&beat),
                site.mark("up").display()
            ),
            isolation,
        );
        let plan = site.plan(
            "complete",
            &[if via_model { step.via_model() } else { step }],
        );
        let (c, v) = site.json(&[], &["run", &plan, "--yes"]);
        assert_eq!(c, 0, "{v}");
        let done = Instant::now();
        assert!(beats(&site, "beat") > 0, "the daemons never ran");
        let (alive, beating) = alive_after_5s(&site, "beat", done);
        println!(
            "daemons {} ({}): step processes alive 5 s after the step completed: {alive}, heartbeats in the last second: {beating}",
            place(isolation),
            if via_model {
                "a scripted model's run_command"
            } else {
                "a shell step"
            }
        );
        must_be_zero("daemons outlived their step", alive + beating, &site);
    }
    // Control: without the sandbox (no PID namespace) the daemons outlive the step.
    let site = Site::new(true);
    let beat = site.mark("beat").display().to_string();
    let plan = site.plan(
        "control",
        &[Step::new(
            "leave-daemons",
            format!("{}sleep 0.3", daemons(&beat)),
            None,
        )],
    );
    let (c, v) = site.json(&[("ORCA_SANDBOX", "off")], &["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v}");
    let (alive, beating) = alive_after_5s(&site, "beat", Instant::now());
    kill_leftovers(&site);
    println!(
        "control without the sandbox: step processes alive 5 s after the step completed: {alive}, heartbeats in the last second: {beating}"
    );
    // Without a PID namespace the double-forked daemon stays in the step's process group and
    // dies with it; the `setsid` one escapes (its shell, and at moments its `sleep`).
    assert!(alive >= 1 && beating > 0, "the control's daemons died");
}

/// The step of the kill and stop runs: the first attempt leaves daemons and waits; the next
/// one checks that the old heartbeat has stopped (else `overlap`) and completes.
fn long_step(site: &Site) -> String {
    let m = |n: &str| site.mark(n).display().to_string();
    format!(
        "if [ -e {gen} ]; then\n\
           n=$(wc -l < {beat}); sleep 0.5; k=$(wc -l < {beat})\n\
           if [ \"$n\" != \"$k\" ]; then echo overlap >> {overlap}; fi\n\
           echo second >> {done}\n\
         else\n\
           touch {gen}\n{}\
           sleep 0.3; echo up > {up}; sleep 120\n\
         fi\n",
        daemons(&m("beat")),
        gen = m("gen"),
        beat = m("beat"),
        overlap = m("overlap"),
        done = m("done"),
        up = m("up"),
    )
}

fn ended_then_resumed(stop: bool) {
    let how = if stop { "exec stop" } else { "kill -9 of orca" };
    for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let site = Site::new(true);
        let step = Step::new("long", long_step(&site), isolation);
        let plan = site.plan("long", &[if via_model { step.via_model() } else { step }]);
        let mut run = site.spawn(&[], &["run", &plan, "--yes"]);
        site.wait_mark("up", "up");
        let exec = site.only_exec();
        if stop {
            let (c, v) = site.json(&[], &["exec", "stop", &exec]);
            assert_eq!(c, 0, "{v}");
            let _ = run.wait();
        } else {
            run.kill().unwrap();
            let _ = run.wait();
        }
        let (alive, beating) = alive_after_5s(&site, "beat", Instant::now());
        println!(
            "daemons {} ({}): step processes alive 5 s after {how}: {alive}, heartbeats in the last second: {beating}",
            place(isolation),
            by(via_model)
        );
        must_be_zero(&format!("daemons outlived {how}"), alive + beating, &site);
        kill_leftovers(&site);
        let (c, v) = site.json(&[], &["exec", "resume", &exec]);
        assert_eq!(c, 0, "{v}");
        assert_eq!(site.read_mark("done").lines().count(), 1, "{v}");
        let overlaps = site.read_mark("overlap").lines().count();
        let left = step_processes(&site.root).len();
        println!(
            "resume after {how} {} ({}): old copies still running beside the new attempt {overlaps}, step processes left after it {left}",
            place(isolation),
            by(via_model)
        );
        must_be_zero("a second copy ran beside the first", overlaps + left, &site);
    }
}

#[test]
fn daemons_die_with_orca_killed_and_the_resume_runs_one_copy() {
    ended_then_resumed(false);
}

#[test]
fn daemons_die_with_exec_stop_and_the_resume_runs_one_copy() {
    ended_then_resumed(true);
}

/// Who ran the step's command, for what the tests print.
const fn by(via_model: bool) -> &'static str {
    if via_model {
        "a scripted model's run_command"
    } else {
        "a shell step"
    }
}

/// How an attempt is ended while its daemons run.
#[derive(Debug, Clone, Copy)]
enum End {
    Timeout,
    Cancel,
    CtrlC,
}

#[test]
fn daemons_die_with_a_timeout_exec_cancel_and_ctrl_c() {
    for end in [End::Timeout, End::Cancel, End::CtrlC] {
        for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
            let site = Site::new(true);
            let beat = site.mark("beat").display().to_string();
            let command = format!(
                "{}sleep 0.3; echo up > {}; sleep 120",
                daemons(&beat),
                site.mark("up").display()
            );
            let step = Step {
                timeout_secs: matches!(end, End::Timeout).then_some(2),
                ..Step::new("long", command, isolation)
            };
            let plan = site.plan("ended", &[if via_model { step.via_model() } else { step }]);
            let run = site.spawn(&[], &["run", &plan, "--yes", "--kill-grace", "1"]);
            site.wait_mark("up", "up");
            match end {
                End::Timeout => {}
                End::Cancel => {
                    let exec = site.only_exec();
                    let (c, v) = site.json(&[], &["exec", "cancel", &exec]);
                    assert_eq!(c, 0, "{v}");
                }
                End::CtrlC => {
                    let status = std::process::Command::new("kill")
                        .args(["-INT", &run.id().to_string()])
                        .status()
                        .unwrap();
                    assert!(status.success());
                }
            }
            let out = run.wait_with_output().unwrap();
            // (A scripted model's next attempt replays its script from where it was: after a
            // timeout its retry submits at once, and the run completes.)
            if !(via_model && matches!(end, End::Timeout)) {
                assert!(!out.status.success(), "{out:?}");
            }
            let (alive, beating) = alive_after_5s(&site, "beat", Instant::now());
            println!(
                "daemons {} ({}): step processes alive 5 s after {end:?}: {alive}, heartbeats in the last second: {beating}",
                place(isolation),
                by(via_model)
            );
            must_be_zero(&format!("daemons outlived {end:?}"), alive + beating, &site);
            kill_leftovers(&site);
        }
    }
}

/// The step that looks for orca: orca's pid (told through a marker), programs named orca, and
/// command lines holding orca's `--root` argument (spelled apart in the script, so that the
/// step's own command line does not hold it).
fn looking_step(site: &Site, tag: &str) -> String {
    let m = |n: &str| site.mark(n).display().to_string();
    format!(
        "while [ ! -s {pid} ]; do sleep 0.05; done\n\
         P=$(cat {pid}); v=0; a=0; r=0\n\
         if [ -e /proc/$P ]; then v=$((v+1)); fi\n\
         N=\"--ro\"\"ot\"\n\
         for c in /proc/[0-9]*/cmdline; do\n\
           a0=$(tr '\\000' '\\n' < $c 2>/dev/null | head -n 1)\n\
           case \"$a0\" in */orca|orca) a=$((a+1));; esac\n\
           if tr '\\000' '\\n' < $c 2>/dev/null | grep -qx -- \"$N\"; then r=$((r+1)); fi\n\
         done\n\
         t=$(ls -d /proc/[0-9]* | wc -l)\n\
         ps -e -o pid=,args= > {ps} 2>&1\n\
         echo \"$v $a $r $t\" > {out}\n",
        pid = m("orca.pid"),
        ps = m(&format!("ps-{tag}")),
        out = m(&format!("visible-{tag}")),
    )
}

/// Runs the looking step; orca's pid visible (0/1), processes running orca, command lines
/// holding orca's arguments, and all processes the step saw.
fn look(
    site: &Site,
    isolation: Option<&str>,
    env: &[(&str, &str)],
    tag: &str,
    via_model: bool,
) -> [usize; 4] {
    let step = Step::new("look", looking_step(site, tag), isolation);
    let plan = site.plan(tag, &[if via_model { step.via_model() } else { step }]);
    let run = site.spawn(env, &["run", &plan, "--yes"]);
    std::fs::write(site.mark("orca.pid"), run.id().to_string()).unwrap();
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen = site.read_mark(&format!("visible-{tag}"));
    let n: Vec<usize> = seen
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(n.len(), 4, "{seen:?}");
    [n[0], n[1], n[2], n[3]]
}

#[test]
fn a_step_sees_no_process_of_orcas() {
    for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let site = Site::new(true);
        let [pid, programs, args, all] = look(&site, isolation, &[], "kernel", via_model);
        println!(
            "visibility {} ({}): orca's pid visible {pid}, processes running orca {programs}, command lines with orca's arguments {args} (processes seen in all: {all}; ps: {:?})",
            place(isolation),
            if via_model {
                "a scripted model's run_command"
            } else {
                "a shell step"
            },
            site.read_mark("ps-kernel")
        );
        must_be_zero("the step saw orca", pid + programs + args, &site);
    }
    let site = Site::new(true);
    let [pid, programs, args, all] = look(&site, None, &[("ORCA_SANDBOX", "off")], "off", false);
    println!(
        "control without the sandbox: orca's pid visible {pid}, processes running orca {programs}, command lines with orca's arguments {args} (processes seen in all: {all})"
    );
    assert!(pid + programs + args >= 3, "the control saw no orca");
}
