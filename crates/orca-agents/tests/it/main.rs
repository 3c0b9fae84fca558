//! The crate's integration tests, one test binary (one link, one process start) with a
//! module per area.

mod agent_loop;
mod answers;
mod anthropic_cache;
mod cli;
mod cli_answers;
mod cli_declared;
mod cli_invocation;
mod common;
mod config;
mod confinement;
mod custom_backend;
mod fake_models;
mod fake_stream;
mod fuzz;
mod generation;
mod generation_loop;
mod http;
mod live;
mod net;
mod net_support;
mod ollama;
mod ollama_stream;
mod real_clis;
mod responses;
mod sandbox;
mod secrets;
mod shell;
mod stalls;
mod step_env;
mod streaming;
mod weak_model;
mod window_probe;
mod workspace;
