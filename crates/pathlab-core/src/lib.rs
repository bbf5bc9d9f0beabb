//! pathlab-core: the sans-IO network path emulation model.
//!
//! This layer holds time, packets, impairment stages, queues and AQMs, rate models and the
//! links they compose, the parser for link specifications, and the one [`quantile`]
//! definition every crate reports percentiles by. It performs no I/O, reads
//! no clock and starts no thread: every entry point takes `now`, and randomness comes from
//! a seeded [`rng::Rng`]. That is what lets every model run in a discrete-event simulation
//! in virtual time ([`sim`]), exactly and fast, and be driven by a real-time emulator in
//! `pathlab-io` without change.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod harness;
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

pub use link::{Link, Path};
pub use packet::{Ecn, Packet};
pub use spec::LinkSpec;
pub use time::{Duration, Instant};
pub use units::{BitsPerSec, PacketsPerSec, Probability};
pub use verdict::{DropReason, Verdicts};
