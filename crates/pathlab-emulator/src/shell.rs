//! `pathlab shell`: a program in its own network namespace, behind an emulated link.
//!
//! As mahimahi's shells: a fresh namespace gets a TUN device with a default route; a
//! second TUN device in the current namespace is its other end; the emulator forwards
//! between the two, `uplink` from the program outwards and `downlink` back. The program
//! reaches this namespace's addresses (the outside end's address is in
//! `PATHLAB_SHELL_OUTSIDE`) and, through IPv4 forwarding and NAT ([`pathlab_os::nat`]), what
//! this namespace reaches. Both TUN devices exist only while pathlab holds them and the
//! namespace only while the program or pathlab lives, so a killed shell leaves nothing.
//! Shells nest: each one picks a subnet not yet used where it starts.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::control::{ControlError, ControlServer};
use crate::emulator::{self, EmulatorConfig, EmulatorError, EmulatorStats, OnInterfaceGone};
use crate::port::TunPort;
use pathlab_core::time::Duration;
use pathlab_core::LinkSpec;
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::sys;

/// Everything a shell needs, as plain values: the command line reads the user's words into
/// it, and [`run`] touches the machine.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// The emulator's name, for `pathlab emulate set/stats --name`.
    pub name: String,
    /// The link from the program outwards.
    pub uplink: LinkSpec,
    /// The link towards the program.
    pub downlink: LinkSpec,
    /// Seed of the links' random choices.
    pub seed: u64,
    /// Where to write every packet's fate and the queue lengths, if anywhere.
    pub record: Option<PathBuf>,
    /// Where to write a pcapng capture of what was forwarded and dropped, if anywhere.
    pub pcap: Option<PathBuf>,
    /// The command line, for the recording's header.
    pub command: Vec<String>,
    /// The program and its arguments.
    pub program: Vec<String>,
    /// Forward and masquerade the program's IPv4 traffic beyond this namespace.
    pub nat: bool,
    /// How the emulator's forwarding threads are scheduled.
    pub scheduling: pathlab_os::scheduling::Request,
}

/// How often a shell's recording samples queue lengths.
pub const QUEUE_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// The addresses of the two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellAddresses {
    /// This namespace's end.
    pub outside_v4: Ipv4Addr,
    /// The program's end.
    pub inside_v4: Ipv4Addr,
    /// This namespace's end.
    pub outside_v6: Ipv6Addr,
    /// The program's end.
    pub inside_v6: Ipv6Addr,
}

/// How a shell ended.
#[derive(Debug)]
pub struct ShellOutcome {
    /// The program's exit status.
    pub status: ExitStatus,
    /// The emulator's final counters.
    pub stats: EmulatorStats,
}

/// Why a shell could not run.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// Every shell subnet is taken in this namespace.
    #[error("no free subnet in 198.19.0.0/16 for another shell")]
    NoSubnet,
    /// The control socket.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The emulator.
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    /// The recording or capture file cannot be created.
    #[error("cannot create '{}'", path.display())]
    CreateFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The program could not start.
    #[error("cannot run '{program}': {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// Setting up devices, addresses or routes failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl ShellError {
    /// Whether the user's input was wrong (a name taken, a program that cannot start),
    /// not the machine: the command line says so with exit status 2.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ShellError::Control(ControlError::NameTaken(_)) | ShellError::Spawn { .. }
        )
    }
}

fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> ShellError {
    move |source| ShellError::Io { what, source }
}

/// Picks a /30 in 198.19.0.0/16 (and a /64 in 2001:2:0:100::/56) that no address of this
/// namespace is in.
pub fn pick_addresses(existing: &[IpAddr]) -> Option<ShellAddresses> {
    (0u8..=255).find_map(|k| {
        let taken = existing.iter().any(|address| match address {
            IpAddr::V4(v4) => v4.octets()[..3] == [198, 19, k],
            IpAddr::V6(v6) => v6.segments()[..4] == [0x2001, 2, 0, 0x100 + u16::from(k)],
        });
        (!taken).then(|| ShellAddresses {
            outside_v4: Ipv4Addr::new(198, 19, k, 1),
            inside_v4: Ipv4Addr::new(198, 19, k, 2),
            outside_v6: Ipv6Addr::new(0x2001, 2, 0, 0x100 + u16::from(k), 0, 0, 0, 1),
            inside_v6: Ipv6Addr::new(0x2001, 2, 0, 0x100 + u16::from(k), 0, 0, 0, 2),
        })
    })
}

