//! `orca serve` and a result the human accepts: the execution page shows each step's diff,
//! escaped (a step wrote a file named `<script>` holding HTML); the inbox lists the result
//! with an Accept / Discard form bound to its tree; a result that moved after the page was
//! shown is refused with nothing changed, the current one is accepted into the user's branch,
//! and a second acceptance is refused.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use crate::web_support;
use crate::worktrees::git;

use web_support::{Project, Server, client, get, nonce, plan, post};

/// A project in a git repository with a completed execution whose worktree step wrote a file
/// named `<script>` (HTML inside) and changed `shared.txt`; returns it and the execution.
pub(crate) fn project_with_a_result() -> (Project, String) {
    let p = Project::new();
    std::fs::write(p.root.join("shared.txt"), "one\ntwo\n").unwrap();
    std::fs::write(p.root.join(".gitignore"), ".orca/\n").unwrap();
    git(&p.root, &["init", "--quiet", "--initial-branch=main"]);
    git(&p.root, &["add", "--all"]);
    git(&p.root, &["commit", "--quiet", "-m", "base"]);
    let mut doc = plan(&[(
        "hostile",
        "printf '<script>alert(1)</script>\\n<b>bold</b>\\n' > '<script>' && printf 'one\\n<i>two</i>\\n' > shared.txt",
        &[],
    )]);
    doc["steps"][0]["isolation"] = serde_json::json!("worktree");
    let id = p.proposal("hostile", &doc);
    let out = p.orca(&["--json", "run", &id, "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (p, v["execution_id"].as_str().unwrap().to_owned())
}

fn field(page: &str, name: &str) -> String {
    let key = format!("name=\"{name}\" value=\"");
    let at = page
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} field in {page}"))
        + key.len();
    page[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_diff_is_escaped_and_accepting_is_bound_to_the_tree_shown() {
    let (p, exec) = project_with_a_result();
    let token = p.token("me");
    let server = Server::start(&p, &[]);
    let c = client();
    let main_before = git(&p.root, &["rev-parse", "main"]);

    let (status, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<pre class=\"diff\">"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(page.contains("&lt;i&gt;two&lt;/i&gt;"), "{page}");
    let raw = ["<script>alert", "<b>bold", "<i>two", "<script>"]
        .iter()
        .filter(|bad| page.contains(**bad))
        .count();
    println!("unescaped fragments of the step's output in the page: {raw}");
    assert_eq!(raw, 0, "{page}");

    let (status, inbox) = get(&c, &server.url("/inbox"), &token).await;
    assert_eq!(status, 200);
    assert!(inbox.contains("result waiting for acceptance"), "{inbox}");
    let action = format!("/executions/{exec}/accept");
    let shown_tree = field(&inbox, "tree");
    let shown_nonce = nonce(&inbox, Some(&action));

    // The integration branch moves after the inbox was shown.
    let branch = format!("refs/heads/orca/{exec}");
    let tip = git(&p.root, &["rev-parse", &branch]);
    std::fs::write(p.root.join("extra.txt"), "x\n").unwrap();
    let blob = git(&p.root, &["hash-object", "-w", "extra.txt"]);
    std::fs::remove_file(p.root.join("extra.txt")).unwrap();
    let tree_text = git(&p.root, &["ls-tree", tip.trim()]);
    let tree_text = format!("{tree_text}100644 blob {}\textra.txt\n", blob.trim());
    let tree = {
        use std::io::Write as _;
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(&p.root)
            .arg("mktree")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(tree_text.as_bytes())
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    let moved = git(
        &p.root,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit-tree",
            tree.trim(),
            "-p",
            tip.trim(),
            "-m",
            "sneaked",
        ],
    );
    git(&p.root, &["update-ref", &branch, moved.trim()]);
    let (status, body, _) = post(
        &c,
        &server.url(&action),
        &token,
        &[("nonce", &shown_nonce), ("tree", &shown_tree)],
    )
    .await;
    println!("accept of a moved result: {status}");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("changed since it was shown"), "{body}");
    assert_eq!(git(&p.root, &["rev-parse", "main"]), main_before);
    // A token issued for one tree cannot accept another.
    let (status, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    assert_eq!(status, 200);
    let now_tree = field(&page, "tree");
    assert_ne!(now_tree, shown_tree, "control: the result did move");
    let wrong = nonce(&page, Some(&action));
    let (status, _, _) = post(
        &c,
        &server.url(&action),
        &token,
        &[("nonce", &wrong), ("tree", &shown_tree)],
    )
    .await;
    assert_eq!(status, 409);

    // Accepting what the page shows now works; the user's branch gets the work.
    let (_, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    let fresh = nonce(&page, Some(&action));
    let (_, inbox) = get(&c, &server.url("/inbox"), &token).await;
    let spare = nonce(&inbox, Some(&action));
    let (status, body, _) = post(
        &c,
        &server.url(&action),
        &token,
        &[("nonce", &fresh), ("tree", &now_tree), ("note", "ok")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("accepted the result"), "{body}");
    assert_ne!(git(&p.root, &["rev-parse", "main"]), main_before);
    assert!(p.root.join("<script>").exists());
    assert!(p.root.join("extra.txt").exists());

    // A second acceptance, with a token issued before the first one, is refused naming it.
    let (status, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    assert_eq!(status, 200);
    assert!(page.contains("accepted by web:me"), "{page}");
    let (status, body, _) = post(
        &c,
        &server.url(&action),
        &token,
        &[("nonce", &spare), ("tree", &now_tree)],
    )
    .await;
    println!("second acceptance: {status}");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("already accepted by web:me"), "{body}");
    let verify = p.orca(&["audit", "verify"]);
    assert!(verify.status.success(), "{verify:?}");
}
