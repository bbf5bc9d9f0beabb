//! Each door issue 30 found, tried as an attacker would: the measurement server
//! (`server`), the emulator's control API and control socket (`api`), and what a local
//! user or a crafted file reaches (`local`). Each test fails on the code before the fix.
//!
//! The ones that need CAP_NET_ADMIN fail in CI without it and say SKIPPED elsewhere.

mod api;
pub(crate) mod local;
mod server;