fn configure(netlink: &mut Netlink, name: &str, v4: Ipv4Addr, v6: Ipv6Addr) -> io::Result<u32> {
    let index = sys::if_nametoindex(name)?;
    netlink.add_address(index, IpAddr::V4(v4), 30, None)?;
    netlink.add_address(index, IpAddr::V6(v6), 64, None)?;
    netlink.set_up(index, true)?;
    Ok(index)
}

/// Runs `config.program` behind the emulated link and returns when it exits (or when
/// SIGTERM/SIGHUP arrives, after stopping it). `signals` is the descriptor from
/// [`pathlab_os::termination_signals`], taken before any thread started.
pub fn run(
    config: &ShellConfig,
    signals: std::os::fd::BorrowedFd<'_>,
) -> Result<ShellOutcome, ShellError> {
    let emulator = emulator_config(config)?;
    let pid = std::process::id();
    let mut netlink = Netlink::open().map_err(io_error("opening netlink"))?;
    let existing: Vec<IpAddr> = netlink
        .addresses()
        .map_err(io_error("listing addresses"))?
        .into_iter()
        .map(|a| a.address)
        .collect();
    let addresses = pick_addresses(&existing).ok_or(ShellError::NoSubnet)?;
    let server = ControlServer::bind(&config.name)?;
    let netns = Netns::new().map_err(io_error("creating a network namespace"))?;
    let outside = TunPort::create(&format!("pl-{pid}-o"))
        .map_err(io_error("creating the outside TUN device"))?;
    configure(
        &mut netlink,
        &format!("pl-{pid}-o"),
        addresses.outside_v4,
        addresses.outside_v6,
    )
    .map_err(io_error("configuring the outside TUN device"))?;
    let nat = if config.nat {
        Some(
            pathlab_os::nat::Masquerade::add(addresses.inside_v4)
                .map_err(io_error("setting up NAT (nftables)"))?,
        )
    } else {
        None
    };
    let inside = netns
        .run(|| -> io::Result<TunPort> {
            let name = format!("pl-{pid}-i");
            let port = TunPort::create(&name)?;
            let mut netlink = Netlink::open()?;
            let index = configure(
                &mut netlink,
                &name,
                addresses.inside_v4,
                addresses.inside_v6,
            )?;
            netlink.add_route(None, Some(IpAddr::V4(addresses.outside_v4)), index, false)?;
            netlink.add_route(None, Some(IpAddr::V6(addresses.outside_v6)), index, true)?;
            Ok(port)
        })
        .and_then(|r| r)
        .map_err(io_error("setting up the shell's namespace"))?;
    let name = &config.name;
    let pool = emulator::Pool::with_scheduling(2, &config.scheduling)
        .map_err(io_error("starting the forwarding threads"))?;
    // Said only when something asked was not given: the shell is the program's terminal.
    for note in &pool.scheduling().notes {
        eprintln!("pathlab shell '{name}': note: {note}");
    }
    let handle = pool.spawn([inside, outside], emulator)?;
    let (program, arguments) = config.program.split_first().expect("a program is given");
    let mut command: Command = netns.command(program);
    command
        .args(arguments)
        .env("PATHLAB_SHELL", name)
        .env("PATHLAB_SHELL_OUTSIDE", addresses.outside_v4.to_string())
        .env("PATHLAB_SHELL_OUTSIDE6", addresses.outside_v6.to_string());
    sys::command_parent_death_signal(&mut command, libc::SIGKILL);
    let mut child = command.spawn().map_err(|source| ShellError::Spawn {
        program: program.clone(),
        source,
    })?;
    let status = wait_for_program(&server, &handle, signals, &mut child)?;
    let stats = handle.stop();
    drop(nat);
    drop(server);
    Ok(ShellOutcome { status, stats })
}

