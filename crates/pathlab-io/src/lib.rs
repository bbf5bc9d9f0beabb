//! pathlab-io: the only crate of pathlab that touches the operating system.
//!
//! It reads the clock and packets, and hands them to the sans-IO models of `pathlab-core`:
//! AF_PACKET rings and TUN devices as emulator ports ([`port`]), TUN devices on their own
//! ([`tun`]) and UDP sockets bound to one interface each ([`line`]) for the bonding
//! tunnel and its Prometheus exposition ([`bond_metrics`]), offload undoing ([`offload`]), the
//! emulator's forwarding loop ([`emulator`]), how late it sends ([`fidelity`]) and its
//! control socket ([`control`]),
//! network namespaces ([`netns`]) and rtnetlink ([`netlink`]) to build labs with, an ICMP
//! pinger ([`ping`]) and the h1 - r - h2 topology tests and benchmarks use
//! ([`topology`]). It does not model anything: every decision about a packet is made by a
//! `pathlab_core::Link`. `unsafe` is confined to the private `sys` module.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bloat;
pub mod blocks;
pub mod bond;
pub mod bond_metrics;
pub mod buffers;
pub mod capacity;
pub mod control;
pub mod control_http;
pub mod emulator;
pub mod fidelity;
pub mod http;
pub mod line;
pub mod measure;
pub mod nat;
pub mod netlink;
pub mod netns;
pub mod offload;
pub mod ping;
pub mod port;
pub mod rfc6349;
pub mod runtime;
pub mod shell;
pub mod sockdiag;
mod sys;
pub mod testing;
pub mod topology;
pub mod tun;
pub mod vlan;

use pathlab_core::spec::{RateSpec, SpecError};
use pathlab_core::stage::rate::{Trace, TraceError};
use pathlab_core::LinkSpec;

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    /// The text is not a valid spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The trace file it names cannot be read.
    #[error("cannot read trace file '{path}': {source}")]
    TraceFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The trace file is not a mahimahi trace.
    #[error("bad trace file '{path}': {source}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        source: TraceError,
    },
}

/// The wall-clock time now, ns since the Unix epoch (`CLOCK_REALTIME`: the clock results,
/// recordings and the kernel's packet stamps are on).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Parses a spec and loads the trace file it names, if any; the trace's path is made
/// absolute so the spec means the same to an emulator running elsewhere.
pub fn load_spec(text: &str) -> Result<LinkSpec, LoadSpecError> {
    let mut spec = LinkSpec::parse(text)?;
    if let Some(RateSpec::Trace(trace)) = &mut spec.rate {
        let contents =
            std::fs::read_to_string(&trace.path).map_err(|source| LoadSpecError::TraceFile {
                path: trace.path.clone(),
                source,
            })?;
        let parsed = Trace::parse(&contents).map_err(|source| LoadSpecError::Trace {
            path: trace.path.clone(),
            source,
        })?;
        if let Ok(absolute) = std::path::absolute(&trace.path) {
            trace.path = absolute.to_string_lossy().into_owned();
        }
        trace.trace = Some(std::sync::Arc::new(parsed));
    }
    Ok(spec)
}

/// Why a command that builds or bridges interfaces cannot run.
#[derive(Debug, thiserror::Error)]
#[error(
    "{command} needs CAP_NET_ADMIN (run it as root, or give the binary the capability with \
     `setcap cap_net_admin,cap_sys_admin+ep`): it opens interfaces at layer 2 and creates \
     network namespaces and devices. Nothing was changed."
)]
pub struct NeedsNetAdmin {
    /// The command that was refused.
    pub command: &'static str,
}

/// Checks that the process may administer the network, before anything is touched.
pub fn require_net_admin(command: &'static str) -> Result<(), NeedsNetAdmin> {
    if !sys::has_cap_net_admin() {
        return Err(NeedsNetAdmin { command });
    }
    Ok(())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it starts later, and
/// returns a descriptor that reports them, so Ctrl-C leads to an orderly teardown. Call it
/// before starting threads.
pub fn termination_signals() -> std::io::Result<std::os::fd::OwnedFd> {
    sys::signalfd_termination()
}

/// Which termination signal a [`termination_signals`] descriptor reported, if any.
pub fn read_termination_signal(fd: std::os::fd::BorrowedFd<'_>) -> Option<i32> {
    sys::signalfd_read(fd)
}

/// Waits up to `timeout` for a termination signal on a [`termination_signals`]
/// descriptor; which one came, if one did.
pub fn wait_for_termination(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> Option<i32> {
    let mut ready = [false];
    match sys::poll_readable(&[fd], Some(timeout), &mut ready) {
        Ok(()) if ready[0] => sys::signalfd_read(fd),
        _ => None,
    }
}

/// Makes the process `command` starts get SIGKILL when the thread that started it ends,
/// so a killed pathlab leaves no program (and no namespace it holds) behind.
pub fn die_with_spawner(command: &mut std::process::Command) {
    sys::command_parent_death_signal(command, libc::SIGKILL);
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: i32) -> std::io::Result<()> {
    sys::kill(pid, signal)
}

/// Asks process `pid` to end (SIGTERM), as Ctrl-C or `kill` would.
pub fn terminate(pid: u32) -> std::io::Result<()> {
    sys::kill(pid, libc::SIGTERM)
}
