//! A step plants programs in the repository's git state — `core.fsmonitor`, hooks (in
//! `.git/hooks`, through `core.hooksPath`, as `hook.<name>.command`), filter, diff and merge
//! drivers selected by `.gitattributes` and `.git/info/attributes`, `diff.external`, a pager,
//! an editor, a signing program, the user's global config — and tries to rename `.git` or
//! repoint a worktree's `.git` file (ADR 0041). Each planted program appends its name to a
//! file outside the project, which no step can write. Counted, in place and in a worktree:
//!
//! * plants that landed in the shared git state (goal 0),
//! * planted programs run by orca during the whole run, its worktree merges included (goal 0),
//! * planted programs run by the user's next `git status`, `git diff` and `git log -p`
//!   (goal 0),
//! * branches made beside the checked-out one, or a branch beside it moved, deleted or
//!   overwritten, as the user's git sees them after the run (goal 0: in place, the new ones are
//!   moved out of `refs/` when the step's process ends; the existing ones are read-only).
//!
//! The control runs the same plan with `ORCA_SANDBOX=off` in another project: the plants land
//! and the user's next git commands run them (so the test can fail), while orca's own git still
//! runs none of them (its hardened configuration alone holds).

#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stdout, reason = "tests print what they counted")]

use std::path::Path;

use crate::escape_support::{PLACES, Site, Step, place};

/// The kinds of planted programs; each one is a script `outside/bin/<kind>`.
const KINDS: &[&str] = &[
    "fsmonitor",
    "hook",
    "clean",
    "smudge",
    "process",
    "textconv",
    "diffcmd",
    "external",
    "mergedrv",
    "pager",
    "editor",
    "gpg",
    "confighook",
];

/// The hooks planted in `.git/hooks` and in a `core.hooksPath` directory.
const HOOKS: &[&str] = &[
    "post-checkout",
    "post-merge",
    "post-commit",
    "pre-commit",
    "commit-msg",
    "reference-transaction",
    "post-index-change",
    "post-rewrite",
    "pre-auto-gc",
    "fsmonitor-watchman",
];

/// Makes the planted programs (outside the project, where steps cannot write) and the log
/// they append to.
fn programs(site: &Site) -> std::path::PathBuf {
    let bin = site.outside.join("bin");
    let hooks = site.outside.join("hooks");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&hooks).unwrap();
    let log = site.outside.join("ran.log");
    let write = |path: &Path, text: String| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for kind in KINDS {
        let pass = match *kind {
            "clean" | "smudge" | "pager" => "exec cat",
            "textconv" => "exec cat \"$1\"",
            _ => "exit 0",
        };
        write(
            &bin.join(kind),
            format!(
                "#!/bin/sh\necho \"{kind} ${{ORCA_EXECUTION_ID:+by-the-step}} $*\" >> '{}'\n{pass}\n",
                log.display()
            ),
        );
    }
    for hook in HOOKS {
        write(
            &hooks.join(hook),
            format!(
                "#!/bin/sh\necho \"hooks-path {hook} ${{ORCA_EXECUTION_ID:+by-the-step}}\" >> '{}'\n",
                log.display()
            ),
        );
    }
    log
}

