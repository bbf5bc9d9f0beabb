//! The guardian of `emulate --iface`'s swap, as the command starts it and as it runs
//! (`pathlab emulate-guard`, hidden): this program again, which undoes the swap if the
//! emulator dies without doing so ([`pathlab_os::interpose::guard`]).

use std::io;

use pathlab_os::interpose::{guard, Guardian, Restores};
use pathlab_os::runtime::Owner;

/// Starts the guardian of the swap emulator `name` (this process) is about to make: this
/// program again, as `emulate-guard`.
pub fn start(name: &str) -> io::Result<Guardian> {
    let owner = Owner::this_process()?;
    // The running binary itself, even if its file was replaced or deleted since.
    let mut command = std::process::Command::new("/proc/self/exe");
    command.args([
        "emulate-guard",
        "--owner-pid",
        &owner.pid.to_string(),
        "--owner-start",
        &owner.start_ticks.to_string(),
        "--name",
        name,
    ]);
    Guardian::spawn(command)
}

/// Whose swap a guardian watches.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    /// The emulator's pid.
    pub owner_pid: u32,
    /// When it started, in clock ticks after boot (`/proc/PID/stat`, field 22).
    pub owner_start: u64,
    /// The emulator's name: its control socket is removed with the swap, if stale.
    pub name: String,
}

/// Runs the guardian: watches the pipe from its emulator (standard input) and, if the
/// emulator ends without standing it down, undoes its swaps and removes its control socket
/// if no one answers there. `None` when stood down; else what was undone and what was not.
/// Termination signals are blocked and never read: a terminal's Ctrl-C or hang-up, or a
/// SIGTERM meant for the emulator, does not end the guardian (it is in a process group of
/// its own, too).
pub fn run(config: &GuardConfig) -> io::Result<Option<Restores>> {
    pathlab_os::runtime::validate_name(&config.name).map_err(io::Error::other)?;
    let _signals = pathlab_os::termination_signals()?;
    let owner = Owner {
        pid: config.owner_pid,
        start_ticks: config.owner_start,
        pid_namespace: Owner::this_process()?.pid_namespace,
    };
    let Some(restores) = guard(&owner, io::stdin().lock(), io::stdout()) else {
        return Ok(None);
    };
    let socket = pathlab_os::runtime::control_socket_path(&config.name);
    if socket.exists() && std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let _ = std::fs::remove_file(&socket);
    }
    Ok(Some(restores))
}
