//! The process itself: the capability check made before anything is touched, termination
//! signals turned into a descriptor for orderly teardown, and signals to other processes.

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

/// A capability a command may need beyond CAP_NET_ADMIN, with what it is needed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// CAP_NET_RAW: packet sockets, to read and write an interface's frames.
    NetRaw,
    /// CAP_SYS_ADMIN: a network namespace of its own, bind-mounted (where an emulator holds
    /// the interface it stands in front of).
    SysAdmin,
}

impl Capability {
    /// Its name as `docker run --cap-add` and containerlab's `cap-add` write it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::NetRaw => "NET_RAW",
            Capability::SysAdmin => "SYS_ADMIN",
        }
    }

    /// What it is needed for.
    pub fn needed_for(self) -> &'static str {
        match self {
            Capability::NetRaw => "packet sockets on the interfaces it emulates on",
            Capability::SysAdmin => {
                "a network namespace of its own for each interface it emulates on, \
                 bind-mounted so that a crash leaves it where `lab clean` finds it"
            }
        }
    }

    fn number(self) -> u32 {
        match self {
            Capability::NetRaw => 13,
            Capability::SysAdmin => 21,
        }
    }
}

/// Those of `wanted` that the process lacks (in its effective set).
pub fn missing_capabilities(wanted: &[Capability]) -> Vec<Capability> {
    wanted
        .iter()
        .copied()
        .filter(|capability| !crate::sys::has_capability(capability.number()))
        .collect()
}

/// Checks that the process may administer the network, before anything is touched.
pub fn require_net_admin(command: &'static str) -> Result<(), NeedsNetAdmin> {
    if !crate::sys::has_cap_net_admin() {
        return Err(NeedsNetAdmin { command });
    }
    Ok(())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it starts later, and
/// returns a descriptor that reports them, so Ctrl-C leads to an orderly teardown. Call it
/// before starting threads.
pub fn termination_signals() -> std::io::Result<std::os::fd::OwnedFd> {
    crate::sys::signalfd_termination()
}

/// Which termination signal a [`termination_signals`] descriptor reported, if any.
pub fn read_termination_signal(fd: std::os::fd::BorrowedFd<'_>) -> Option<i32> {
    crate::sys::signalfd_read(fd)
}

/// A flag set when SIGINT, SIGTERM or SIGHUP arrives, by a thread that reads a
/// [`termination_signals`] descriptor: for the loops that stop themselves (a lab's run, a
/// node) by looking at a flag. Blocks the signals first, so call it before starting other
/// threads.
pub fn termination_flag() -> std::io::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let signals = termination_signals()?;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    // The descriptor is non-blocking: look five times a second.
    std::thread::spawn(move || loop {
        if read_termination_signal(std::os::fd::AsFd::as_fd(&signals)).is_some() {
            flag.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    });
    Ok(stop)
}

/// Waits up to `timeout` for a termination signal on a [`termination_signals`]
/// descriptor; which one came, if one did.
pub fn wait_for_termination(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> Option<i32> {
    let mut ready = [false];
    match crate::sys::poll_readable(&[fd], Some(timeout), &mut ready) {
        Ok(()) if ready[0] => crate::sys::signalfd_read(fd),
        _ => None,
    }
}

/// Makes the process `command` starts get SIGKILL when the thread that started it ends,
/// so a killed pathlab leaves no program (and no namespace it holds) behind.
pub fn die_with_spawner(command: &mut std::process::Command) {
    crate::sys::command_parent_death_signal(command, libc::SIGKILL);
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: i32) -> std::io::Result<()> {
    crate::sys::kill(pid, signal)
}

/// Asks process `pid` to end (SIGTERM), as Ctrl-C or `kill` would.
pub fn terminate(pid: u32) -> std::io::Result<()> {
    crate::sys::kill(pid, libc::SIGTERM)
}
