//! The crate's integration tests, one test binary (one link, one process start) with a
//! module per area.

mod approvals;
mod claim_tamper;
mod faults;
mod flows;
mod fuzz;
mod lock_waits;
mod model;
mod planner_log;
mod replan;
mod slots;
mod support;
mod team_policy;
mod tool_table;
mod workers;
