//! Approval policies: who must approve a plan, matched on what the plan declares (ADR
//! "approvals for a team").
//!
//! A [`Policy`] names approvers (a name and a public key, as text: checking signatures is the
//! store's job) and [`Rule`]s. A rule matches a plan by what it declares ([`When`]: paths in
//! `writes`, agents, backends, `env` names, a cost ceiling above a limit, an isolation, the
//! project) and requires `n` approvals from a set of approvers, never counting the plan's
//! requester. [`Policy::requirements`] lists what a plan needs; [`tally`] counts the approvals
//! and rejections given so far. Nothing here reads a file or a clock: the caller says what time
//! it is and which rules have escalated.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::format::FormatVersion;
use crate::id::AgentId;
use crate::isolation::Isolation;
use crate::plan::PlanContent;
use crate::writes::{WritePattern, overlap};

mod tally;

pub use tally::{Outcome, RuleTally, Tally, Verdict, Vote, tally};

/// An approver's name in a policy: 1 to 64 ASCII letters, digits, `.`, `_` or `-`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ApproverName(String);

impl ApproverName {
    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ApproverName {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        let ok = !text.is_empty()
            && text.len() <= 64
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(Self(text))
        } else {
            Err(format!(
                "`{text}` is not an approver name (1 to 64 letters, digits, `.`, `_`, `-`)"
            ))
        }
    }
}

impl std::str::FromStr for ApproverName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_owned())
    }
}

impl From<ApproverName> for String {
    fn from(name: ApproverName) -> Self {
        name.0
    }
}

impl std::fmt::Display for ApproverName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An approval policy, as its (signed) file says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The document format.
    pub format_version: FormatVersion,
    /// Who may approve: name → public key (`ed25519:<hex>`).
    pub approvers: BTreeMap<ApproverName, String>,
    /// The rules, in the file's order. A plan no rule matches needs one approval from any
    /// approver.
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
}

/// One rule: when it applies, and what it requires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique within the policy; named in reports and audit entries.
    pub name: String,
    /// What a plan must declare for the rule to apply (every condition given must hold).
    #[serde(default)]
    pub when: When,
    /// How many distinct approvers must approve.
    pub require: u32,
    /// Who counts (omitted: every approver). The requester never counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Vec<ApproverName>>,
    /// Seconds after the request after which an unanswered plan is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_secs: Option<u64>,
    /// Seconds before the expiry at which the approvers are reminded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remind_before_secs: Option<u64>,
    /// Seconds after the request after which `escalate_to` also counts (and is asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_after_secs: Option<u64>,
    /// Who is asked on escalation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalate_to: Vec<ApproverName>,
}

/// The conditions of a rule; each list matches when the plan declares any of its items, and
/// every condition given must match. A rule with no condition matches every plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// Write patterns; matches when a step's declared write overlaps one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Agents; matches when a step uses one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentId>,
    /// Backends (`openai`, `anthropic`, `claude-code`…); matches when an agent the plan uses
    /// runs on one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
    /// Environment variable names; matches when a step requests one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Matches when the plan's cost ceiling is above this many US dollars (a plan without a
    /// ceiling is unlimited, so above every limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_above_usd: Option<f64>,
    /// Matches when a step runs with this isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Project names; matches when the plan is in one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub project: Vec<String>,
}

/// What a plan declares, as a policy sees it: its content, and what the caller knows around it.
#[derive(Debug, Clone, Copy)]
pub struct PlanFacts<'a> {
    /// The plan's content.
    pub content: &'a PlanContent,
    /// The project's name.
    pub project: Option<&'a str>,
    /// The backends of the agents the plan uses.
    pub backends: &'a BTreeSet<String>,
    /// The project's default isolation for steps that declare writes.
    pub isolation_fallback: Option<Isolation>,
}

/// What a plan needs under one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    /// The rule's name (`default` when no rule matched).
    pub rule: String,
    /// Why it matched, one phrase per condition.
    pub because: Vec<String>,
    /// Distinct approvals needed.
    pub need: u32,
    /// Who counts before any escalation.
    pub from: BTreeSet<ApproverName>,
    /// Who else counts once the rule escalated.
    pub escalate_to: BTreeSet<ApproverName>,
    /// The rule's timers (seconds after the request).
    pub expire_after_secs: Option<u64>,
    /// Seconds before the expiry for the reminder.
    pub remind_before_secs: Option<u64>,
    /// Seconds after the request for the escalation.
    pub escalate_after_secs: Option<u64>,
}

