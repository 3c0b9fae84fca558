//! What a step can reach through the descriptors it inherits and the key files orca reads, on
//! the real binary, in place and in a worktree (ADR 0041):
//!
//! * a step holding resource locks lists `/proc/self/fd` and writes to every descriptor from 3
//!   up that names a file — through the descriptor, and by opening `/proc/self/fd/N` again for
//!   writing; counted: the marker in any file under `.orca/` (goal 0). Control: without the
//!   sandbox the reopen lands in `.orca/locks/`, while the inherited descriptors themselves stay
//!   read-only;
//! * a step `base64`s and `cat`s the configured `api_key_file` and `env_file`; counted: the
//!   key's and the env file's private bytes, raw or base64, in any record under `.orca/` or in
//!   any output of orca (goal 0). Control: without the sandbox they land. A key file inside the
//!   project is refused: the run exits 2 naming it, nothing runs, and `doctor` says so.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::escape_support::{
    PLACES, Site, Step, base64, files, occurrences, pid_namespaces, place,
};

/// The step that writes to its descriptors. The marker is put together at run time, so that
/// the plan's own text (which orca records) never holds it.
fn fd_step(site: &Site, tag: &str) -> String {
    let out = site.mark(&format!("fds-{tag}")).display().to_string();
    format!(
        "MK=\"FD-\"\"MARKER-{tag}\"; n=0; w=0; r=0\n\
         for f in /proc/$$/fd/*; do\n\
           fd=${{f##*/}}\n\
           [ \"$fd\" -ge 3 ] 2>/dev/null || continue\n\
           t=$(readlink \"$f\")\n\
           echo \"$fd -> $t\" >> {out}.list\n\
           case \"$t\" in /*) ;; *) continue;; esac\n\
           n=$((n+1))\n\
           if ( eval \"echo \\$MK >&$fd\" ) 2>/dev/null; then w=$((w+1)); fi\n\
           if ( echo \"$MK\" >> /proc/self/fd/$fd ) 2>/dev/null; then r=$((r+1)); fi\n\
         done\n\
         echo \"$n $w $r\" > {out}\n"
    )
}

/// Runs the descriptor step; (file descriptors found, writes through them, reopened writes,
/// marker occurrences in `.orca/`).
fn through_descriptors(
    site: &Site,
    isolation: Option<&str>,
    env: &[(&str, &str)],
    tag: &str,
    via_model: bool,
) -> [usize; 4] {
    let step = Step {
        locks: &["db", "cache"],
        ..Step::new("fds", fd_step(site, tag), isolation)
    };
    let plan = site.plan(tag, &[if via_model { step.via_model() } else { step }]);
    let (c, v) = site.json(env, &["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v}");
    let seen = site.read_mark(&format!("fds-{tag}"));
    let n: Vec<usize> = seen
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(n.len(), 3, "{seen:?}");
    let marker = format!("FD-MARKER-{tag}");
    let landed: usize = site
        .records()
        .iter()
        .map(|(_, bytes)| occurrences(bytes, marker.as_bytes()))
        .sum();
    [n[0], n[1], n[2], landed]
}

#[test]
fn writes_through_inherited_descriptors_never_reach_the_records() {
    for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let site = Site::new(true);
        let [found, written, reopened, landed] =
            through_descriptors(&site, isolation, &[], "k", via_model);
        println!(
            "descriptors {} ({}): {found} file descriptors from 3 up ({:?}), writes through them {written}, reopened for writing {reopened}, markers in .orca {landed}",
            place(isolation),
            if via_model {
                "a scripted model's run_command"
            } else {
                "a shell step"
            },
            site.read_mark("fds-k.list").replace('\n', "; ")
        );
        // In a PID namespace of its own a step gets no lock descriptor at all (orca holds the
        // locks); without one it gets them read-only.
        if !pid_namespaces(&site.root) && !via_model {
            assert!(found >= 2, "the step inherited no lock descriptor");
        }
        assert_eq!((written, landed), (0, 0));
    }
    let site = Site::new(true);
    let [found, written, reopened, landed] =
        through_descriptors(&site, None, &[("ORCA_SANDBOX", "off")], "off", false);
    println!(
        "control without the sandbox: {found} file descriptors, writes through them {written}, reopened for writing {reopened}, markers in .orca {landed}"
    );
    assert!(found >= 2, "the control inherited no lock descriptor");
    assert_eq!(written, 0, "a lock descriptor was writable");
    assert!(landed >= 1, "the control's reopened writes did not land");
}

const KEY: &str = "sk-keyfile-7f3a9c2e5b1d8046aa";
const ENV_SECRET: &str = "envfile-private-comment-5e8d1c";

