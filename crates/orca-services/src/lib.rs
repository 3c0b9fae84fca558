//! # orca-services
//!
//! The service layer: planning, approval, the execution runner, dispatch, HITL and the relay.