/// The emulator between the program and this namespace (`forward` is the uplink), with
/// the recording and capture files created.
fn emulator_config(config: &ShellConfig) -> Result<EmulatorConfig, ShellError> {
    let create = |path: &Path| {
        pathlab_os::files::create_replacing(path).map_err(|e| ShellError::CreateFile {
            path: path.to_owned(),
            source: e.into_io(),
        })
    };
    Ok(EmulatorConfig {
        name: config.name.clone(),
        forward: config.uplink.clone(),
        reverse: config.downlink.clone(),
        seed: config.seed,
        record: config
            .record
            .as_deref()
            .map(create)
            .transpose()?
            .map(Into::into),
        pcap: config.pcap.as_deref().map(create).transpose()?,
        queue_sample_interval: QUEUE_SAMPLE_INTERVAL,
        command: config.command.clone(),
        on_interface_gone: OnInterfaceGone::Stop,
    })
}

/// Serves the control socket until the program exits, and gives its status. A SIGTERM
/// or SIGHUP stops it (SIGTERM, then SIGKILL after 2 s), as does an emulator that stopped
/// on its own; SIGINT is the program's to handle.
fn wait_for_program(
    server: &ControlServer,
    handle: &emulator::EmulatorHandle,
    signals: std::os::fd::BorrowedFd<'_>,
    child: &mut std::process::Child,
) -> Result<ExitStatus, ShellError> {
    Ok(loop {
        let mut exited = None;
        let signal = server.serve(handle, signals, || {
            exited = child.try_wait().ok().flatten();
            exited.is_some()
        });
        if let Some(status) = exited {
            break status;
        }
        match signal {
            // Ctrl-C reaches the program too (same foreground process group): let it decide.
            Some(libc::SIGINT) => {}
            Some(_) => {
                let _ = sys::kill(child.id(), libc::SIGTERM);
                let waited = std::time::Instant::now();
                while child.try_wait().ok().flatten().is_none()
                    && waited.elapsed() < std::time::Duration::from_secs(2)
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let _ = child.kill();
                break child.wait().map_err(io_error("waiting for the program"))?;
            }
            // The emulator stopped on its own: nothing crosses any more, stop the program.
            None => {
                let _ = child.kill();
                break child.wait().map_err(io_error("waiting for the program"))?;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_cannot_be_created_is_said_with_its_path_before_anything_is_set_up() {
        let config = ShellConfig {
            name: "test".into(),
            uplink: LinkSpec::default(),
            downlink: LinkSpec::default(),
            seed: 1,
            record: Some("/nonexistent/pathlab/record.jsonl".into()),
            pcap: None,
            command: Vec::new(),
            program: vec!["true".into()],
            nat: false,
            scheduling: pathlab_os::scheduling::Request::default(),
        };
        let error = emulator_config(&config).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot create '/nonexistent/pathlab/record.jsonl'"
        );
        assert!(!error.is_usage());
    }

    #[test]
    fn nested_shells_get_the_next_free_subnet() {
        let first = pick_addresses(&[IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))]).unwrap();
        assert_eq!(first.outside_v4, Ipv4Addr::new(198, 19, 0, 1));
        assert_eq!(first.inside_v4, Ipv4Addr::new(198, 19, 0, 2));
        let second =
            pick_addresses(&[IpAddr::V4(first.inside_v4), IpAddr::V6(first.inside_v6)]).unwrap();
        assert_eq!(second.outside_v4, Ipv4Addr::new(198, 19, 1, 1));
        assert_eq!(
            second.outside_v6,
            "2001:2:0:101::1".parse::<Ipv6Addr>().unwrap()
        );
        let all: Vec<IpAddr> = (0..=255u8)
            .map(|k| IpAddr::V4(Ipv4Addr::new(198, 19, k, 9)))
            .collect();
        assert_eq!(pick_addresses(&all), None);
    }
}
