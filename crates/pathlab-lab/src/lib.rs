//! pathlab-lab: experiments: specs, namespaced topologies, runs and recipes.
//!
//! A spec in TOML (nodes, links with a link SPEC per direction, workloads and events on a
//! timeline) is built as network namespaces joined by veth pairs with a pathlab emulator
//! on every emulated link, run, and recorded. [`sweep`] runs a whole experiment, every point
//! of its sweep, from a [`RunConfig`] the command line builds; nothing here prints to
//! standard output: the command line prints what [`sweep::run`] tells its observer.

#![forbid(unsafe_code)]

pub mod addressing;
pub mod descriptors;
pub mod modem_pps;
pub mod recipes;
pub mod run;
pub mod spec;
pub mod summary;
pub mod sweep;
pub mod topology;
pub mod twin_check;
pub mod workload;

pub use spec::{Experiment, SpecFileError};
pub use sweep::{ExperimentSource, PlannedRun, RunConfig, RunControls, SweepEvent, SweepOutcome};
