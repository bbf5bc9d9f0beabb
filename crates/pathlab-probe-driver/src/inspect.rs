//! `pathlab inspect`'s watch: into the network namespace to look in, then the kernel's view
//! of the TCP sockets ([`crate::sockdiag`]) sampled every interval until the time is up,
//! the process watched ends, or SIGINT or SIGTERM comes. What the samples mean is
//! [`pathlab_diagnose::diagnosis`], sans-IO; this module reads them and keeps the time.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pathlab_diagnose::diagnosis::{InspectReport, Interval, Selector, Watch};
use pathlab_os::netns::Netns;

use crate::sockdiag;

/// Which network namespace to look in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// This process's own.
    Own,
    /// A named one, `/run/netns/NAME`, as `ip netns exec` finds it.
    Named(String),
    /// The one of the process watched (`InspectConfig::pid`).
    Process,
}

/// What `pathlab inspect` watches, and for how long.
#[derive(Debug, Clone)]
pub struct InspectConfig {
    /// Which connections.
    pub selector: Selector,
    /// Only the sockets of this process; the watch ends when it does.
    pub pid: Option<u32>,
    /// Where to look.
    pub namespace: Namespace,
    /// How often to look.
    pub interval: Duration,
    /// How long to watch, with a last look exactly at its end; until stopped when `None`.
    pub time: Option<Duration>,
}

/// What a watch tells its caller after each look.
#[derive(Debug, Clone, Copy)]
pub struct Look<'a> {
    /// Every connection seen so far.
    pub watch: &'a Watch,
    /// What each connection (its index in `watch`) did since the look before.
    pub intervals: &'a [(usize, Interval)],
    /// When the look was, from the watch's start.
    pub at: Duration,
}

