//! `orca eval` on the real binary, with plan-driven tasks (shell steps) and the scripted fake
//! model: trials counted right (a completed run whose hidden check fails is a failed trial),
//! the hidden check out of the agents' reach, `eval verify` passing on an untouched report and
//! exiting 5 on an edited figure or a swapped trial, `compare` showing flips, the built-in
//! suite's checks proven by its reference solutions, the `report.md` format.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::project::{code, stderr, stdout};

/// A suite under construction in a temp dir, with a temp user config home and a place for
/// reports outside the suite.
struct Bench {
    suite: TempDir,
    config: TempDir,
    out: TempDir,
}

fn plan(command: &str) -> String {
    json!({ "goal": "a task", "summary": "s", "assumptions": ["a POSIX shell"], "risks": ["none"],
            "verification": ["the hidden check"],
            "steps": [{ "id": "work", "agent": "shell", "description": "do the task",
                        "command": command }] })
    .to_string()
}

impl Bench {
    fn new() -> Self {
        Self {
            suite: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
            out: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.suite.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A task whose repo holds `README`, run by a plan of one shell step `command`, judged by
    /// the hidden `check`. Returns its `[[task]]` table.
    fn task(&self, id: &str, command: &str, check: &str) -> String {
        self.write(&format!("tasks/{id}/repo/README"), "a task\n");
        self.write(&format!("tasks/{id}/plan.json"), &plan(command));
        self.write(&format!("tasks/{id}/check.sh"), check);
        format!(
            "[[task]]\nid = \"{id}\"\nrepo = \"tasks/{id}/repo\"\nrequest = \"do it\"\nplan = \"tasks/{id}/plan.json\"\ncheck = \"tasks/{id}/check.sh\"\ntimeout_secs = 120\n"
        )
    }

    fn suite_file(&self, name: &str, file: &str, tasks: &[String]) -> PathBuf {
        self.write(file, &format!("name = \"{name}\"\n{}", tasks.join("\n")))
    }

    fn orca(&self, args: &[&str]) -> Output {
        let mut cmd = crate::common::isolated(self.out.path(), self.config.path());
        cmd.args(args);
        assert_cmd::Command::from_std(cmd)
            .write_stdin(Vec::<u8>::new())
            .timeout(std::time::Duration::from_secs(300))
            .output()
            .unwrap()
    }

    /// `eval run SUITE --out OUT/name ARGS…`: the report's directory and its JSON.
    fn run(&self, suite: &Path, name: &str, args: &[&str]) -> (PathBuf, Value) {
        let dir = self.out.path().join(name);
        let mut all = vec![
            "eval",
            "run",
            suite.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let out = self.orca(&all);
        assert_eq!(code(&out), 0, "eval run: {}{}", stdout(&out), stderr(&out));
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
                .unwrap();
        (dir, report)
    }

    fn verify(&self, report: &Path) -> Output {
        self.orca(&["eval", "verify", report.to_str().unwrap()])
    }
}

const GOOD: &str = "echo hello > out.txt";
const CHECK: &str = "grep -qx hello out.txt\n";

#[test]
fn trials_are_counted_and_a_failed_hidden_check_fails_a_completed_run() {
    let b = Bench::new();
    let tasks = [
        b.task("passes", GOOD, CHECK),
        // The run completes; only the hidden check knows the work is wrong.
        b.task("wrong-work", "echo helo > out.txt", CHECK),
        b.task("step-fails", "exit 3", CHECK),
    ];
    let suite = b.suite_file("counting", "suite.toml", &tasks);
    let (dir, report) = b.run(&suite, "r", &["-k", "2", "--concurrency", "2"]);
    let total = &report["total"];
    println!("total: {total}");
    assert_eq!(
        (total["passed"].as_u64(), total["trials"].as_u64()),
        (Some(2), Some(6))
    );
    assert_eq!(total["pass_at_1"], 0.333);
    assert_eq!(total["pass_all"], 1);
    assert_eq!(total["pass_hat_k"], 0.333);
    assert_eq!(
        total["failures"],
        json!({ "check failed": 2, "step failed": 2 })
    );
    // A step that fails its last attempt is a decision the unattended policy took.
    assert_eq!(report["tasks"]["step-fails"]["decisions"], 2, "{report}");
    assert_eq!(report["tasks"]["passes"]["decisions"], 0, "{report}");
    let wrong = &report["tasks"]["wrong-work"];
    assert_eq!(
        (wrong["passed"].as_u64(), wrong["attempts"].as_u64()),
        (Some(0), Some(2))
    );
    for t in report["trials"].as_array().unwrap() {
        let failure = &t["figures"]["failure"]["kind"];
        match t["task"].as_str().unwrap() {
            "passes" => assert_eq!(t["figures"]["passed"], true, "{t}"),
            "wrong-work" => assert_eq!(failure, "check_failed", "{t}"),
            _ => assert_eq!(failure, "step_failed", "{t}"),
        }
        // Each trial kept its own record, and its audit-log heads are in the report.
        let root = dir.join(t["dir"].as_str().unwrap());
        assert!(root.join(".orca").is_dir(), "{}", root.display());
        assert!(t["figures"]["logs"].as_array().unwrap().len() >= 2, "{t}");
    }
    // The approval is recorded as eval's.
    let first = dir.join("trials/passes/1");
    let exec = report["trials"][0]["figures"]["executions"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let plan_log = report["trials"][0]["figures"]["logs"][0]["log"]
        .as_str()
        .unwrap();
    let plan_id = plan_log.rsplit(' ').next().unwrap();
    let out = crate::common::orca(
        &first,
        b.config.path(),
        &["--json", "audit", "show", plan_id],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("user:eval"), "{}", stdout(&out));
    assert!(exec.starts_with("exec_"), "{exec}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| **total** | 2/6 | 33.3% | 33.3% |"), "{md}");
}

#[test]
fn verify_recomputes_and_refuses_an_edited_figure_or_a_swapped_trial() {
    let b = Bench::new();
    let tasks = [
        b.task("passes", GOOD, CHECK),
        b.task("fails", "echo helo > out.txt", CHECK),
    ];
    let suite = b.suite_file("proof", "suite.toml", &tasks);
    let (dir, _) = b.run(&suite, "r", &[]);
    let report = dir.join("report.json");
    let out = b.verify(&report);
    println!("untouched: {}", stdout(&out));
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));

    let copy = |name: &str| {
        let to = b.out.path().join(name);
        let status = std::process::Command::new("cp")
            .args(["-a"])
            .arg(&dir)
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success());
        to
    };

