//! `orca audit`: `verify` checks every record and signature; `show` prints a log.

pub(crate) mod shared;
pub(crate) mod show;
pub(crate) mod verify;
