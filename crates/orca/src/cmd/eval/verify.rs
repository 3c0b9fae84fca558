//! `orca eval verify REPORT`: the signature, the suite's digest, and every figure recomputed
//! from the kept trials (their `.orca/` read again, the hidden checks run again on a copy).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::measure;
use super::report::{self, Report};
use super::suite::Suite;
use crate::app::{out, out_json};
use crate::cli::Global;
use crate::exit::{CliError, Exit};

fn report_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    }
}

/// A scratch copy of a trial, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a trial to a scratch directory, so the re-run check changes nothing kept.
fn scratch_copy(root: &Path, n: usize) -> Result<Scratch, CliError> {
    let dir = std::env::temp_dir().join(format!(
        "orca-eval-verify-{}-{n}-{}",
        std::process::id(),
        time::OffsetDateTime::now_utc().unix_timestamp_nanos()
    ));
    let scratch = Scratch(dir.clone());
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(root)
        .arg(&dir)
        .status()
        .map_err(|e| CliError::internal(format!("cannot run cp: {e}")))?;
    if !status.success() {
        return Err(CliError::internal(format!(
            "cannot copy {} to check it again",
            root.display()
        )));
    }
    Ok(scratch)
}

pub(crate) async fn verify(path: &Path, global: &Global) -> Result<Exit, CliError> {
    let file = report_path(path);
    let report = Report::read(&file)?;
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut problems: Vec<String> = Vec::new();

    let (authority, _) =
        crate::trust::authority(&base, &global.trusted_key, crate::trust::KeyUse::Verify)?;
    if let Err(e) = authority.check(&report.statement()?, report.signature.as_ref()) {
        problems.push(format!("the report's signature: {e}"));
    }

    let suite = Suite::load(Path::new(&report.suite.path))?;
    let digest = suite.digest()?.to_string();
    if digest != report.suite.digest {
        problems.push(format!(
            "the suite {} now has digest {digest}, the report measured {}",
            report.suite.path, report.suite.digest
        ));
    }

    // The trials: each task of the report k times, once each.
    let mut seen = BTreeSet::new();
    for t in &report.trials {
        if !seen.insert((t.task.clone(), t.trial)) || t.trial == 0 || t.trial > report.k {
            problems.push(format!(
                "trial {} #{}: listed twice or out of range",
                t.task, t.trial
            ));
        }
        if t.dir != super::trial::trial_dir(&t.task, t.trial) {
            problems.push(format!(
                "trial {} #{}: dir `{}` is not its own",
                t.task, t.trial, t.dir
            ));
        }
    }
    let tasks: BTreeSet<&str> = report.trials.iter().map(|t| t.task.as_str()).collect();
    if seen.len() != tasks.len() * report.k as usize {
        problems.push(format!(
            "{} trial(s) for {} task(s) × {}",
            seen.len(),
            tasks.len(),
            report.k
        ));
    }

    for t in &report.trials {
        let name = format!("trial {} #{}", t.task, t.trial);
        let Some(task) = suite.tasks.iter().find(|x| x.id == t.task) else {
            problems.push(format!("{name}: the suite has no task `{}`", t.task));
            continue;
        };
        let root = base.join(&t.dir);
        let store = match measure::open_store(&root, &global.trusted_key) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{name}: {}", e.message));
                continue;
            }
        };
        let output = base.join(format!("{}.orca.log", t.dir));
        let measured = match measure::measure_trial(&store, &output).await {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{name}: {}", e.message));
                continue;
            }
        };
        for log in &measured.tampered {
            problems.push(format!("{name}: the {log} does not verify"));
        }
        let status = match measured.completed {
            Some(run) => {
                let copy = scratch_copy(&root, seen.len())?;
                let log = copy.0.with_extension("check.log");
                let status = measure::run_check(&task.check, &copy.0, &log, run).await;
                let _ = std::fs::remove_file(&log);
                Some(status?)
            }
            None => None,
        };
        let again = measure::with_check(measured, status);
        if again != t.figures {
            let was = serde_json::to_value(&t.figures).unwrap_or_default();
            let now = serde_json::to_value(&again).unwrap_or_default();
            let fields: Vec<String> = was
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| now.get(k.as_str()) != Some(v))
                .map(|(k, v)| {
                    format!(
                        "{k}: report {v}, recomputed {}",
                        now.get(k.as_str()).cloned().unwrap_or_default()
                    )
                })
                .collect();
            problems.push(format!("{name}: {}", fields.join("; ")));
        }
    }

    let (tasks_again, total_again) = report::figures(&report.trials);
    for (task, s) in &report.tasks {
        if tasks_again.get(task) != Some(s) {
            problems.push(format!(
                "task {task}: its figures are not those of its trials"
            ));
        }
    }
    if tasks_again.len() != report.tasks.len() {
        problems.push("the tasks summarized are not those of the trials".to_owned());
    }
    if total_again != report.total {
        problems.push("the total is not that of the trials".to_owned());
    }

    if global.json {
        out_json(&serde_json::json!({
            "report": file,
            "trials": report.trials.len(),
            "ok": problems.is_empty(),
            "problems": problems,
        }));
    } else if problems.is_empty() {
        out(&format!(
            "{}: verified — signature, suite digest and {} trial(s) recomputed: pass@1 {}/{}, pass^k {}/{}",
            file.display(),
            report.trials.len(),
            report.total.passed,
            report.total.trials,
            report.total.pass_all,
            report.tasks.len()
        ));
    } else {
        out(&format!("{}: DOES NOT VERIFY", file.display()));
        for p in &problems {
            out(&format!("  {p}"));
        }
    }
    Ok(if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::Tampered
    })
}
