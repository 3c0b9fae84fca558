//! # orca-agents
//!
//! Agent backends and adapters, the agent loop, built-in profiles and workspace tools.
