//! pathlab-lab: experiments: specs, namespaced topologies, runs and recipes.
//!
//! A spec in TOML (nodes, links with a link SPEC per direction, workloads and events on a
//! timeline) is built as network namespaces joined by veth pairs with a pathlab emulator
//! on every emulated link, run, and recorded.

#![forbid(unsafe_code)]

pub mod addressing;
pub mod descriptors;
pub mod modem_pps;
pub mod recipes;
pub mod run;
pub mod spec;
pub mod summary;
pub mod topology;
pub mod workload;

pub use spec::{Experiment, SpecFileError};
