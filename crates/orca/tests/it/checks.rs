//! Checks that gate a step (and a plan), on the real binary: a failing check fails the
//! attempt and the next attempt is told its output — a scripted model reads it in its request,
//! a shell step in `ORCA_PREVIOUS_FAILURE` — and the step completes only once it passes; a
//! check that never passes leaves the human a decision that shows its output; checks run in
//! the step's sandbox; the plan's checks run once, on the integrated result; checks are part
//! of the approved digest.

#![expect(clippy::unwrap_used, reason = "tests")]

use serde_json::{Value, json};

use crate::common::project::{Project, code, stderr, stdout};

/// What the check says when `greeting.txt` is wrong: the next attempt must be told it.
const CHECK_SAYS: &str = "CHECK-SAYS";
/// What only the check's output holds (not its command): what the file held.
const OUTPUT_ONLY: &str = "holds 'helo'";

/// A check that passes only when `greeting.txt` is exactly `hello`, and says why not.
fn greeting_check() -> Value {
    json!({ "command": format!(
        "grep -qx hello greeting.txt || {{ echo \"{CHECK_SAYS}: greeting.txt holds '$(cat greeting.txt)', not hello\"; exit 1; }}"
    ) })
}

fn plan(goal: &str, steps: &Value, checks: &Value) -> String {
    json!({ "goal": goal, "assumptions": ["a POSIX shell"], "risks": ["none"],
            "verification": ["the checks"], "steps": steps, "checks": checks })
    .to_string()
}

/// `run FILE --yes` with JSON: the exit code, the report, and the execution's id.
fn run(p: &Project, name: &str, doc: &str) -> (i32, Value, String) {
    let file = p.write(name, doc);
    let (c, v) = p.json(&[
        "run",
        file.to_str().unwrap(),
        "--yes",
        "--on-failure",
        "ask",
    ]);
    let id = v["execution_id"].as_str().unwrap_or_default().to_owned();
    (c, v, id)
}

/// The attempts of `step` in `exec show --json`.
fn attempts(p: &Project, exec: &str, step: &str) -> Vec<Value> {
    let (c, shown) = p.json(&["exec", "show", exec]);
    assert_eq!(c, 0, "{shown}");
    let task = shown["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["step_id"] == step)
        .unwrap_or_else(|| panic!("no task {step} in {shown}"))
        .clone();
    task["attempts"].as_array().cloned().unwrap_or_default()
}

/// The execution's events of type `kind`.
fn events(p: &Project, exec: &str, kind: &str) -> Vec<Value> {
    let out = p.run(&["events", exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == kind)
        .collect()
}

/// The scripted model: its first turn writes `greeting.txt` — `hello` when its request tells
/// it what the check said, else a typo — and its second submits a success.
struct Fixer;

impl wiremock::Respond for Fixer {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        let told = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .any(|m| m["content"].to_string().contains(OUTPUT_ONLY));
        let call = if turns == 0 {
            let content = if told { "hello\n" } else { "helo\n" };
            orca_testkit::fake_model::tool_call(
                "w",
                "write_file",
                &json!({ "path": "greeting.txt", "content": content }),
            )
        } else {
            orca_testkit::fake_model::tool_call(
                "done",
                "submit_result",
                &json!({ "status": "success", "summary": "wrote the greeting" }),
            )
        };
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-fixer",
            &body["model"],
            vec![call],
        ))
    }
}

/// A project whose `coder` is the scripted model at `url`.
fn with_model(url: &str) -> Project {
    let p = Project::new();
    std::fs::write(
        p.root().join(".orca/config.toml"),
        format!("[agents.coder]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"fixer\"\n"),
    )
    .unwrap();
    p
}