/// What is wrong with a policy document's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// The name of what a plan needs when no rule matches.
pub const DEFAULT_RULE: &str = "default";

impl Policy {
    /// Every problem of the policy's content, joined: duplicate rule names, unknown approvers,
    /// a requirement no set of approvers can meet, malformed write patterns.
    ///
    /// # Errors
    ///
    /// The first problem found, naming the rule and field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.approvers.is_empty() {
            return Err(PolicyError(
                "approvers: the policy names no approver".into(),
            ));
        }
        let mut names = BTreeSet::new();
        for rule in &self.rules {
            let at = |field: &str| format!("rule `{}`: {field}", rule.name);
            if rule.name.is_empty() || rule.name == DEFAULT_RULE || !names.insert(&rule.name) {
                return Err(PolicyError(format!(
                    "rule `{}`: a rule's name must be unique, not empty and not `{DEFAULT_RULE}`",
                    rule.name
                )));
            }
            for name in rule.from.iter().flatten().chain(&rule.escalate_to) {
                if !self.approvers.contains_key(name) {
                    return Err(PolicyError(format!(
                        "{}: `{name}` is not one of the approvers",
                        at("from / escalate_to")
                    )));
                }
            }
            let pool = self.pool(rule).len() + rule.escalate_to.len();
            if rule.require == 0 || rule.require as usize > pool {
                return Err(PolicyError(format!(
                    "{}: {} cannot be met by the {pool} approvers named",
                    at("require"),
                    rule.require
                )));
            }
            for w in &rule.when.writes {
                WritePattern::parse(w)
                    .map_err(|e| PolicyError(format!("{}: `{w}`: {e}", at("when.writes"))))?;
            }
            if rule
                .when
                .budget_above_usd
                .is_some_and(|b| !b.is_finite() || b < 0.0)
            {
                return Err(PolicyError(at("when.budget_above_usd: must be >= 0")));
            }
            if rule.escalate_after_secs.is_some() == rule.escalate_to.is_empty() {
                return Err(PolicyError(at(
                    "escalate_after_secs and escalate_to go together",
                )));
            }
            if rule.remind_before_secs.is_some() && rule.expire_after_secs.is_none() {
                return Err(PolicyError(at(
                    "remind_before_secs needs expire_after_secs",
                )));
            }
        }
        Ok(())
    }

    fn pool(&self, rule: &Rule) -> BTreeSet<ApproverName> {
        rule.from.as_ref().map_or_else(
            || self.approvers.keys().cloned().collect(),
            |from| from.iter().cloned().collect(),
        )
    }

    /// The approver whose key is `key`, if any.
    #[must_use]
    pub fn approver_with_key(&self, key: &str) -> Option<&ApproverName> {
        self.approvers
            .iter()
            .find_map(|(name, k)| (k == key).then_some(name))
    }

    /// What a plan needs: one requirement per matching rule, or the default (one approval
    /// from any approver) when none matches.
    #[must_use]
    pub fn requirements(&self, facts: &PlanFacts<'_>) -> Vec<Requirement> {
        self.requirements_seen(facts, true)
    }

    /// What `content` needs when nobody trusted attests the surroundings (project, backends,
    /// default isolation): every rule whose conditions on the content hold, its conditions on
    /// the surroundings taken as holding. Never less than [`Policy::requirements`] asks for any
    /// surroundings: a rule matched there is matched here.
    #[must_use]
    pub fn requirements_unattested(&self, content: &PlanContent) -> Vec<Requirement> {
        let none = BTreeSet::new();
        self.requirements_seen(
            &PlanFacts {
                content,
                project: None,
                backends: &none,
                isolation_fallback: None,
            },
            false,
        )
    }

    fn requirements_seen(&self, facts: &PlanFacts<'_>, attested: bool) -> Vec<Requirement> {
        let matched: Vec<Requirement> = self
            .rules
            .iter()
            .filter_map(|rule| {
                let because = matches(&rule.when, facts, attested)?;
                Some(Requirement {
                    rule: rule.name.clone(),
                    because,
                    need: rule.require,
                    from: self.pool(rule),
                    escalate_to: rule.escalate_to.iter().cloned().collect(),
                    expire_after_secs: rule.expire_after_secs,
                    remind_before_secs: rule.remind_before_secs,
                    escalate_after_secs: rule.escalate_after_secs,
                })
            })
            .collect();
        if !matched.is_empty() {
            return matched;
        }
        vec![Requirement {
            rule: DEFAULT_RULE.to_owned(),
            because: vec!["no rule matched".to_owned()],
            need: 1,
            from: self.approvers.keys().cloned().collect(),
            escalate_to: BTreeSet::new(),
            expire_after_secs: None,
            remind_before_secs: None,
            escalate_after_secs: None,
        }]
    }
}

