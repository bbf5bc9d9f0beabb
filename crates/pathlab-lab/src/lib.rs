//! pathlab experiments: a spec in TOML (nodes, links with a link SPEC per direction,
//! workloads and events on a timeline), built as network namespaces joined by veth pairs
//! with a pathlab emulator on every emulated link, run, and recorded.

#![forbid(unsafe_code)]

pub mod spec;

pub use spec::{Experiment, SpecFileError};
