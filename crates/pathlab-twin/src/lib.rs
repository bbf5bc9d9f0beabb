//! pathlab-twin: the sans-IO estimators of a measured path's twin and its file.
//!
//! A twin is what `pathlab twin` learns of a real path, per direction, for the emulator to
//! replay: the base one-way delay and the delay's variation at low load (an empirical
//! distribution, [`delay`]), loss and its burstiness ([`loss`]), the bottleneck's rate and
//! packet-rate limit, the buffer in front of it and how it drops ([`bottleneck`]), whether
//! that buffer keeps flows apart ([`isolation`]), how it restarts after an idle spell
//! ([`restart`]), and a delivery trace when the rate moves
//! over time ([`trace`]). Each figure comes with its
//! 95% confidence interval and how it was measured ([`figure::Figure`]).
//!
//! The estimators take the [`samples::Sample`]s a measurement produces (send time, receive
//! time, size, sequence) and the [`samples::Clocks`] of its low-load phase, which make the
//! delays relative to their minimum with the clocks' drift removed. This crate sends
//! nothing, reads no clock and opens no file: the measurement driver does, and hands it
//! what it saw. Its tests run `pathlab-core`'s own link model in virtual time with known
//! parameters and check that the estimators recover them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod assemble;
pub mod bottleneck;
pub mod buffer;
pub mod calibrate;
pub mod check;
pub mod delay;
pub mod figure;
pub mod file;
pub mod isolation;
pub mod loss;
pub mod measure;
pub mod queued;
pub mod restart;
pub mod samples;
pub mod stats;
pub mod trace;

#[cfg(test)]
mod testing;

pub use figure::Figure;
pub use samples::{Clocks, Sample};