/// The first user message of each request the model received, in order.
async fn first_messages(server: &wiremock::MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|b| {
            b["messages"]
                .as_array()
                .is_some_and(|m| !m.iter().any(|m| m["role"] == "assistant"))
        })
        .filter_map(|b| {
            b["messages"]
                .as_array()?
                .iter()
                .find(|m| m["role"] == "user")
                .map(|m| m["content"].to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_fails_the_attempt_and_the_model_is_told_its_output() {
    let server = wiremock::MockServer::start().await;
    server
        .register(
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .and(wiremock::matchers::path("/v1/chat/completions"))
                .respond_with(Fixer),
        )
        .await;
    let p = with_model(&format!("{}/v1", server.uri()));
    let doc = plan(
        "greet",
        &json!([{ "id": "greet", "agent": "coder", "description": "write hello into greeting.txt",
                  "max_attempts": 2, "checks": [greeting_check()] }]),
        &json!([]),
    );
    let (c, report, exec) = tokio::task::block_in_place(|| run(&p, "greet.json", &doc));
    assert_eq!(c, 0, "{report}");
    assert_eq!(report["stage"], "completed", "{report}");

    let tries = tokio::task::block_in_place(|| attempts(&p, &exec, "greet"));
    println!("attempts: {}", tries.len());
    assert_eq!(tries.len(), 2, "{tries:?}");
    let first = tries[0].to_string();
    assert!(
        first.contains("check_failed") && first.contains(OUTPUT_ONLY),
        "the first attempt failed on the check, with its output: {first}"
    );
    assert_eq!(
        std::fs::read_to_string(p.root().join("greeting.txt")).unwrap(),
        "hello\n"
    );

    // What the model was told: nothing of a check the first time, its output the second.
    let firsts = first_messages(&server).await;
    assert_eq!(firsts.len(), 2, "{firsts:?}");
    assert!(!firsts[0].contains("the checks failed"), "{}", firsts[0]);
    assert!(
        firsts[1].contains(OUTPUT_ONLY) && firsts[1].contains("the checks failed"),
        "the second attempt's request carries the check's output: {}",
        firsts[1]
    );

    // The audit log has each run of the check: failed, then passed.
    let (failed, passed) = tokio::task::block_in_place(|| {
        (
            events(&p, &exec, "check.failed"),
            events(&p, &exec, "check.passed"),
        )
    });
    println!(
        "check.failed: {}, check.passed: {}",
        failed.len(),
        passed.len()
    );
    assert_eq!((failed.len(), passed.len()), (1, 1));
    assert_eq!(failed[0]["attempt"], 1);
    assert!(
        failed[0]["data"]["output"]
            .as_str()
            .unwrap()
            .contains(CHECK_SAYS)
    );
    assert_eq!(passed[0]["attempt"], 2);

    // `exec logs` shows the check and its output under the attempt it judged.
    let logs = tokio::task::block_in_place(|| p.run(&["exec", "logs", &exec, "greet"]));
    let logs = stdout(&logs);
    assert!(
        logs.contains("check `grep -qx hello greeting.txt"),
        "{logs}"
    );
    assert!(logs.contains(CHECK_SAYS), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_never_passes_leaves_a_decision_showing_its_output() {
    let server = wiremock::MockServer::start().await;
    server
        .register(
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .and(wiremock::matchers::path("/v1/chat/completions"))
                .respond_with(Fixer),
        )
        .await;
    let p = with_model(&format!("{}/v1", server.uri()));
    let doc = plan(
        "greet",
        &json!([{ "id": "greet", "agent": "coder", "description": "write hello into greeting.txt",
                  "max_attempts": 2,
                  "checks": [{ "command": "echo NEVER-PASSES: the tests are red; exit 3" }] }]),
        &json!([]),
    );
    let (c, report, exec) = tokio::task::block_in_place(|| run(&p, "never.json", &doc));
    assert_eq!(c, 4, "awaiting a decision: {report}");

    let (c, shown) = tokio::task::block_in_place(|| p.json(&["exec", "show", &exec]));
    assert_eq!(c, 0);
    let failure = &shown["decision"]["request"]["failure"];
    assert_eq!(failure["code"], "check_failed", "{shown}");
    assert!(
        failure["cause"].as_str().unwrap().contains("NEVER-PASSES"),
        "{failure}"
    );
    assert_eq!(
        tokio::task::block_in_place(|| attempts(&p, &exec, "greet")).len(),
        2
    );
    let text = tokio::task::block_in_place(|| p.run(&["exec", "show", &exec]));
    let text = stdout(&text);
    println!("{text}");
    assert!(
        text.contains("Check:     the checks failed: `echo NEVER-PASSES")
            && text.contains("│ NEVER-PASSES: the tests are red"),
        "{text}"
    );
}

#[test]
fn a_shell_step_is_told_what_its_check_said_in_orca_previous_failure() {
    let p = Project::new();
    // The command writes the typo unless the previous failure names the check's complaint.
    let command = format!(
        "echo \"$ORCA_PREVIOUS_FAILURE\" >> told.txt; case \"$ORCA_PREVIOUS_FAILURE\" in *\"{OUTPUT_ONLY}\"*) echo hello > greeting.txt;; *) echo helo > greeting.txt;; esac"
    );
    let doc = plan(
        "greet",
        &json!([{ "id": "greet", "agent": "shell", "description": "write hello",
                  "command": command, "max_attempts": 2, "checks": [greeting_check()] }]),
        &json!([]),
    );
    let (c, report, exec) = run(&p, "greet.json", &doc);
    assert_eq!(c, 0, "{report}");
    let tries = attempts(&p, &exec, "greet");
    println!("attempts: {}", tries.len());
    assert_eq!(tries.len(), 2, "{tries:?}");
    assert!(
        tries[0].to_string().contains("check_failed"),
        "{:?}",
        tries[0]
    );
    let told = std::fs::read_to_string(p.root().join("told.txt")).unwrap();
    let told: Vec<&str> = told.lines().collect();
    assert_eq!(told[0], "", "the first attempt is told nothing");
    assert!(
        told[1].contains("check_failed") && told[1].contains("holds 'helo'"),
        "the second attempt reads the check's output: {told:?}"
    );
}

/// Attacks on orca's records and the signing key, as a script that counts those that worked
/// into `bypasses.txt` (and how many it tried into `tries.txt`) and always exits 0.
fn attack_script(key: &std::path::Path) -> String {
    let key = key.display();
    let tries = [
        "echo MARK > .orca/plans/evil.json".to_owned(),
        "echo MARK >> .orca/config.toml".to_owned(),
        "rm -f .orca/config.toml && test ! -e .orca/config.toml".to_owned(),
        "mv .orca .orca-moved".to_owned(),
        "ln -s .orca recs && echo MARK > recs/evil.json".to_owned(),
        format!("head -c 1 '{key}' > /dev/null"),
        format!("cp '{key}' stolen.key"),
    ];
    let mut script = String::from("n=0\n");
    for t in &tries {
        let quoted = t.replace('\'', "'\\''");
        script.push_str(&format!(
            "if sh -c '{quoted}' 2>/dev/null; then n=$((n+1)); echo 'BYPASS: {quoted}'; fi\n"
        ));
    }
    script.push_str(&format!(
        "echo \"$n\" > bypasses.txt; echo {} > tries.txt\n",
        tries.len()
    ));
    script
}

#[test]
fn a_check_cannot_write_orcas_records_or_read_the_signing_key() {
    let p = Project::new();
    std::fs::write(p.root().join(".orca/config.toml"), "sandbox = \"kernel\"\n").unwrap();
    let key = p.config.path().join("orca/signing.key");
    assert!(key.is_file(), "orca init made the signing key");
    let script = attack_script(&key);
    // The same attacks as a step's check and as the plan's.
    let doc = plan(
        "attack from a check",
        &json!([{ "id": "work", "agent": "shell", "description": "nothing",
                  "command": "true", "checks": [{ "command": script.replace(".txt", "-step.txt") }] }]),
        &json!([{ "command": script.replace(".txt", "-plan.txt") }]),
    );
    let before = std::fs::read(p.root().join(".orca/config.toml")).unwrap();
    let (c, report, _) = run(&p, "attack.json", &doc);
    assert_eq!(c, 0, "{report}");
    let read = |name: &str| {
        std::fs::read_to_string(p.root().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .trim()
            .parse::<usize>()
            .unwrap()
    };
    let (step, plan_level) = (read("bypasses-step.txt"), read("bypasses-plan.txt"));
    let tries = read("tries-step.txt");
    println!(
        "attacks from checks that got through: step {step} of {tries}, plan {plan_level} of {}",
        read("tries-plan.txt")
    );
    assert_eq!((step, plan_level), (0, 0));
    assert!(!p.root().join("stolen.key").exists());
    assert!(!p.root().join(".orca/plans/evil.json").exists());
    assert_eq!(
        std::fs::read(p.root().join(".orca/config.toml")).unwrap(),
        before
    );

    // Control: unconfined, in a scratch copy of the layout, the same attacks work.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(scratch.path().join(".orca/plans")).unwrap();
    std::fs::write(scratch.path().join(".orca/config.toml"), "x\n").unwrap();
    let scratch_key = scratch.path().join("signing.key");
    std::fs::write(&scratch_key, "k").unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(attack_script(&scratch_key))
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let control: usize = std::fs::read_to_string(scratch.path().join("bypasses.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!("control, unconfined: {control} of {tries} got through");
    assert!(
        control >= 4,
        "the attacks work when nothing confines them: {control}"
    );
}

/// Steps in worktrees: a step's check runs in its worktree; the plan's check runs once, after
/// every step, on the execution's branch (the files exist only there), and a failing one fails
/// the execution with its output.
#[test]
fn the_plans_checks_run_once_on_the_integrated_result() {
    use crate::worktrees::Project as Repo;
    let p = Repo::new(true);
    let docs = tempfile::tempdir().unwrap();
    let doc = |checks: Value| {
        let path = docs.path().join("plan.json");
        std::fs::write(
            &path,
            plan(
                "two isolated steps",
                &json!([
                    // Its own check runs in its worktree: only there is `left.txt`.
                    { "id": "left", "agent": "shell", "description": "l", "depends_on": [],
                      "command": "echo left > left.txt", "isolation": "worktree",
                      "checks": [{ "command": "test -f left.txt && test ! -e right.txt" }] },
                    { "id": "right", "agent": "shell", "description": "r", "depends_on": [],
                      "command": "echo right > right.txt", "isolation": "worktree" }
                ]),
                &checks,
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let both = json!([{ "command": "test \"$(cat left.txt right.txt)\" = \"$(printf 'left\\nright')\" && test ! -e .orca" }]);
    let (c, v, err) = p.json(&["run", &doc(both), "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    // Control: the user's tree never got the files; only the integrated result has them.
    assert!(!p.path("left.txt").exists() && !p.path("right.txt").exists());
    let out = p.run(&["events", &exec]);
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let under_execution = |e: &&Value| e["step_id"].is_null();
    let step_checks = events
        .iter()
        .filter(|e| e["type"] == "check.passed" && e["step_id"] == "left")
        .count();
    assert_eq!(step_checks, 1, "the step's check passed in its worktree");
    let passed = events
        .iter()
        .filter(|e| e["type"] == "check.passed")
        .filter(under_execution)
        .count();
    let last_attempt = kinds
        .iter()
        .rposition(|k| *k == "task.attempt.completed")
        .unwrap();
    let check_at = events
        .iter()
        .position(|e| e["type"] == "check.passed" && e["step_id"].is_null())
        .unwrap();
    println!(
        "plan checks run: {passed} (after the last step's completion: {})",
        check_at > last_attempt
    );
    assert_eq!(passed, 1, "{kinds:?}");
    assert!(check_at > last_attempt, "{kinds:?}");
    assert!(events[check_at]["step_id"].is_null(), "under the execution");

    // A failing plan check fails the execution, with its output.
    let failing =
        json!([{ "command": "test -f center.txt || { ls; echo NO-CENTER-TXT; exit 1; }" }]);
    let (c, v, err) = p.json(&["run", &doc(failing), "--yes"]);
    assert_eq!(c, 3, "{v} {err}");
    assert_eq!(v["stage"], "failed", "{v}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let shown = String::from_utf8_lossy(&p.run(&["exec", "show", &exec]).stdout).into_owned();
    println!("{shown}");
    assert!(
        shown.contains("Failed:    the plan's checks failed: `test -f center.txt")
            && shown.contains("│ NO-CENTER-TXT")
            && shown.contains("│ left.txt"),
        "{shown}"
    );
}

/// The digest covers checks: changing one changes it; a plan without checks (or with an
/// empty list) keeps the digest it always had.
#[test]
fn the_approved_digest_covers_checks() {
    let p = Project::new();
    let digest = |name: &str, doc: &str| {
        let id = p.create(name, doc);
        // A proposal's text shows the digest approval would bind.
        let out = p.run(&["plan", "show", &id]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        text.lines()
            .find_map(|l| l.strip_prefix("Digest:"))
            .and_then(|d| d.split_whitespace().next())
            .unwrap_or_else(|| panic!("no digest in {text}"))
            .to_owned()
    };
    let steps = json!([{ "id": "a", "agent": "shell", "description": "d", "command": "true" }]);
    let with = |checks: Value| {
        let mut s = steps.clone();
        s[0]["checks"] = checks;
        s
    };
    let none = digest("none.json", &plan("g", &steps, &json!([])));
    let mut absent: Value = serde_json::from_str(&plan("g", &steps, &json!([]))).unwrap();
    absent.as_object_mut().unwrap().remove("checks");
    let absent = digest("absent.json", &absent.to_string());
    let one = digest(
        "one.json",
        &plan("g", &with(json!([{ "command": "make test" }])), &json!([])),
    );
    let other = digest(
        "other.json",
        &plan("g", &with(json!([{ "command": "make check" }])), &json!([])),
    );
    let timed = digest(
        "timed.json",
        &plan(
            "g",
            &with(json!([{ "command": "make test", "timeout_secs": 9 }])),
            &json!([]),
        ),
    );
    let top = digest(
        "top.json",
        &plan("g", &steps, &json!([{ "command": "make test" }])),
    );
    let all = [&none, &one, &other, &timed, &top];
    let distinct: std::collections::BTreeSet<&String> = all.iter().copied().collect();
    println!(
        "distinct digests of 5 plans differing only in checks: {}",
        distinct.len()
    );
    assert_eq!(none, absent, "an empty list is the same plan as none");
    assert_eq!(distinct.len(), 5);

    // A plan written before checks existed keeps its digest (the README shows it).
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/parallel-dag.json");
    let old = digest("old.json", &std::fs::read_to_string(example).unwrap());
    assert_eq!(
        old,
        "sha256:23186a98d601b51e33f89ca466270381e31ad298cc1706b7223af1834fb4903c"
    );
}

#[test]
fn plan_show_lists_each_steps_checks_and_the_plans() {
    let p = Project::new();
    let id = p.create(
        "shown.json",
        &plan(
            "build and test",
            &json!([
                { "id": "build", "agent": "shell", "description": "build it", "command": "make",
                  "checks": [{ "command": "make test" }, { "command": "make lint", "timeout_secs": 30 }] },
                { "id": "docs", "agent": "shell", "description": "write docs", "command": "make docs" }
            ]),
            &json!([{ "command": "make all", "timeout_secs": 600 }]),
        ),
    );
    let out = p.run(&["plan", "show", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text: String = stdout(&out)
        .lines()
        .map(|l| {
            if l.starts_with("Digest:") {
                "Digest:    [digest]"
            } else if l.starts_with("Plan plan_") {
                "Plan [plan_id] (proposal)"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("plan_show_checks", text);
}

fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    xs.get(xs.len() / 2).copied().unwrap_or(0)
}

/// What a check costs a step: `N` independent `true` steps, with and without a `true` check,
/// compared on the median step duration (the check runs inside the attempt), and the median
/// of the checks' own run times as recorded. Prints the figures (docs/perf/checks.md).
#[test]
fn what_a_check_costs_per_step() {
    const N: usize = 20;
    let p = Project::new();
    let steps = |check: bool| {
        let steps: Vec<Value> = (0..N)
            .map(|i| {
                let mut s = json!({ "id": format!("s{i}"), "agent": "shell", "description": "d",
                                    "command": "true", "depends_on": [] });
                if check {
                    s["checks"] = json!([{ "command": "true" }]);
                }
                s
            })
            .collect();
        Value::Array(steps)
    };
    let durations = |name: &str, check: bool| {
        let (c, v, exec) = run(&p, name, &plan("cost", &steps(check), &json!([])));
        assert_eq!(c, 0, "{v}");
        let ms: Vec<u64> = v["totals"]["steps"]
            .as_object()
            .unwrap()
            .values()
            .map(|s| s["duration_ms"].as_u64().unwrap())
            .collect();
        assert_eq!(ms.len(), N);
        (ms, exec)
    };
    let (without, _) = durations("without.json", false);
    let (with, exec) = durations("with.json", true);
    let checks: Vec<u64> = events(&p, &exec, "check.passed")
        .iter()
        .map(|e| e["data"]["millis"].as_u64().unwrap())
        .collect();
    assert_eq!(checks.len(), N, "one check per step");
    let (a, b) = (median(without), median(with));
    println!(
        "check cost: {N} steps, median step {a} ms without a check, {b} ms with `true` as the check (+{} ms); median check run {} ms",
        b.saturating_sub(a),
        median(checks)
    );
}

/// Of `K` steps that report success, some with a broken result: how many checks catch, and how
/// many would have been reported completed without them. Prints the figures.
#[test]
fn broken_results_are_caught_by_checks() {
    const K: usize = 12;
    // Steps 0, 3, 6, 9… write a broken result (a JSON document cut short) and report success.
    let broken = |i: usize| i.is_multiple_of(3);
    let p = Project::new();
    let steps = |check: bool| {
        let steps: Vec<Value> = (0..K)
            .map(|i| {
                let body = if broken(i) { "{\"ok\": " } else { "{\"ok\": true}" };
                let mut s = json!({ "id": format!("s{i}"), "agent": "shell", "description": "d",
                    "command": format!("printf '%s' '{body}' > out-{i}.json; echo done"),
                    "depends_on": [], "max_attempts": 1 });
                if check {
                    // The project's own validation: the document must be closed.
                    s["checks"] = json!([{ "command": format!(
                        "grep -q '}}$' out-{i}.json || {{ echo \"out-{i}.json is cut short: $(cat out-{i}.json)\"; exit 1; }}"
                    ) }]);
                }
                s
            })
            .collect();
        Value::Array(steps)
    };
    let statuses = |name: &str, check: bool| {
        let file = p.write(name, &plan("broken", &steps(check), &json!([])));
        let (c, v) = p.json(&[
            "run",
            file.to_str().unwrap(),
            "--yes",
            "--on-failure",
            "skip",
        ]);
        let exec = v["execution_id"].as_str().unwrap().to_owned();
        let (_, shown) = p.json(&["exec", "show", &exec]);
        let tasks = shown["tasks"].as_array().unwrap().clone();
        (c, tasks)
    };
    let truly_broken = (0..K).filter(|&i| broken(i)).count();
    let (_, without) = statuses("without.json", false);
    let reported_completed_broken = without
        .iter()
        .filter(|t| {
            let i: usize = t["step_id"].as_str().unwrap()[1..].parse().unwrap();
            t["status"] == "completed" && broken(i)
        })
        .count();
    let (c, with) = statuses("with.json", true);
    assert_eq!(c, 3, "the run with broken results fails");
    let caught = with
        .iter()
        .filter(|t| t["status"] == "failed" && t.to_string().contains("check_failed"))
        .count();
    let good_completed = with.iter().filter(|t| t["status"] == "completed").count();
    println!(
        "broken results: {truly_broken} of {K} steps; without checks {reported_completed_broken} reported completed; with checks {caught} caught (check_failed), {good_completed} good ones completed"
    );
    assert_eq!(
        reported_completed_broken, truly_broken,
        "control: nothing catches them without checks"
    );
    assert_eq!(caught, truly_broken);
    assert_eq!(good_completed, K - truly_broken);
}

/// The web: the plan page shows each step's checks and the plan's; the decision a failed
/// check leaves shows its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_shows_checks_and_a_failed_checks_output() {
    use crate::web_support::{Project as Site, Server, client, get};
    let site = Site::new();
    let token = site.token("me");
    let doc: Value = serde_json::from_str(&plan(
        "checked",
        &json!([{ "id": "work", "agent": "shell", "description": "d", "command": "true",
                  "checks": [{ "command": "echo WEB-SEES-THIS; exit 1" }] }]),
        &json!([{ "command": "make all" }]),
    ))
    .unwrap();
    let plan_id = site.proposal("checked", &doc);
    let out = site.orca(&["--json", "run", &plan_id, "--yes", "--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let server = Server::start(&site, &[]);
    let c = client();
    let (status, page) = get(&c, &server.url(&format!("/plans/{plan_id}")), &token).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("check: <code>echo WEB-SEES-THIS; exit 1</code>")
            && page.contains("Checks on the integrated result")
            && page.contains("<code>make all</code>"),
        "{page}"
    );
    let (status, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    assert_eq!(status, 200);
    let decision = page
        .split("Decision needed")
        .nth(1)
        .unwrap_or_else(|| panic!("no decision in {page}"));
    assert!(
        decision.contains("the checks failed") && decision.contains("WEB-SEES-THIS"),
        "{decision}"
    );
}

/// A check that cannot run, or that holds a credential, is refused when the plan is created,
/// naming the step and the check; nothing is created.
#[test]
fn a_bad_check_is_refused_naming_the_step_and_the_check() {
    let p = Project::new();
    let doc = plan(
        "bad checks",
        &json!([{ "id": "a", "agent": "shell", "description": "d", "command": "true",
                  "checks": [{ "command": "make test" }, { "command": "  " },
                             { "command": "true", "timeout_secs": 0 }] }]),
        &json!([{ "command": "curl -H 'Authorization: Bearer ghp_0123456789abcdefghijklmnopqrstuvwxyzAB' x" }]),
    );
    let file = p.write("bad.json", &doc);
    let out = p.run(&["plan", "create", "--file", file.to_str().unwrap()]);
    let err = stderr(&out);
    println!("{err}");
    assert_eq!(code(&out), 2, "{err}");
    for expected in [
        "step `a`: `checks[1]`: `command` is empty",
        "step `a`: `checks[2]`: `timeout_secs` must be at least 1",
        "`checks[0].command` holds what looks like a credential",
    ] {
        assert!(err.contains(expected), "{expected} in {err}");
    }
    assert!(
        !err.contains("ghp_0123"),
        "the credential is not repeated: {err}"
    );
    let (c, v) = p.json(&["plan", "list"]);
    assert_eq!(c, 0);
    assert_eq!(
        v.as_array().map(Vec::len),
        Some(0),
        "nothing was created: {v}"
    );
}