/// The planting step: each try in a subshell, counted when it succeeds (and listed), then an
/// ordinary `.gitattributes` (the step's own content) selecting the planted drivers.
fn plant_script(site: &Site, tag: &str) -> String {
    let o = site.outside.join("bin").display().to_string();
    let hooks = site.outside.join("hooks").display().to_string();
    let result = site.mark(&format!("plants-{tag}")).display().to_string();
    let mut tries: Vec<String> = vec![
        format!("git config core.fsmonitor {o}/fsmonitor"),
        format!("git config core.hooksPath {hooks}"),
        format!("git config filter.evil.clean {o}/clean"),
        format!("git config filter.evil.smudge {o}/smudge"),
        format!("git config filter.evil.process {o}/process"),
        format!("git config diff.evil.textconv {o}/textconv"),
        format!("git config diff.evil.command {o}/diffcmd"),
        format!("git config diff.external {o}/external"),
        format!("git config merge.evil.driver '{o}/mergedrv %O %A %B'"),
        format!("git config core.pager {o}/pager"),
        format!("git config core.editor {o}/editor"),
        format!("git config log.showSignature true && git config gpg.program {o}/gpg"),
        format!(
            "git config hook.evil.command {o}/confighook && git config hook.evil.event post-checkout"
        ),
        format!("printf '[core]\\n\\tfsmonitor = {o}/fsmonitor\\n' >> \"$G/config\""),
        format!("git config --global core.fsmonitor {o}/fsmonitor"),
        format!("git config --global filter.evil.clean {o}/clean"),
        "mkdir -p \"$G/info\" && echo '* filter=evil diff=evil merge=evil' >> \"$G/info/attributes\""
            .to_owned(),
        "git update-ref refs/tags/planted HEAD".to_owned(),
        "git update-ref refs/orca/planted HEAD".to_owned(),
        // A branch the user has beside the checked-out one: moved, deleted, overwritten.
        "git update-ref refs/heads/sibling \"$(git commit-tree -m moved 'HEAD^{tree}')\"".to_owned(),
        "git branch -D sibling".to_owned(),
        "echo 0000000000000000000000000000000000000000 > \"$G/refs/heads/sibling\"".to_owned(),
        "mv \"$G/refs/heads/sibling\" \"$G/refs/heads/sibling.moved\"".to_owned(),
        // Renamed away (then back, so that a control run goes on): a pinned directory cannot.
        "mv \"$G\" \"$G.moved\" && mv \"$G.moved\" \"$G\"".to_owned(),
        // A worktree's .git file pointed elsewhere (then restored): read-only.
        "test -f .git && cp .git \"$R.gitfile\" && echo 'gitdir: /nonexistent' > .git && cp \"$R.gitfile\" .git"
            .to_owned(),
    ];
    for hook in HOOKS {
        tries.push(format!(
            "mkdir -p \"$G/hooks\" && cp {o}/hook \"$G/hooks/{hook}\" && chmod +x \"$G/hooks/{hook}\""
        ));
    }
    let mut script = format!(
        "R='{result}'\nG=$(git rev-parse --path-format=absolute --git-common-dir)\nok=0\ntries=0\n"
    );
    for t in &tries {
        let quoted = t.replace('\'', "'\\''");
        script.push_str(&format!(
            "tries=$((tries+1)); if ( eval '{quoted}' ) >/dev/null 2>&1; then ok=$((ok+1)); echo 'planted: {quoted}' >> \"$R.log\"; fi\n"
        ));
    }
    // Branches made beside the checked-out one (in place its directory stays writable, so
    // these succeed), counted from outside after the run: moved out of refs/ by orca.
    for t in [
        "git branch planted-beside-main",
        "git update-ref refs/heads/orca-new/planted HEAD",
    ] {
        script.push_str(&format!("{t} >/dev/null 2>&1\n"));
    }
    script.push_str("echo '* filter=evil diff=evil merge=evil' > .gitattributes\n");
    script.push_str("echo planted > planted.txt\n");
    script.push_str("echo \"$ok $tries\" > \"$R\"\n");
    script
}

/// What one run let through.
#[derive(Debug, Default)]
struct Counts {
    planted: usize,
    tries: usize,
    residual: usize,
    by_orca: usize,
    by_user: usize,
}

/// The planted programs run so far, but those the step's own processes ran (their
/// environment names the execution): a step may run what it likes itself, inside its sandbox.
fn runs(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("by-the-step"))
        .count()
}

/// What `name` points to in the user's repository, as the user's git reads it.
fn ref_of(site: &Site, name: &str) -> String {
    String::from_utf8_lossy(
        &site
            .user_git(&["rev-parse", "--verify", "--quiet", name])
            .stdout,
    )
    .trim()
    .to_owned()
}

