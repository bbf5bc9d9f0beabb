//! Starting a tunnel end: the checks and the signal handling that come before the loop,
//! so the command line only builds the options and prints what the loop tells it.

use std::os::fd::{AsFd as _, OwnedFd};

use pathlab_bond::stats::BondStats;

use crate::tunnel::{self, BondError, BondEvent, ClientOptions, ServerOptions};

/// A tunnel end cleared to run: the process may administer the network, and SIGINT,
/// SIGTERM and SIGHUP are blocked and reported to the loop, which then stops in order
/// (removing its device, routes and stats socket). Make it before starting any other
/// thread (a `/metrics` server), so that the signals reach the loop and not that thread.
#[derive(Debug)]
pub struct Launcher {
    /// The descriptor that reports the termination signals.
    signals: OwnedFd,
}

impl Launcher {
    /// Checks that the process has CAP_NET_ADMIN, refusing as `command` before anything is
    /// touched, and blocks the termination signals in this thread and the threads it
    /// starts later.
    pub fn new(command: &'static str) -> Result<Launcher, BondError> {
        pathlab_os::require_net_admin(command)?;
        let signals = pathlab_os::termination_signals().map_err(|error| BondError::Io {
            what: "setting up signal handling",
            error,
        })?;
        Ok(Launcher { signals })
    }

    /// Runs a server until a termination signal arrives; `on_event` hears of what
    /// changes. Returns the last snapshot of its stats.
    pub fn serve(
        &self,
        options: &ServerOptions,
        on_event: impl FnMut(&BondEvent),
    ) -> Result<BondStats, BondError> {
        tunnel::run_server(options, self.signals.as_fd(), on_event)
    }

    /// Runs a client until a termination signal arrives (or, before its first session
    /// opened, until the server has not answered within its connect timeout); `on_event`
    /// hears of what changes. Returns the last snapshot of its stats.
    pub fn connect(
        &self,
        options: &ClientOptions,
        on_event: impl FnMut(&BondEvent),
    ) -> Result<BondStats, BondError> {
        tunnel::run_client(options, self.signals.as_fd(), on_event)
    }
}
