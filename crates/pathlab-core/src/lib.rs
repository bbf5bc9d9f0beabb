//! pathlab-core: the sans-IO network path emulation model.
//!
//! This layer holds time, packets, impairment stages, queues and AQMs, rate models and the
//! links they compose, the parser for link specifications, checked views of the wire
//! formats the model and its drivers read ([`wire`], with the undoing of offloads the
//! kernel leaves to hardware: [`wire::offload`]), the frame buffers its drivers reuse
//! ([`buffers`]), and the one [`quantile`] definition
//! every crate reports percentiles by. It performs no I/O, reads
//! no clock and starts no thread: every entry point takes `now`, and randomness comes from
//! a seeded [`rng::Rng`]. That is what lets every model run in a discrete-event simulation
//! in virtual time ([`sim`]), exactly and fast, and be driven by a real-time emulator in
//! `pathlab-emulator` without change.
//!
//! It also holds [`format`], the one way rates, times, sizes and percentages are written
//! for people, since every crate that prints them (the CLI, reports, `tune`, `inspect`,
//! the lab) depends on this one, and [`explain`], what a spec does in words.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod buffers;
pub mod explain;
pub mod format;
pub mod harness;
pub mod heap;
pub mod link;
pub mod packet;
pub mod quantile;
pub mod queue;
pub mod record;
pub mod rng;
pub mod sim;
pub mod spec;
pub mod stage;
pub mod time;
pub mod units;
pub mod verdict;
pub mod wire;

pub use link::{Link, Path};
pub use packet::{Ecn, Packet};
pub use spec::LinkSpec;
pub use time::{Duration, Instant};
pub use units::{BitsPerSec, PacketsPerSec, Probability};
pub use verdict::{DropReason, Verdicts};
