//! One emulator run, as `pathlab emulate` asks for it: between two interfaces, between two
//! VLANs of a trunk port, or in front of someone else's interface; served until a
//! termination signal or its time is up, then stopped.
//!
//! The command line turns what the user typed into an [`EmulateConfig`] and hands it to
//! [`run`], which binds the control socket (and the control address), opens the ports,
//! creates the recording and capture files, starts the forwarding threads, serves, watches
//! the lateness with the fidelity guard and puts a borrowed interface back. What there is
//! to say meanwhile reaches the caller as [`EmulateEvent`]s: this module prints nothing.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use pathlab_core::time::Duration;
use pathlab_core::LinkSpec;
use pathlab_os::files::{Dir, FileError};
use pathlab_os::interpose::{InterposeError, Interposed};
use pathlab_os::netns::NamespaceRef;
use pathlab_os::scheduling;

use crate::address::{ControlAddress, ControlAddressConfig, ControlAddressError};
use crate::api::{Controlled, History};
use crate::control::{ControlError, ControlServer};
use crate::emulator::{
    self, EmulatorConfig, EmulatorError, EmulatorHandle, EmulatorStats, OnInterfaceGone, Scheduling,
};
use crate::fidelity::{LateWarning, LateWarnings};
use crate::port::{PacketPort, Port, PortError, ReceiveMode};
use crate::vlan::{self, TrunkVlans};

/// Where an emulator sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Bridging two interfaces; the forward spec applies from the first to the second.
    Between([String; 2]),
    /// Bridging two VLANs of one trunk port: frames tagged with the first VLAN go through
    /// the forward spec and leave tagged with the second, and back.
    Trunk {
        /// The trunk interface.
        iface: String,
        /// The two VLANs, and which one travels untagged, if any.
        vlans: TrunkVlans,
    },
    /// In front of someone else's interface, swapped for a stand-in veth while the
    /// emulator runs: the forward spec applies to what leaves through it, the reverse to
    /// what enters.
    Interpose {
        /// The interface.
        iface: String,
        /// Its namespace; `None` for the caller's own.
        netns: Option<NamespaceRef>,
    },
}

/// Why a [`Placement`] cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The interface to interpose on has a name no interface can have.
    #[error("{0}")]
    InterfaceName(pathlab_os::netlink::BadInterfaceName),
    /// Both ports would be the same interface.
    #[error("--between needs two different interfaces, got '{0}' twice")]
    SameInterface(String),
}

impl Placement {
    /// The names of the emulator's two ports, as the stats name them: the trunk's two VLAN
    /// ports, the stand-in's end facing the namespace (`inside`) and the interface (on the
    /// wire), or the two interfaces.
    pub fn port_names(&self) -> [String; 2] {
        match self {
            Placement::Between(names) => names.clone(),
            Placement::Trunk { iface, vlans } => vlans.vlans.map(|vid| vlan::port_name(iface, vid)),
            Placement::Interpose { iface, .. } => ["inside".to_owned(), iface.clone()],
        }
    }

    /// Checks what can be checked before touching anything: an interface name that can
    /// be one, and two ports that are not one.
    pub fn check(&self) -> Result<(), PlacementError> {
        if let Placement::Interpose { iface, .. } = self {
            pathlab_os::netlink::check_interface_name(iface)
                .map_err(PlacementError::InterfaceName)?;
        }
        let [a, b] = self.port_names();
        if a == b {
            return Err(PlacementError::SameInterface(a));
        }
        Ok(())
    }
}

/// Everything an emulator run needs, as plain values: the command line reads the user's
/// words into it, and [`run`] touches the machine.
#[derive(Debug, Clone)]
pub struct EmulateConfig {
    /// The emulator's name: its control socket's, its stats', its warnings'.
    pub name: String,
    /// Where it sits.
    pub placement: Placement,
    /// The link from the first port to the second (what leaves, when interposed).
    pub forward: LinkSpec,
    /// The link back.
    pub reverse: LinkSpec,
    /// Seed of the links' random choices.
    pub seed: u64,
    /// Where to write every packet's fate and the queue lengths (JSON lines), if anywhere.
    pub record: Option<PathBuf>,
    /// How often the recording samples queue lengths.
    pub queue_sample_interval: Duration,
    /// Where to write a pcapng capture of what was forwarded and dropped, if anywhere.
    pub pcap: Option<PathBuf>,
    /// How long to run; `None`: until a termination signal.
    pub time: Option<Duration>,
    /// What to do when a port's interface disappears.
    pub on_interface_gone: OnInterfaceGone,
    /// The fidelity guard's bound on the 99th percentile of lateness over a second;
    /// `None`: no guard, no late seconds.
    pub late_bound: Option<Duration>,
    /// How the forwarding threads are to be scheduled.
    pub scheduling: scheduling::Request,
    /// The control address, if one is served.
    pub control: Option<ControlAddressConfig>,
    /// The directory a recording started over the control address is created in.
    pub record_dir: Option<PathBuf>,
    /// The command line, for the recordings' header.
    pub command: Vec<String>,
}

