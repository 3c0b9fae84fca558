//! Short ids that stay unique: plans and executions created as fast as the CLI allows (so
//! their UUIDv7 timestamps are shared) get short ids from their random digits, every short id
//! printed at creation still resolves to its own record afterwards, a plan and its execution
//! never print the same digits, and `-q` prints the full id alone (or nothing).

use crate::common::project::{Project, code, one_step, stderr, stdout};

use serde_json::Value;

/// Every `prefix…` token in `text`.
fn tokens(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect::<String>()
        })
        .filter(|t| t.len() > prefix.len())
        .collect()
}

/// The full ids of `all` that `short` names, by the rule the resolver applies: the uuid starts
/// with its digits, or (eight or more) ends with them.
fn named<'a>(all: &'a [String], kind: &str, short: &str) -> Vec<&'a str> {
    let hex = short.strip_prefix(kind).unwrap_or(short);
    all.iter()
        .filter(|id| {
            let uuid = &id[kind.len()..];
            uuid.starts_with(hex) || (hex.len() >= 8 && uuid.ends_with(hex))
        })
        .map(String::as_str)
        .collect()
}

#[test]
fn two_hundred_runs_in_a_row_print_short_ids_that_still_resolve() {
    const RUNS: usize = 200;
    let p = Project::new();
    let plan = p.write("plan.json", &one_step("one of many"));
    let plan = plan.display().to_string();
    let started = std::time::Instant::now();
    // What each run printed for people: (plan short id, exec short id).
    let mut printed: Vec<(String, String)> = Vec::new();
    for _ in 0..RUNS {
        let out = p.run(&["run", &plan, "--yes"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = format!("{}{}", stdout(&out), stderr(&out));
        let plans = tokens(&text, "plan_");
        let execs = tokens(&text, "exec_");
        assert!(
            plans.iter().all(|t| *t == plans[0]) && execs.iter().all(|t| *t == execs[0]),
            "one short id per record in one run's output: {text}"
        );
        printed.push((plans[0].clone(), execs[0].clone()));
    }
    println!(
        "{RUNS} runs (a plan and an execution each) in {:?}",
        started.elapsed()
    );

    let (c, listed) = p.json(&["exec", "list"]);
    assert_eq!(c, 0);
    let listed = listed.as_array().unwrap();
    let execs: Vec<String> = listed
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_owned())
        .collect();
    let plans: Vec<String> = listed
        .iter()
        .map(|e| e["plan_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(execs.len(), RUNS);

    // The control: created this fast, their first eight digits (a timestamp) are shared, so
    // prefixes of that length could not tell them apart.
    let mut firsts: Vec<&str> = execs.iter().map(|e| &e[.."exec_".len() + 8]).collect();
    firsts.sort_unstable();
    firsts.dedup();
    println!(
        "distinct first-8-digit prefixes among {RUNS} executions: {}",
        firsts.len()
    );
    assert!(firsts.len() < RUNS / 2, "the ids share their timestamps");

    let mut ambiguous = 0;
    let mut same_digits = 0;
    for (plan_short, exec_short) in &printed {
        for (all, kind, short) in [(&plans, "plan_", plan_short), (&execs, "exec_", exec_short)] {
            if named(all, kind, short).len() != 1 {
                ambiguous += 1;
                println!("ambiguous: {short}");
            }
        }
        if plan_short["plan_".len()..] == exec_short["exec_".len()..] {
            same_digits += 1;
        }
    }
    println!(
        "printed short ids naming more or less than one record afterwards: {ambiguous}; plans and executions printed with the same digits: {same_digits}"
    );
    assert_eq!(ambiguous, 0);
    assert_eq!(same_digits, 0);

    // And the binary resolves them (every fourth execution, every twentieth plan: a command each)
    // to the record they were printed for.
    let mut wrong = 0;
    for (i, (plan_short, exec_short)) in printed.iter().enumerate() {
        if i % 4 != 0 {
            continue;
        }
        let (c, shown) = p.json(&["exec", "show", exec_short]);
        assert_eq!(c, 0, "{exec_short}: {shown}");
        let exec = shown["execution_id"].as_str().unwrap_or_default();
        if named(&execs, "exec_", exec_short) != [exec] {
            wrong += 1;
        }
        if i % 20 == 0 {
            let (c, shown) = p.json(&["plan", "show", plan_short]);
            assert_eq!(c, 0, "{plan_short}: {shown}");
            let plan = find_str(&shown, "plan_id").unwrap_or_default();
            if named(&plans, "plan_", plan_short) != [plan.as_str()] {
                wrong += 1;
            }
        }
    }
    println!("short ids resolved by the binary to another record: {wrong}");
    assert_eq!(wrong, 0);
}

/// The first string value of `key` anywhere in `v`.
fn find_str(v: &Value, key: &str) -> Option<String> {
    match v {
        Value::Object(m) => m
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| m.values().find_map(|x| find_str(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_str(x, key)),
        _ => None,
    }
}

#[test]
fn quiet_prints_the_full_id_alone_or_nothing() {
    let p = Project::new();
    let plan = p.write("plan.json", &one_step("quiet"));
    let plan = plan.display().to_string();
    let full = |out: &std::process::Output, kind: &str| {
        let text = stdout(out);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {text:?}");
        assert!(
            lines[0].starts_with(kind) && lines[0].len() == kind.len() + 36,
            "a full id: {text:?}"
        );
        lines[0].to_owned()
    };

    let out = p.run(&["-q", "plan", "create", "--file", &plan]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let created = full(&out, "plan_");
    let out = p.run(&["-q", "run", &created, "--yes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let exec = full(&out, "exec_");
    assert_eq!(stderr(&out), "", "nothing on stderr either");
    let (_, shown) = p.json(&["exec", "show", &exec]);
    assert_eq!(find_str(&shown, "plan_id").unwrap(), created);

    let out = p.run(&["-q", "exec", "retry", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let retried = full(&out, "exec_");
    assert_ne!(retried, exec);

    let out = p.run(&["-q", "run", &plan, "--yes"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    full(&out, "exec_");

    // A failing step: the id still (the execution exists), the outcome in the exit code.
    let failing = p.write(
        "failing.json",
        &crate::common::project::plan_doc("fails", &[("only", "exit 3", &[])]),
    );
    let out = p.run(&["-q", "run", failing.to_str().unwrap(), "--yes"]);
    println!("a failing run with -q: exit {}", code(&out));
    assert_ne!(code(&out), 0);
    full(&out, "exec_");

    // Nothing created: nothing on stdout, the error on stderr.
    let bad = p.write("bad.json", "{ not a plan");
    let out = p.run(&["-q", "plan", "create", "--file", bad.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert_eq!(stdout(&out), "");
    assert!(stderr(&out).contains("bad.json"), "{}", stderr(&out));
}