    // An edited figure: the signature no longer covers it, and it is not its trials' figure.
    let edited = copy("edited");
    let text = std::fs::read_to_string(edited.join("report.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["total"]["passed"] = json!(2);
    std::fs::write(edited.join("report.json"), v.to_string()).unwrap();
    let out = b.verify(&edited.join("report.json"));
    println!("edited figure: {}", stdout(&out));
    assert_eq!(code(&out), 5, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("signature"), "{}", stdout(&out));

    // A flipped verdict on one trial, with every aggregate made consistent: still caught, by
    // the signature and by the hidden check run again.
    let flipped = copy("flipped");
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(flipped.join("report.json")).unwrap())
            .unwrap();
    for t in v["trials"].as_array_mut().unwrap() {
        if t["task"] == "fails" {
            t["figures"]["passed"] = json!(true);
            t["figures"].as_object_mut().unwrap().remove("failure");
        }
    }
    std::fs::write(flipped.join("report.json"), v.to_string()).unwrap();
    let out = b.verify(&flipped.join("report.json"));
    println!("flipped verdict: {}", stdout(&out));
    assert_eq!(code(&out), 5);
    assert!(
        stdout(&out).contains("trial fails #1: passed"),
        "{}",
        stdout(&out)
    );

    // A swapped trial: the passing trial's .orca/ exchanged with the failing one's.
    let swapped = copy("swapped");
    let (a, c) = (
        swapped.join("trials/passes/1/.orca"),
        swapped.join("trials/fails/1/.orca"),
    );
    let tmp = swapped.join("tmp-orca");
    std::fs::rename(&a, &tmp).unwrap();
    std::fs::rename(&c, &a).unwrap();
    std::fs::rename(&tmp, &c).unwrap();
    let out = b.verify(&swapped.join("report.json"));
    println!("swapped trial: {}", stdout(&out));
    assert_eq!(code(&out), 5);
    assert!(stdout(&out).contains("logs: report"), "{}", stdout(&out));

    // A changed hidden check: the suite's digest no longer matches.
    std::fs::write(b.suite.path().join("tasks/fails/check.sh"), "true\n").unwrap();
    let out = b.verify(&report);
    println!("changed suite: {}", stdout(&out));
    assert_eq!(code(&out), 5);
    assert!(stdout(&out).contains("digest"), "{}", stdout(&out));
}

#[test]
fn the_hidden_check_never_reaches_a_step() {
    let b = Bench::new();
    let marker = format!("hidden-marker-{}", std::process::id());
    // The step searches its workspace, its environment and its arguments' neighbourhood for
    // the check's name and content, and writes how many places it found.
    let (head, tail) = marker.split_at(8);
    // Built at run time: the command itself (in the plan, in `.orca/`) holds neither string.
    let hostile = format!(
        "m='{head}'; m=\"${{m}}{tail}\"; s=secret; s=\"$s-check\"; t=tasks; t=\"$t/\"; n=0; \
         n=$((n + $(grep -rl \"$m\" . 2>/dev/null | wc -l))); \
         n=$((n + $(find . -name \"*$s*\" 2>/dev/null | wc -l))); \
         n=$((n + $(env | grep -c -e \"$m\" -e \"$s\" -e \"$t\"))); \
         n=$((n + $(tr '\\0' ' ' < /proc/$PPID/cmdline 2>/dev/null | grep -c \"$s\"))); \
         echo $n > found.txt"
    );
    let check = format!("# {marker}\ntest -f found.txt\n");
    let mut hidden = b.task("hostile", &hostile, "true\n");
    b.write("tasks/hostile/secret-check.sh", &check);
    hidden = hidden.replace("tasks/hostile/check.sh", "tasks/hostile/secret-check.sh");
    // The control: the same search where the check's content is in the repo finds it.
    let control = b.task("control", &hostile, "true\n");
    b.write("tasks/control/repo/leaked-secret-check.sh", &check);
    let suite = b.suite_file("hidden", "suite.toml", &[hidden, control]);
    let (dir, report) = b.run(&suite, "r", &[]);
    let found = |task: &str| -> u32 {
        std::fs::read_to_string(dir.join(format!("trials/{task}/1/found.txt")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (hidden_found, control_found) = (found("hostile"), found("control"));
    println!("places holding the check: hidden {hidden_found}, control {control_found}");
    assert_eq!(hidden_found, 0);
    assert!(control_found >= 2, "the search finds a check it can reach");
    assert_eq!(report["total"]["passed"], 2, "{report}");
}

/// The hidden check runs code the agents wrote (a test, a script): it runs in the step sandbox,
/// so that code reaches no further than a step could — it cannot write beside its trial.
#[test]
fn the_hidden_check_runs_the_agents_code_in_the_sandbox() {
    let b = Bench::new();
    // The agent leaves a script that its task's check will run.
    let evil =
        "printf 'touch inside.txt; touch ../escaped.txt; touch \"$HOME/escaped.txt\"\\n' > test.sh";
    let task = b.task("evil", evil, "sh test.sh; true\n");
    let suite = b.suite_file("sandboxed", "suite.toml", &[task]);
    let (dir, report) = b.run(&suite, "r", &[]);
    let root = dir.join("trials/evil/1");
    let exec = report["trials"][0]["figures"]["executions"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let out = crate::common::orca(&root, b.config.path(), &["events", &exec]);
    let kernel = stdout(&out).lines().any(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|e| e["type"] == "sandbox" && e["data"]["effective"] == "kernel")
    });
    let inside = root.join("inside.txt").exists();
    let escaped = [
        dir.join("trials/evil/escaped.txt"),
        std::env::var_os("HOME")
            .map_or_else(PathBuf::new, PathBuf::from)
            .join("escaped.txt"),
    ]
    .iter()
    .filter(|p| p.exists())
    .count();
    println!("kernel sandbox: {kernel}; written inside the trial: {inside}; escaped: {escaped}");
    assert!(
        kernel || std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some(),
        "the run was not in the kernel sandbox"
    );
    assert!(inside, "the check ran the agent's script");
    if kernel {
        assert_eq!(escaped, 0);
    }
}

#[test]
fn compare_shows_the_trials_that_flipped() {
    let b = Bench::new();
    b.write("tasks/t/repo/README", "x\n");
    b.write("tasks/t/good.json", &plan(GOOD));
    b.write("tasks/t/bad.json", &plan("echo nope > out.txt"));
    b.write("tasks/t/check.sh", CHECK);
    let task = |p: &str| {
        format!(
            "[[task]]\nid = \"t\"\nrepo = \"tasks/t/repo\"\nrequest = \"r\"\nplan = \"tasks/t/{p}\"\ncheck = \"tasks/t/check.sh\"\n"
        )
    };
    let before = b.suite_file("flip", "before.toml", &[task("good.json")]);
    let after = b.suite_file("flip", "after.toml", &[task("bad.json")]);
    let (a, _) = b.run(&before, "a", &["-k", "2"]);
    let (c, _) = b.run(&after, "b", &["-k", "2"]);
    let out = b.orca(&["eval", "compare", a.to_str().unwrap(), c.to_str().unwrap()]);
    println!("{}", stdout(&out));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("t "))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("2/2 → 0/2") && line.contains("broke #1 #2"),
        "{line}"
    );
    assert!(line.contains("-100.0"), "{line}");
    let out = b.orca(&[
        "--json",
        "eval",
        "compare",
        c.to_str().unwrap(),
        a.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tasks"][0]["fixed"], json!([1, 2]), "{v}");
}

#[test]
fn a_bad_suite_is_refused_naming_the_problem() {
    let b = Bench::new();
    b.write("tasks/x/repo/check.sh", "true\n");
    b.write("tasks/x/plan.json", &plan(GOOD));
    let cases = [
        (
            "name = \"s\"\n[[task]]\nid = \"x\"\nrepo = \"tasks/x/repo\"\nrequest = \"r\"\ncheck = \"tasks/x/repo/check.sh\"\n",
            "inside repo",
        ),
        (
            "name = \"s\"\n[[task]]\nid = \"x\"\nrepo = \"tasks/x/repo\"\nrequest = \"r\"\ncheck = \"../check.sh\"\n",
            "without `..`",
        ),
        (
            "name = \"s\"\n[[task]]\nid = \"x\"\nrepo = \"tasks/x/repo\"\nrequest = \"r\"\ncheck = \"tasks/x/plan.json\"\nretries = 3\n",
            "unknown field",
        ),
        ("name = \"s\"\n", "no [[task]]"),
    ];
    for (text, says) in cases {
        let suite = b.write("suite.toml", text);
        let out = b.orca(&[
            "eval",
            "run",
            suite.to_str().unwrap(),
            "--out",
            "/tmp/never",
        ]);
        assert_eq!(code(&out), 2, "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
    }
    // Reports may not be written beside the checks.
    let suite = b.write(
        "suite.toml",
        "name = \"s\"\n[[task]]\nid = \"x\"\nrepo = \"tasks/x/repo\"\nrequest = \"r\"\ncheck = \"tasks/x/plan.json\"\n",
    );
    let inside = b.suite.path().join("out");
    let out = b.orca(&[
        "eval",
        "run",
        suite.to_str().unwrap(),
        "--out",
        inside.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("inside the suite"),
        "{}",
        stderr(&out)
    );
    assert!(!inside.exists());
}

/// A model server answering every chat request with `respond`.
async fn model_server(respond: impl wiremock::Respond + 'static) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    server
        .register(
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .and(wiremock::matchers::path("/v1/chat/completions"))
                .respond_with(respond),
        )
        .await;
    server
}

/// The scripted model: writes `out.txt`, then submits a success.
struct Writer;

impl wiremock::Respond for Writer {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let turns = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let call = if turns == 0 {
            orca_testkit::fake_model::tool_call(
                "w",
                "write_file",
                &json!({ "path": "out.txt", "content": "hello\n" }),
            )
        } else {
            orca_testkit::fake_model::tool_call(
                "done",
                "submit_result",
                &json!({ "status": "success", "summary": "wrote it" }),
            )
        };
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-writer",
            &body["model"],
            vec![call],
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_step_s_tokens_are_counted_per_trial() {
    let server = model_server(Writer).await;
    let b = Bench::new();
    b.write(
        "config.toml",
        &format!(
            "[agents.coder]\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"writer\"\n",
            server.uri()
        ),
    );
    b.write("tasks/m/repo/README", "x\n");
    b.write(
        "tasks/m/plan.json",
        &json!({ "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"],
                 "verification": ["v"],
                 "steps": [{ "id": "write", "agent": "coder", "description": "write hello into out.txt" }] })
        .to_string(),
    );
    b.write("tasks/m/check.sh", CHECK);
    // The same step with a budget its first turn (15 tokens) crosses.
    b.write("tasks/over/repo/README", "x\n");
    b.write(
        "tasks/over/plan.json",
        &json!({ "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"],
                 "verification": ["v"],
                 "steps": [{ "id": "write", "agent": "coder", "description": "write hello into out.txt",
                             "budget": { "max_tokens": 10 } }] })
        .to_string(),
    );
    b.write("tasks/over/check.sh", CHECK);
    let suite = b.write(
        "suite.toml",
        "name = \"model\"\nconfig = \"config.toml\"\n[[task]]\nid = \"m\"\nrepo = \"tasks/m/repo\"\nrequest = \"r\"\nplan = \"tasks/m/plan.json\"\ncheck = \"tasks/m/check.sh\"\n[[task]]\nid = \"over\"\nrepo = \"tasks/over/repo\"\nrequest = \"r\"\nplan = \"tasks/over/plan.json\"\ncheck = \"tasks/over/check.sh\"\n",
    );
    let (dir, report) =
        tokio::task::block_in_place(|| b.run(&suite, "r", &["-k", "2", "--agent", "coder"]));
    let m = &report["tasks"]["m"];
    println!("m: {m}\nover: {}", report["tasks"]["over"]);
    assert_eq!(m["passed"], 2, "{report}");
    // Two turns a trial, 10 tokens in and 5 out each.
    assert_eq!(
        (m["input_tokens"].as_u64(), m["output_tokens"].as_u64()),
        (Some(40), Some(20))
    );
    let over = &report["tasks"]["over"];
    assert_eq!(over["failures"], json!({ "budget": 2 }), "{over}");
    assert!(over["input_tokens"].as_u64().unwrap() >= 20, "{over}");
    assert_eq!(report["agents"][0]["model"], "writer", "{report}");
    assert_eq!(report["agents"].as_array().unwrap().len(), 1);
    let out = tokio::task::block_in_place(|| b.verify(&dir.join("report.json")));
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

/// The scripted planner: lists the files, the same way, every turn (it stalls before it
/// makes any plan).
struct Stuck;

impl wiremock::Respond for Stuck {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let call = orca_testkit::fake_model::tool_call("l", "list_files", &json!({}));
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-stuck",
            &body["model"],
            vec![call],
        ))
    }
}

/// A planner that fails before it makes any plan leaves no log in the trial's store; what it
/// spent is still counted (it used to be 0), from the failure line `orca ask --json` writes,
/// and `eval verify` refuses the trial once that output is edited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_that_made_no_plan_has_its_tokens_counted() {
    let server = model_server(Stuck).await;
    let b = Bench::new();
    b.write(
        "config.toml",
        &format!(
            "[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"stuck\"\n",
            server.uri()
        ),
    );
    b.write("tasks/p/repo/README", "x\n");
    b.write("tasks/p/check.sh", CHECK);
    let suite = b.write(
        "suite.toml",
        "name = \"planner\"\nconfig = \"config.toml\"\n[[task]]\nid = \"p\"\nrepo = \"tasks/p/repo\"\nrequest = \"write hello into out.txt\"\ncheck = \"tasks/p/check.sh\"\ntimeout_secs = 120\n",
    );
    let (dir, report) = tokio::task::block_in_place(|| b.run(&suite, "r", &[]));
    let p = &report["tasks"]["p"];
    let trial = &report["trials"][0];
    let log = dir.join(format!("{}.orca.log", trial["dir"].as_str().unwrap()));
    println!(
        "p: {p}\ntrial: {trial}\noutput: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(p["failures"], json!({ "plan not made": 1 }), "{report}");
    // Every turn of the scripted model: 10 tokens in, 5 out.
    let (input, output) = (
        p["input_tokens"].as_u64().unwrap(),
        p["output_tokens"].as_u64().unwrap(),
    );
    assert!(input >= 10 && input % 10 == 0 && output == input / 2, "{p}");
    assert!(trial["figures"]["planner_output"].is_string(), "{trial}");
    // Why it failed, and the conversation the failed planner left in the trial: its calls.
    let failure = trial["figures"]["failure"].to_string();
    assert!(failure.contains("stalled"), "{failure}");
    let kept = failure
        .split("its conversation: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no conversation named: {failure}"));
    let conversation = dir.join(trial["dir"].as_str().unwrap()).join(kept);
    let text = std::fs::read_to_string(&conversation)
        .unwrap_or_else(|e| panic!("{}: {e}", conversation.display()));
    assert!(text.contains("\"tool\":\"list_files\""), "{text}");
    let out = tokio::task::block_in_place(|| b.verify(&dir.join("report.json")));
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    // The output edited (fewer tokens): refused, naming the figure.
    let text = std::fs::read_to_string(&log).unwrap();
    let edited = text.replacen(
        &format!("\"input_tokens\": {input}"),
        "\"input_tokens\": 1",
        1,
    );
    assert_ne!(edited, text, "{text}");
    std::fs::write(&log, edited).unwrap();
    let out = tokio::task::block_in_place(|| b.verify(&dir.join("report.json")));
    println!(
        "verify after the edit: exit {:?}: {}",
        code(&out),
        stderr(&out)
    );
    assert_eq!(code(&out), 5, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn the_built_in_suite_s_reference_solutions_pass_every_check() {
    let b = Bench::new();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/eval/reference.toml");
    let (_, report) = b.run(&suite, "r", &["--concurrency", "2"]);
    let total = &report["total"];
    println!("reference: {}/{}", total["passed"], total["trials"]);
    assert!(total["trials"].as_u64().unwrap() >= 12);
    assert_eq!(total["passed"], total["trials"], "{report}");
    let langs: std::collections::BTreeSet<&str> = report["tasks"]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.split('-').next())
        .collect();
    assert_eq!(
        langs.into_iter().collect::<Vec<_>>(),
        ["js", "py", "rs", "sh"]
    );
}

#[test]
fn the_built_in_suite_s_checks_fail_on_the_untouched_repos() {
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/eval/tasks");
    let mut failed = 0;
    let mut all = 0;
    for entry in std::fs::read_dir(&tasks).unwrap() {
        let task = entry.unwrap().path();
        let work = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/repo/.", task.display()))
            .arg(work.path())
            .status()
            .unwrap();
        assert!(status.success());
        let out = std::process::Command::new("sh")
            .arg(task.join("check.sh"))
            .current_dir(work.path())
            .output()
            .unwrap();
        // Its plan for the coder alone (coder.toml) and its reference solution are valid.
        for plan in ["coder.json", "solution.json"] {
            let path = task.join(plan);
            let shown = crate::common::orca(
                work.path(),
                work.path(),
                &["plan", "validate", path.to_str().unwrap()],
            );
            assert_eq!(code(&shown), 0, "{}: {}", path.display(), stderr(&shown));
        }
        all += 1;
        if out.status.success() {
            println!("PASSES untouched: {}", task.display());
        } else {
            failed += 1;
        }
    }
    println!("checks failing on the untouched repo: {failed} of {all}");
    assert!(all >= 12);
    assert_eq!(failed, all);
}

#[test]
fn report_md_format() {
    let b = Bench::new();
    let tasks = [
        b.task("passes", GOOD, CHECK),
        b.task("wrong-work", "echo helo > out.txt", CHECK),
    ];
    let suite = b.suite_file("format", "suite.toml", &tasks);
    let (dir, _) = b.run(&suite, "r", &["--agent", "shell"]);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let text = masked(&md);
    insta::assert_snapshot!(text);
}

/// The report with what changes from run to run (digests, keys, times) masked.
fn masked(md: &str) -> String {
    let mut out = String::new();
    for word in md.split_inclusive([' ', '\n', '|', '(', ')', ',']) {
        let (body, tail) = word.split_at(
            word.trim_end_matches([' ', '\n', '|', '(', ')', ',', '.'])
                .len(),
        );
        let masked = if body.starts_with("sha256:") {
            "sha256:[digest]".to_owned()
        } else if body.starts_with("ed25519:") {
            "ed25519:[key]".to_owned()
        } else if body.ends_with('s')
            && body.len() > 1
            && body[..body.len() - 1].parse::<f64>().is_ok()
        {
            "[time]".to_owned()
        } else {
            body.to_owned()
        };
        out.push_str(&masked);
        out.push_str(tail);
    }
    out
}

/// A real model, only when `ORCA_EVAL_LIVE_URL` names an OpenAI-compatible endpoint (e.g.
/// llama.cpp's `llama-server` at `http://127.0.0.1:8088/v1`; `ORCA_EVAL_LIVE_MODEL` names the
/// model, `ORCA_EVAL_LIVE_TASKS` the tasks, comma-separated): the built-in coder suite runs
/// through it and its report verifies. Without the variable it does nothing (no test calls a
/// remote model).
#[test]
fn live_model_runs_the_coder_suite_and_its_report_verifies() {
    let Ok(url) = std::env::var("ORCA_EVAL_LIVE_URL") else {
        println!("ORCA_EVAL_LIVE_URL is not set: no live model");
        return;
    };
    let model = std::env::var("ORCA_EVAL_LIVE_MODEL").unwrap_or_else(|_| "local".to_owned());
    let tasks = std::env::var("ORCA_EVAL_LIVE_TASKS")
        .unwrap_or_else(|_| "py-fix-failing-test,sh-spaces".to_owned());
    let b = Bench::new();
    let config = b.out.path().join("live.toml");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/eval");
    let text = std::fs::read_to_string(example.join("llama-server.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8088/v1", &url)
        .replace("model = \"local\"", &format!("model = \"{model}\""));
    std::fs::write(&config, text).unwrap();
    let mut args = vec!["--config", config.to_str().unwrap(), "--agent", "coder"];
    for t in tasks.split(',') {
        args.extend(["--task", t]);
    }
    let (dir, report) = b.run(&example.join("coder.toml"), "live", &args);
    println!(
        "{}",
        std::fs::read_to_string(dir.join("report.md")).unwrap()
    );
    assert_eq!(report["total"]["trials"], tasks.split(',').count());
    let out = b.verify(&dir.join("report.json"));
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}