/// The plan's cost ceiling in micro-dollars: the plan's budget, else the sum of the steps'
/// when every step has one, else `None` (unlimited).
fn cost_ceiling(content: &PlanContent) -> Option<u64> {
    if let Some(c) = content.budget.and_then(|b| b.max_cost_micro_usd) {
        return Some(c);
    }
    content.steps.iter().try_fold(0u64, |sum, s| {
        s.budget
            .and_then(|b| b.max_cost_micro_usd)
            .map(|c| sum.saturating_add(c))
    })
}

/// Why `when` matches the plan (one phrase per condition), or `None` when it does not.
/// Whether a rule's `when` holds. Without `attested` surroundings, its conditions on them
/// (backends, isolation by the project's default, project) are taken as holding.
fn matches(when: &When, facts: &PlanFacts<'_>, attested: bool) -> Option<Vec<String>> {
    let content = facts.content;
    let mut because = Vec::new();
    if !when.writes.is_empty() {
        let patterns: Vec<WritePattern> = when
            .writes
            .iter()
            .filter_map(|w| WritePattern::parse(w).ok())
            .collect();
        let hit = content.steps.iter().flat_map(|s| &s.writes).find(|w| {
            WritePattern::parse(w).is_ok_and(|w| patterns.iter().any(|p| overlap(p, &w)))
        })?;
        because.push(format!("writes {hit}"));
    }
    if !when.agents.is_empty() {
        let hit = content
            .steps
            .iter()
            .map(|s| &s.agent)
            .find(|a| when.agents.contains(a))?;
        because.push(format!("uses agent {hit}"));
    }
    if !when.backends.is_empty() && !attested {
        because.push("may use a backend it names (surroundings not attested)".to_owned());
    } else if !when.backends.is_empty() {
        let hit = when.backends.iter().find(|b| facts.backends.contains(*b))?;
        because.push(format!("uses backend {hit}"));
    }
    if !when.env.is_empty() {
        let hit = content
            .steps
            .iter()
            .flat_map(|s| &s.env)
            .find(|e| when.env.contains(e))?;
        because.push(format!("requests env {hit}"));
    }
    if let Some(limit) = when.budget_above_usd {
        // Micro-dollars, as budgets count; the limit is validated finite and >= 0.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a validated, non-negative dollar amount"
        )]
        let limit_micro = (limit * 1e6).round() as u64;
        match cost_ceiling(content) {
            Some(c) if c <= limit_micro => return None,
            Some(c) => because.push(format!("budget {} above ${limit:.2}", usd(c))),
            None => because.push(format!("no cost ceiling (above ${limit:.2})")),
        }
    }
    if let Some(iso) = when.isolation {
        // Unattested, the project's default could be any isolation.
        let fallbacks = if attested {
            vec![facts.isolation_fallback]
        } else {
            vec![None, Some(iso)]
        };
        content.steps.iter().find(|s| {
            fallbacks
                .iter()
                .any(|f| Isolation::of(s, content, *f) == iso)
        })?;
        because.push(format!("runs {}", iso_name(iso)));
    }
    if !when.project.is_empty() && !attested {
        because.push("may be in a project it names (surroundings not attested)".to_owned());
    } else if !when.project.is_empty() {
        let hit = facts
            .project
            .filter(|p| when.project.iter().any(|w| w == p))?;
        because.push(format!("in project {hit}"));
    }
    if because.is_empty() {
        because.push("every plan".to_owned());
    }
    Some(because)
}

/// Micro-dollars as `$12.34`, without floating point.
fn usd(micro: u64) -> String {
    let cents = micro / 10_000;
    format!("${}.{:02}", cents / 100, cents % 100)
}

const fn iso_name(iso: Isolation) -> &'static str {
    match iso {
        Isolation::InPlace => "in place",
        Isolation::Worktree => "in a worktree",
    }
}