/// What a running emulator has to say, as it happens.
#[derive(Debug)]
pub enum EmulateEvent<'a> {
    /// It forwards.
    Started(Started<'a>),
    /// The fidelity guard has a warning about one direction.
    Late {
        /// The direction's receiving port.
        from: &'a str,
        /// Its sending port.
        to: &'a str,
        /// What to say.
        warning: LateWarning,
    },
    /// A note from putting a borrowed interface back (what could not be restored exactly).
    Restored(&'a str),
}

/// What a started emulator is: the interfaces it opened, how its threads run, where its
/// control address is.
#[derive(Debug)]
pub struct Started<'a> {
    /// The two interfaces as opened: the stand-in's end and the wire's when interposed,
    /// the configured ones otherwise.
    pub ports: [&'a str; 2],
    /// What interposing had to say (empty unless interposed).
    pub notes: &'a [String],
    /// How the forwarding threads got the CPU.
    pub scheduling: &'a Scheduling,
    /// The control address, if one is served.
    pub control: Option<&'a ControlAddress>,
}

/// Why an emulator could not run, or could not be stopped cleanly.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// The control socket: another emulator has the name, or the socket cannot be made.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The control address.
    #[error(transparent)]
    ControlAddress(#[from] ControlAddressError),
    /// The directory for recordings started over the control address cannot be opened.
    #[error("{0}")]
    RecordDir(FileError),
    /// The interface to stand in front of cannot be taken.
    #[error(transparent)]
    Interpose(#[from] InterposeError),
    /// A port cannot be opened.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The emulator's namespace (interposed) cannot be entered to open its ports.
    #[error("entering the emulator's namespace")]
    EnterNamespace(#[source] io::Error),
    /// The recording or capture file cannot be created.
    #[error("cannot create the {what} file '{}'", path.display())]
    CreateFile {
        /// `recording` or `capture`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The forwarding threads cannot be started.
    #[error("starting the forwarding threads")]
    Threads(#[source] io::Error),
    /// The emulator cannot start.
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    /// The borrowed interface could not be put back.
    #[error("putting the interface back (`pathlab lab clean` retries)")]
    Restore(#[source] io::Error),
}

impl EmulateError {
    /// Whether the user's input was wrong (a name taken, an interface missing, down or
    /// busy, a token or directory that will not do), not the machine: the command line
    /// says so with exit status 2.
    pub fn is_usage(&self) -> bool {
        match self {
            EmulateError::Control(error) => matches!(error, ControlError::NameTaken(_)),
            EmulateError::ControlAddress(error) => error.is_usage(),
            EmulateError::Interpose(error) => error.is_usage(),
            EmulateError::Port(error) => !matches!(error, PortError::Io { .. }),
            EmulateError::RecordDir(_) => true,
            EmulateError::EnterNamespace(_)
            | EmulateError::CreateFile { .. }
            | EmulateError::Threads(_)
            | EmulateError::Emulator(_)
            | EmulateError::Restore(_) => false,
        }
    }
}

/// Runs the emulator `config` describes until a termination signal on `signals` (from
/// [`pathlab_os::termination_signals`], taken before any thread started) or its time,
/// telling `on_event` what happens; returns its final counters, whose `failure` says
/// whether it stopped on its own. A borrowed interface is put back on every way out.
pub fn run(
    config: &EmulateConfig,
    signals: BorrowedFd<'_>,
    on_event: &mut dyn FnMut(EmulateEvent<'_>),
) -> Result<EmulatorStats, EmulateError> {
    // The socket first: a name clash is found before any interface is opened, and the
    // socket file goes away with `server` if opening an interface fails.
    let server = ControlServer::bind(&config.name)?;
    // The control address next, before any interface is opened: a missing token, a
    // directory that is not there or a taken port says so without touching them.
    let http = config
        .control
        .as_ref()
        .map(ControlAddress::bind)
        .transpose()?;
    let recordings =
        Dir::open_optional(config.record_dir.as_deref()).map_err(EmulateError::RecordDir)?;
    // Each port's ring holds the traffic that enters the direction it feeds.
    let modes = [
        ReceiveMode::for_link(&config.forward),
        ReceiveMode::for_link(&config.reverse),
    ];
    // In front of someone's interface: swapped now, put back when `interposed` goes (at
    // the end, or on any error from here).
    let interposed = interpose(&config.placement, &config.name)?;
    let names = config.placement.port_names();
    let ports_names = match &interposed {
        Some(interposed) => [interposed.inside(), interposed.outside()],
        None => [names[0].as_str(), names[1].as_str()],
    };
    let ports = open_ports(&config.placement, interposed.as_ref(), ports_names, modes)?;
    let emulator = emulator_config(config)?;
    let pool =
        emulator::Pool::with_scheduling(2, &config.scheduling).map_err(EmulateError::Threads)?;
    let handle = pool.spawn(ports, emulator)?;
    handle.set_late_bound(config.late_bound);
    on_event(EmulateEvent::Started(Started {
        ports: ports_names,
        notes: interposed.as_ref().map_or(&[][..], Interposed::notes),
        scheduling: pool.scheduling(),
        control: http.as_ref(),
    }));
    serve(
        config,
        Serving {
            http: http.as_ref(),
            server: &server,
            handle: &handle,
            signals,
            recordings: recordings.as_ref(),
        },
        on_event,
    );
    let stats = handle.stop();
    drop(server);
    if let Some(interposed) = interposed {
        for note in interposed.restore().map_err(EmulateError::Restore)? {
            on_event(EmulateEvent::Restored(&note));
        }
    }
    Ok(stats)
}

/// Swaps the emulator in front of the interface when the placement says so (put back
/// when the result goes: at the end, or on any error after this).
fn interpose(placement: &Placement, name: &str) -> Result<Option<Interposed>, EmulateError> {
    let Placement::Interpose { iface, netns } = placement else {
        return Ok(None);
    };
    Ok(Some(pathlab_os::interpose::interpose(
        netns.as_ref(),
        iface,
        name,
    )?))
}

/// The emulator's two ports, each receiving in its direction's mode: the trunk's two
/// VLANs, or interfaces `names` (opened inside the emulator's namespace when it is
/// interposed).
fn open_ports(
    placement: &Placement,
    interposed: Option<&Interposed>,
    names: [&str; 2],
    modes: [ReceiveMode; 2],
) -> Result<[Box<dyn Port>; 2], EmulateError> {
    if let Placement::Trunk { iface, vlans } = placement {
        let ports = vlan::open_trunk(iface, *vlans, modes)?;
        return Ok(ports.map(|port| Box::new(port) as Box<dyn Port>));
    }
    let open = |name: &str, mode| -> Result<Box<dyn Port>, EmulateError> {
        let port = match interposed {
            Some(interposed) => interposed
                .holder()
                .run(|| PacketPort::open_with(name, mode))
                .map_err(EmulateError::EnterNamespace)??,
            None => PacketPort::open_with(name, mode)?,
        };
        Ok(Box::new(port))
    };
    Ok([open(names[0], modes[0])?, open(names[1], modes[1])?])
}

/// The forwarding loop's configuration: the links, with the recording and capture files
/// created.
fn emulator_config(config: &EmulateConfig) -> Result<EmulatorConfig, EmulateError> {
    let create = |path: &Path, what: &'static str| {
        pathlab_os::files::create_replacing(path).map_err(|e| EmulateError::CreateFile {
            what,
            path: path.to_owned(),
            source: e.into_io(),
        })
    };
    Ok(EmulatorConfig {
        name: config.name.clone(),
        forward: config.forward.clone(),
        reverse: config.reverse.clone(),
        seed: config.seed,
        record: config
            .record
            .as_deref()
            .map(|p| create(p, "recording"))
            .transpose()?
            .map(Into::into),
        pcap: config
            .pcap
            .as_deref()
            .map(|p| create(p, "capture"))
            .transpose()?,
        queue_sample_interval: config.queue_sample_interval,
        command: config.command.clone(),
        on_interface_gone: config.on_interface_gone,
    })
}

/// How often the fidelity guard looks at the lateness: the window moves by this much.
const GUARD_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How often the control address's history takes the stats.
const HISTORY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// The fidelity guard of a running emulator: it reads the lateness from the stats and
/// says what there is to say.
struct Guard {
    warnings: [LateWarnings; 2],
    next: std::time::Instant,
}

impl Guard {
    /// Looks at the lateness every [`GUARD_INTERVAL`] and hands each warning to `on_event`.
    fn poll(&mut self, handle: &EmulatorHandle, on_event: &mut dyn FnMut(EmulateEvent<'_>)) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + GUARD_INTERVAL;
        let Some(stats) = handle.stats() else { return };
        // The emulator's own clock: the window's slots are on it.
        let at = pathlab_core::time::Instant::from_nanos(stats.uptime_ns);
        for (warnings, direction) in self.warnings.iter_mut().zip(&stats.directions) {
            if let Some(warning) = warnings.observe(at, &direction.lateness) {
                on_event(EmulateEvent::Late {
                    from: &direction.from,
                    to: &direction.to,
                    warning,
                });
            }
        }
    }
}

/// What [`serve`] serves: the control socket, the control address, the emulator.
#[derive(Clone, Copy)]
struct Serving<'a> {
    http: Option<&'a ControlAddress>,
    server: &'a ControlServer,
    handle: &'a EmulatorHandle,
    signals: BorrowedFd<'a>,
    recordings: Option<&'a Dir>,
}

/// Serves the control socket (and the control address, if any) until a termination signal
/// or the configured time; the fidelity guard warns meanwhile.
fn serve(config: &EmulateConfig, serving: Serving<'_>, on_event: &mut dyn FnMut(EmulateEvent<'_>)) {
    let Serving {
        http,
        server,
        handle,
        signals,
        recordings,
    } = serving;
    let mut guard = config.late_bound.map(|_| Guard {
        warnings: Default::default(),
        next: std::time::Instant::now() + GUARD_INTERVAL,
    });
    let deadline = config
        .time
        .map(|t| std::time::Instant::now() + std::time::Duration::from(t));
    let history = Mutex::new(History::new());
    let stop_http = AtomicBool::new(false);
    std::thread::scope(|scope| {
        if let Some(http) = http {
            let controlled = Controlled {
                emulator: handle,
                history: &history,
                command: config.command.clone(),
                presets: preset_choices(),
                traces: http.traces.as_ref(),
                recordings,
            };
            let stop_http = &stop_http;
            scope.spawn(move || {
                http.server
                    .serve(stop_http, &|request| controlled.answer(request));
            });
        }
        let mut next_sample = std::time::Instant::now();
        server.serve(handle, signals, || {
            if let Some(guard) = &mut guard {
                guard.poll(handle, on_event);
            }
            let now = std::time::Instant::now();
            if http.is_some() && now >= next_sample {
                next_sample = now + HISTORY_INTERVAL;
                if let Some(stats) = handle.stats() {
                    history
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .observe(&stats);
                }
            }
            deadline.is_some_and(|d| now >= d)
        });
        stop_http.store(true, Ordering::Release);
    });
}

/// The presets the live page offers: each name `preset` takes, with what it is.
fn preset_choices() -> Vec<(String, String, String)> {
    use pathlab_core::spec::preset::{self, PRESETS};
    preset::names()
        .into_iter()
        .map(|name| {
            let summary = PRESETS
                .iter()
                .find(|p| name == p.name || name.strip_suffix("-up") == Some(p.name))
                .map_or("", |p| p.summary);
            (name.clone(), format!("preset {name}"), summary.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn between(a: &str, b: &str) -> Placement {
        Placement::Between([a.to_owned(), b.to_owned()])
    }

    #[test]
    fn ports_are_named_for_the_placement() {
        assert_eq!(between("eth0", "eth1").port_names(), ["eth0", "eth1"]);
        let interposed = Placement::Interpose {
            iface: "veth1".into(),
            netns: None,
        };
        assert_eq!(interposed.port_names(), ["inside", "veth1"]);
        let trunk = Placement::Trunk {
            iface: "eth0".into(),
            vlans: TrunkVlans::parse("10,20").unwrap(),
        };
        assert_eq!(
            trunk.port_names(),
            [vlan::port_name("eth0", 10), vlan::port_name("eth0", 20)]
        );
    }

    #[test]
    fn one_interface_twice_is_refused_before_anything_is_opened() {
        assert_eq!(
            between("eth0", "eth0").check(),
            Err(PlacementError::SameInterface("eth0".into()))
        );
        assert_eq!(between("eth0", "eth1").check(), Ok(()));
    }

    #[test]
    fn an_interface_name_no_interface_can_have_is_refused() {
        for bad in ["", "a/b", "sixteen-letters!"] {
            let placement = Placement::Interpose {
                iface: bad.into(),
                netns: None,
            };
            assert!(
                matches!(placement.check(), Err(PlacementError::InterfaceName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_preset_is_offered_with_its_spec_and_summary() {
        let choices = preset_choices();
        assert!(!choices.is_empty());
        for (name, spec, summary) in &choices {
            assert_eq!(spec, &format!("preset {name}"));
            assert!(!summary.is_empty(), "{name} has no summary");
        }
    }
}