/// Branches named `*planted*` the user's git sees after the run.
fn planted_branches(site: &Site) -> usize {
    let out = site.user_git(&["for-each-ref", "--format=%(refname)", "refs/heads"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|r| r.contains("planted"))
        .count()
}

/// Runs the planting plan in `site` (`env`: the sandbox), then the user's next git commands.
fn attack(
    site: &Site,
    isolation: Option<&str>,
    env: &[(&str, &str)],
    tag: &str,
    via_model: bool,
) -> Counts {
    let log = programs(site);
    assert!(site.user_git(&["branch", "sibling"]).status.success());
    let sibling = ref_of(site, "refs/heads/sibling");
    let plant = Step::new("plant", plant_script(site, tag), isolation);
    let plan = site.plan(
        tag,
        &[
            if via_model { plant.via_model() } else { plant },
            Step {
                after: &["plant"],
                ..Step::new("after", "echo after > after.txt".to_owned(), isolation)
            },
        ],
    );
    let (c, v) = site.json(env, &["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v}");
    let by_orca = runs(&log);
    for args in [&["status"][..], &["diff"], &["log", "-p", "-3", "--all"]] {
        let _ = site.user_git(args);
    }
    let result = site.read_mark(&format!("plants-{tag}"));
    let mut fields = result.split_whitespace().map(|f| f.parse().unwrap_or(0));
    let (planted, tries) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    assert!(tries > 30, "the planting step did not run: {result:?} {v}");
    let counts = Counts {
        planted,
        tries,
        residual: planted_branches(site)
            + usize::from(ref_of(site, "refs/heads/sibling") != sibling),
        by_orca,
        by_user: runs(&log) - by_orca,
    };
    if counts.planted + counts.by_orca + counts.by_user > 0 {
        println!(
            "{tag}: landed {:?}; ran {:?}",
            site.read_mark(&format!("plants-{tag}.log")),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    counts
}

fn planted_git_programs_never_run(isolation: Option<&str>, via_model: bool) {
    let tag = match (isolation.is_some(), via_model) {
        (false, false) => "ip",
        (true, false) => "wt",
        (false, true) => "ip-model",
        (true, true) => "wt-model",
    };
    let by = if via_model {
        "a scripted model's run_command"
    } else {
        "a shell step"
    };
    let site = Site::new(true);
    let c = attack(&site, isolation, &[], tag, via_model);
    println!(
        "git plants by {by} {}: {} of {} landed in the shared git state, run by orca {}, run by the user's next git commands {}, branches made beside the checked-out one or a sibling branch changed, seen by the user's git afterwards {}",
        place(isolation),
        c.planted,
        c.tries,
        c.by_orca,
        c.by_user,
        c.residual
    );
    let control = Site::new(true);
    let k = attack(
        &control,
        isolation,
        &[("ORCA_SANDBOX", "off")],
        &format!("{tag}-off"),
        via_model,
    );
    println!(
        "control without the sandbox {}: {} of {} landed, run by orca {}, run by the user's next git commands {}, branches made beside or a sibling changed {}",
        place(isolation),
        k.planted,
        k.tries,
        k.by_orca,
        k.by_user,
        k.residual
    );
    assert!(
        k.planted > 20 && k.by_user > 0 && k.residual > 0,
        "the control's plants did not fire: {k:?}"
    );
    assert_eq!(k.by_orca, 0, "orca's own git ran a plant: {k:?}");
    if isolation.is_none() {
        // Moved, not lost: the branches made beside are kept out of refs/.
        let kept = crate::escape_support::files(&site.root.join(".git/orca-quarantine"));
        let kept = kept
            .iter()
            .filter(|(p, _)| p.to_string_lossy().contains("planted"))
            .count();
        assert_eq!(kept, 2, "the branches made beside were not kept");
    }
    assert_eq!(
        (c.planted, c.by_orca, c.by_user, c.residual),
        (0, 0, 0, 0),
        "{c:?}"
    );
}

#[test]
fn planted_git_programs_never_run_in_place() {
    planted_git_programs_never_run(PLACES[0], false);
}

#[test]
fn planted_git_programs_never_run_from_a_worktree() {
    planted_git_programs_never_run(PLACES[1], false);
}

#[test]
fn planted_git_programs_never_run_when_a_model_plants_them_in_place() {
    planted_git_programs_never_run(PLACES[0], true);
}

#[test]
fn planted_git_programs_never_run_when_a_model_plants_them_from_a_worktree() {
    planted_git_programs_never_run(PLACES[1], true);
}
