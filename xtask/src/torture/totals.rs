//! The campaign's totals and the figures it prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::counts::KillPoint;
use super::rounds::RoundStats;
use crate::util;

#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) attempts: usize,
    pub(super) extra_effects: usize,
    pub(super) abandoned: usize,
    pub(super) failed: usize,
    pub(super) tmp_files: usize,
    pub(super) kills: usize,
    pub(super) completions_lost: usize,
    pub(super) double_runs: usize,
    pub(super) lock_overlaps: usize,
    pub(super) orphans: usize,
    pub(super) failed_resumes: usize,
    pub(super) unverified_logs: usize,
    pub(super) decisions: usize,
    pub(super) slowest_orphan_exit: Duration,
    pub(super) kills_by_point: BTreeMap<KillPoint, usize>,
}

impl Totals {
    pub(super) fn add(&mut self, o: &Self) {
        self.attempts += o.attempts;
        self.extra_effects += o.extra_effects;
        self.abandoned += o.abandoned;
        self.failed += o.failed;
        // The store directory is shared by the rounds: the latest count is the total.
        self.tmp_files = o.tmp_files;
        self.completions_lost += o.completions_lost;
        self.double_runs += o.double_runs;
        self.lock_overlaps += o.lock_overlaps;
        self.unverified_logs += o.unverified_logs;
    }

    pub(super) fn add_round(&mut self, r: &RoundStats) {
        self.kills += r.kills;
        self.orphans += r.orphans;
        self.failed_resumes += r.failed_resumes;
        self.decisions += r.decisions;
        self.slowest_orphan_exit = self.slowest_orphan_exit.max(r.slowest_orphan_exit);
        for (p, n) in &r.kills_by_point {
            *self.kills_by_point.entry(*p).or_default() += n;
        }
    }
}

/// Prints the campaign's figures; fails if any count that must be 0 is not.
pub(super) fn report(
    totals: &Totals,
    rounds: usize,
    took: Duration,
    seed: u64,
) -> Result<(), String> {
    let mut by_point = String::new();
    for p in KillPoint::ALL {
        let _ = write!(
            by_point,
            "{}{} {}",
            if by_point.is_empty() { "" } else { ", " },
            totals.kills_by_point.get(&p).copied().unwrap_or(0),
            p.name()
        );
    }
    let figures = [
        ("kills", totals.kills, false),
        ("completions lost", totals.completions_lost, true),
        ("double concurrent runs", totals.double_runs, true),
        ("lock overlaps", totals.lock_overlaps, true),
        ("orphans alive 2 s after a kill", totals.orphans, true),
        ("failed resumes", totals.failed_resumes, true),
        ("logs that did not verify", totals.unverified_logs, true),
    ];
    util::say(&format!(
        "torture campaign: {rounds} rounds in {:.1} s (seed {seed})",
        took.as_secs_f64()
    ));
    for (name, n, _) in figures {
        util::say(&format!("  {name:<32} {n}"));
    }
    util::say(&format!("  kill points: {by_point}"));
    util::say(&format!(
        "  decisions answered {}; {} extra effects, all explained by {} recorded \
         abandoned/failed attempts; {} leftover temp files; slowest step-process exit after a \
         kill {} ms",
        totals.decisions,
        totals.extra_effects,
        totals.abandoned + totals.failed,
        totals.tmp_files,
        totals.slowest_orphan_exit.as_millis()
    ));
    let bad: Vec<String> = figures
        .iter()
        .filter(|(_, n, must_be_zero)| *must_be_zero && *n > 0)
        .map(|(name, n, _)| format!("{name}: {n}"))
        .collect();
    if !bad.is_empty() {
        return Err(format!("torture failed: {}", bad.join(", ")));
    }
    util::say("torture passed: every count that must be 0 is 0");
    Ok(())
}