/// Why a watch could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// Signal handling could not be set up.
    #[error("setting up signal handling")]
    Signals(#[source] io::Error),
    /// The namespace to look in cannot be opened: it does not exist (a wrong name or pid).
    #[error(
        "cannot open the network namespace {}: {why}{}",
        path.display(),
        if *named { " (`ip netns list` shows the names)" } else { "" }
    )]
    OpenNamespace {
        /// Its path.
        path: PathBuf,
        /// Whether it was named (`Namespace::Named`).
        named: bool,
        /// Why (said in the message, so not a `source`).
        why: io::Error,
    },
    /// This process's own namespace cannot be read.
    #[error("reading this process's network namespace")]
    OwnNamespace(#[source] io::Error),
    /// The namespace to look in cannot be entered.
    #[error("cannot enter the network namespace {}: {why} (it takes root, CAP_SYS_ADMIN)", path.display())]
    EnterNamespace {
        /// Its path.
        path: PathBuf,
        /// Why (said in the message, so not a `source`).
        why: io::Error,
    },
    /// The kernel's list of TCP sockets cannot be read.
    #[error("reading the TCP sockets (NETLINK_SOCK_DIAG)")]
    Sockets(#[source] io::Error),
    /// The process's sockets cannot be listed; `first` when that was so from the start (no
    /// such process, or not this user's), rather than after the watch began.
    #[error("{why}")]
    ProcessSockets {
        /// Why (said in the message, so not a `source`).
        why: io::Error,
        /// Whether the watch had seen nothing yet.
        first: bool,
    },
    /// A namespace's identity cannot be read.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Watches as `config` says; `on_look` hears of each look. Sets up the handling of SIGINT
/// and SIGTERM (which end the watch) first, so call it before starting other threads, and
/// moves this process into the namespace looked in.
pub fn run(
    config: &InspectConfig,
    on_look: &mut dyn FnMut(Look<'_>),
) -> Result<InspectReport, InspectError> {
    // Signals first: every thread started later inherits the mask.
    let signals = pathlab_os::termination_signals().map_err(InspectError::Signals)?;
    enter_namespace(config)?;
    let start = Instant::now();
    let mut watch = Watch::new();
    let mut next = start;
    loop {
        let at = start.elapsed();
        let mut samples =
            sockdiag::tcp_sockets(at.as_nanos() as u64).map_err(InspectError::Sockets)?;
        samples.retain(|s| config.selector.matches(s));
        if let Some(pid) = config.pid {
            match sockdiag::process_sockets(pid) {
                Ok(inodes) => samples.retain(|s| inodes.contains(&s.inode)),
                Err(why) if watch.is_empty() || !process_alive(pid) => {
                    if watch.is_empty() {
                        return Err(InspectError::ProcessSockets { why, first: true });
                    }
                    break; // the process ended: the watch is over
                }
                Err(why) => return Err(InspectError::ProcessSockets { why, first: false }),
            }
        }
        let intervals = watch.observe(samples);
        on_look(Look {
            watch: &watch,
            intervals: &intervals,
            at,
        });
        if config.time.is_some_and(|end| at >= end) {
            break;
        }
        // The next look, and a last one exactly at the end of the time.
        next += config.interval;
        if let Some(end) = config.time {
            next = next.min(start + end);
        }
        let wait = next.saturating_duration_since(Instant::now());
        if pathlab_os::wait_for_termination(std::os::fd::AsFd::as_fd(&signals), wait).is_some() {
            break;
        }
    }
    Ok(watch.report(config.interval.as_nanos() as u64))
}

/// The namespace `config` looks in, when it is not this process's own.
fn namespace_path(config: &InspectConfig) -> Option<PathBuf> {
    match (&config.namespace, config.pid) {
        (Namespace::Named(name), _) => Some(PathBuf::from("/run/netns").join(name)),
        (Namespace::Process, Some(pid)) => Some(PathBuf::from(format!("/proc/{pid}/ns/net"))),
        (Namespace::Process | Namespace::Own, _) => None,
    }
}

/// Moves this process into the namespace to look in, unless it is there already.
fn enter_namespace(config: &InspectConfig) -> Result<(), InspectError> {
    let Some(path) = namespace_path(config) else {
        return Ok(());
    };
    let target = Netns::open(&path).map_err(|why| InspectError::OpenNamespace {
        path: path.clone(),
        named: matches!(config.namespace, Namespace::Named(_)),
        why,
    })?;
    let here = Netns::current().map_err(InspectError::OwnNamespace)?;
    if target.inode()? == here.inode()? {
        return Ok(());
    }
    target
        .enter()
        .map_err(|why| InspectError::EnterNamespace { path, why })
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(namespace: Namespace, pid: Option<u32>) -> InspectConfig {
        InspectConfig {
            selector: Selector::parse("").unwrap(),
            pid,
            namespace,
            interval: Duration::from_millis(10),
            time: Some(Duration::from_millis(30)),
        }
    }

    #[test]
    fn the_namespace_looked_in_is_the_named_one_or_the_processs() {
        let path = |namespace, pid| namespace_path(&config(namespace, pid));
        assert_eq!(path(Namespace::Own, None), None);
        assert_eq!(path(Namespace::Own, Some(7)), None);
        assert_eq!(
            path(Namespace::Named("lab".into()), None),
            Some(PathBuf::from("/run/netns/lab"))
        );
        assert_eq!(
            path(Namespace::Process, Some(7)),
            Some(PathBuf::from("/proc/7/ns/net"))
        );
    }

    #[test]
    fn a_namespace_that_does_not_exist_is_named_in_the_error() {
        let config = config(Namespace::Named("pathlab-no-such-namespace".into()), None);
        let error = enter_namespace(&config).unwrap_err();
        assert!(matches!(
            error,
            InspectError::OpenNamespace { named: true, .. }
        ));
        assert!(error.to_string().starts_with(
            "cannot open the network namespace /run/netns/pathlab-no-such-namespace: "
        ));
        assert!(error
            .to_string()
            .ends_with("(`ip netns list` shows the names)"));
    }
}