/// A private file (0600).
fn private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A site whose config names a key file and an env file, both outside the project (or the
/// key file at `key_in` inside it).
fn keyed_site(key_in: Option<&str>) -> (Site, std::path::PathBuf, std::path::PathBuf) {
    let site = Site::new(true);
    let key = match key_in {
        Some(rel) => site.root.join(rel),
        None => site.outside.join("openai.key"),
    };
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    private(&key, &format!("{KEY}\n"));
    let env_file = site.outside.join("step.env");
    private(
        &env_file,
        &format!("# {ENV_SECRET}\nDEPLOY_REGION=eu-west-1\n"),
    );
    std::fs::write(
        site.root.join(".orca/config.toml"),
        format!(
            "env_file = \"{}\"\n\n[agents.coder]\nbackend = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_file = \"{}\"\n",
            env_file.display(),
            key_in.map_or_else(|| key.display().to_string(), str::to_owned)
        ),
    )
    .unwrap();
    (site, key, env_file)
}

/// Bytes of the key and the env file's private line, raw or base64, in the records and in
/// `output`.
fn key_bytes(site: &Site, output: &[u8]) -> usize {
    let needles: Vec<Vec<u8>> = [
        KEY.to_owned(),
        base64(format!("{KEY}\n").as_bytes()),
        base64(KEY.as_bytes()),
        ENV_SECRET.to_owned(),
        base64(format!("# {ENV_SECRET}\nDEPLOY_REGION=eu-west-1\n").as_bytes()),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    let mut haystacks: Vec<Vec<u8>> = site.records().into_iter().map(|(_, b)| b).collect();
    haystacks.push(output.to_vec());
    haystacks.extend(files(&site.root.join("marks")).into_iter().map(|(_, b)| b));
    haystacks
        .iter()
        .map(|h| {
            needles
                .iter()
                // The base64 of a file wraps at 76 characters: a prefix is enough to find it.
                .map(|n| occurrences(h, &n[..n.len().min(40)]))
                .sum::<usize>()
        })
        .sum()
}

fn read_keys(site: &Site, key: &std::path::Path, env_file: &std::path::Path) -> String {
    let k = key.display();
    let e = env_file.display();
    let copy = site.mark("copied").display().to_string();
    format!(
        "base64 {k}; cat {k}; base64 {e}; cat {e}; cp {k} {copy}.key; cp {e} {copy}.env; \
         base64 /proc/self/root{k}; echo ran > {copy}.ran; true"
    )
}

#[test]
fn key_and_env_files_are_out_of_reach() {
    for (isolation, via_model) in PLACES.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let (site, key, env_file) = keyed_site(None);
        let step = Step::new("read-keys", read_keys(&site, &key, &env_file), isolation);
        let plan = site.plan("keys", &[if via_model { step.via_model() } else { step }]);
        let out = site.orca(&[], &["--json", "run", &plan, "--yes"]);
        assert!(out.status.success(), "{out:?}");
        let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        assert!(
            site.mark("copied.ran").exists(),
            "the reading step did not run"
        );
        let leaked = key_bytes(&site, &all);
        println!(
            "key files {} ({}): key and env-file bytes (raw or base64) in records, output and the step's copies: {leaked}",
            place(isolation),
            if via_model {
                "a scripted model's run_command"
            } else {
                "a shell step"
            }
        );
        assert_eq!(leaked, 0);
    }
    // Control: without the sandbox the step reads them, and they land.
    let (site, key, env_file) = keyed_site(None);
    let plan = site.plan(
        "keys",
        &[Step::new(
            "read-keys",
            read_keys(&site, &key, &env_file),
            None,
        )],
    );
    let out = site.orca(
        &[("ORCA_SANDBOX", "off")],
        &["--json", "run", &plan, "--yes"],
    );
    assert!(out.status.success(), "{out:?}");
    let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    let leaked = key_bytes(&site, &all);
    println!("control without the sandbox: key and env-file bytes found {leaked}");
    assert!(leaked > 0, "the control read no key");
}

#[test]
fn a_key_file_inside_the_project_is_refused() {
    let (site, _, _) = keyed_site(Some("keys/openai.key"));
    let plan = site.plan(
        "refused",
        &[Step::new(
            "would-run",
            format!("echo ran > {}", site.mark("ran").display()),
            None,
        )],
    );
    let out = site.orca(&[], &["run", &plan, "--yes"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let ran = usize::from(site.mark("ran").exists());
    println!(
        "a key file inside the project: exit {:?}, steps run {ran}",
        out.status.code()
    );
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agents.coder.api_key_file") && err.contains("inside the project"),
        "{err}"
    );
    assert_eq!(ran, 0);
    let (c, v) = site.json(&[], &["doctor"]);
    // The key file inside the project is a problem: exit 7.
    assert_eq!(c, 7, "{v}");
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["detail"].as_str().unwrap().contains("api_key_file"))
        .cloned()
        .unwrap_or_else(|| panic!("no secret file check: {v}"));
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("refuses"),
        "{check}"
    );
}
