//! `pathlab emulate`: a transparent bridge between two interfaces with a link model in each
//! direction, and `emulate set` / `emulate stats` to change and read it while it runs.
//!
//! What the user typed becomes a [`pathlab_emulator::session::EmulateConfig`] here, which
//! [`pathlab_emulator::session::run`] runs; this module prints what it says and its final
//! counters.

use std::io::Write as _;

use anyhow::Context as _;
use pathlab_core::format::{self, Digits};
use pathlab_core::time::Duration;
use pathlab_core::LinkSpec;
use pathlab_emulator::api::Specs;
use pathlab_emulator::client::{self, RequestError, Target};
use pathlab_emulator::emulator::{EmulatorStats, OnInterfaceGone};
use pathlab_emulator::fidelity::{LateWarning, DEFAULT_LATE_BOUND};
use pathlab_emulator::guardian;
use pathlab_emulator::session::{
    self, EmulateConfig, EmulateError, EmulateEvent, Placement, PlacementError, Started,
};
use pathlab_emulator::vlan::TrunkVlans;
use pathlab_results::lab::lateness_text;

use crate::cmd::metrics::ControlArgs;
use crate::cmd::spec::parse_spec as load;
use crate::usage;

/// Arguments of `pathlab emulate`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "When it stops, it prints its final counters (as JSON with -J)."
)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The two interfaces to bridge; SPEC applies from the first to the second.
    #[arg(long, num_args = 2, value_names = ["IF_A", "IF_B"], required_unless_present_any = ["trunk", "iface"])]
    pub between: Vec<String>,
    /// Instead of bridging two interfaces, put the emulator in front of this one (of
    /// --netns NS, or of this namespace): SPEC applies to what leaves through it, --reverse
    /// to what enters. Its programs still see it with its name, index, MAC, MTU, addresses
    /// and routes: it is swapped for a stand-in veth, and put back on exit, on Ctrl-C or
    /// SIGTERM, or by `pathlab lab clean` after a crash (see docs/emulate.md, "On someone
    /// else's interface"). A veth, VXLAN, macvlan or NIC; not a bridge.
    #[arg(long, value_name = "IF", conflicts_with_all = ["between", "trunk", "wait"])]
    pub iface: Option<String>,
    /// With --iface: the namespace the interface is in, as an `ip netns` name, a path to a
    /// namespace file, or pid:PID (a container's or a pod's process).
    #[arg(long, value_name = "NS", requires = "iface")]
    pub netns: Option<pathlab_os::netns::NamespaceRef>,
    /// Instead of two interfaces, bridge two VLANs (--vlans A,B) of this one trunk port:
    /// frames tagged A go through SPEC and leave tagged B, and back (see docs/emulate.md,
    /// "One-port VLAN box"). Needs no 8021q module.
    #[arg(long, value_name = "IF", conflicts_with_all = ["between", "wait"], requires = "vlans")]
    pub trunk: Option<String>,
    /// The two VLAN IDs (1 to 4094) --trunk bridges; SPEC applies from A to B.
    #[arg(long, value_name = "A,B", requires = "trunk", value_parser = TrunkVlans::parse)]
    pub vlans: Option<TrunkVlans>,
    /// With --trunk: untagged (and priority-tagged) frames belong to VLAN VID, one of
    /// --vlans, and its frames leave untagged, for a switch that carries that VLAN untagged
    /// on the trunk. Default: untagged frames are not forwarded.
    #[arg(long, value_name = "VID", requires = "trunk", value_parser = pathlab_emulator::vlan::parse_vid)]
    pub native_vlan: Option<u16>,
    /// The link spec from IF_A to IF_B, e.g. 'delay 20ms loss 1% rate 10mbit limit 100'.
    #[arg(value_name = "SPEC", num_args = 0..)]
    pub spec: Vec<String>,
    /// The spec from IF_B to IF_A (default: the same as SPEC).
    #[arg(long, value_name = "SPEC")]
    pub reverse: Option<String>,
    /// Emulate a measured path: a twin file's `up` spec from IF_A to IF_B (or out of
    /// --iface), its `down` spec back; a trace it names is read beside it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["spec", "reverse"])]
    pub twin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub common: Common,
    /// Write every packet's fate (arrival, departure, queue delay, drops) and a queue-length
    /// time series to FILE (JSON lines; see docs/emulate.md).
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
    /// How often the recording samples queue lengths.
    #[arg(long, value_name = "TIME", default_value = "10ms", value_parser = crate::cmd::parse_time)]
    pub sample_interval: Duration,
    /// Write what was forwarded and what was dropped (with the reason as a comment) to a
    /// pcapng FILE.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(short = 't', long, value_name = "TIME", value_parser = crate::cmd::parse_time)]
    pub time: Option<Duration>,
    /// Seed of the random choices (loss, jitter); the same seed replays the same choices
    /// for the same arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the equivalent `tc` commands for a kernel with netem (and what they cannot
    /// reproduce), and exit without touching anything.
    #[arg(long)]
    pub print_tc: bool,
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
    /// When IF_A or IF_B disappears (a USB NIC unplugged, a veth deleted), wait for an
    /// interface of the same name to appear (checked every second, without using CPU
    /// meanwhile), open it as at start and forward again, instead of ending with exit 1.
    /// Both interfaces must exist at start.
    #[arg(long)]
    pub wait: bool,
    /// Warn on stderr when the emulator sends late: when the 99th percentile of how late
    /// packets left against the model, over the last second, exceeds TIME (once when it
    /// starts, at most every 10 s while it lasts, once when it ends). Seconds over it are
    /// counted in the stats as late seconds. `off`: no warning, no late seconds.
    #[arg(long, value_name = "TIME|off", default_value_t = LateBound(Some(DEFAULT_LATE_BOUND)), value_parser = parse_late_bound)]
    pub late_warn: LateBound,
    #[command(flatten)]
    pub scheduling: crate::cmd::SchedulingArgs,
    #[command(flatten)]
    pub control: ControlArgs,
    /// A recording started over the control address (POST /api/v1/recording) is a new
    /// file of DIR, named by the request (a file name, no path). Without it, the address
    /// starts no recordings.
    #[arg(long, value_name = "DIR", requires = "control")]
    pub record_dir: Option<std::path::PathBuf>,
}

/// How to reach an emulator on another machine, through its `--control` address.
#[derive(Debug, clap::Args)]
pub struct RemoteArgs {
    /// The emulator's control address, HOST:PORT (instead of --name on this machine).
    #[arg(long, value_name = "HOST:PORT")]
    pub remote: Option<String>,
    /// The file holding its token (as given to its --control-token).
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub token: Option<std::path::PathBuf>,
}

/// The fidelity guard's bound, `off` (`None`) or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LateBound(pub Option<Duration>);

impl std::fmt::Display for LateBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(bound) => write!(f, "{bound}"),
            None => f.write_str("off"),
        }
    }
}

/// Reads `--late-warn`: `off`, or a time above zero (`1ms`, `500us`; a bare number is
/// seconds, as every time on the command line).
fn parse_late_bound(text: &str) -> Result<LateBound, String> {
    if text == "off" {
        return Ok(LateBound(None));
    }
    crate::cmd::parse_time(text)
        .map(|bound| LateBound(Some(bound)))
        .map_err(|e| format!("{e}; or 'off'"))
}

/// Options every emulate action shares.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The emulator's name, to run several at once and address each.
    #[arg(long, default_value = "default", global = true)]
    pub name: String,
}

/// What to do with a running emulator.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Replace the spec of a running emulator, as `tc qdisc replace` does; packets already
    /// inside keep the treatment they had.
    Set(SetArgs),
    /// Print a running emulator's counters: packets, drops by reason, queue, timing.
    Stats(StatsArgs),
}

/// Arguments of `pathlab emulate set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The new spec (both directions unless --reverse or --direction says otherwise).
    #[arg(value_name = "SPEC", required = true, num_args = 1..)]
    pub spec: Vec<String>,
    /// A different spec for the reverse direction.
    #[arg(long, value_name = "SPEC", conflicts_with = "direction")]
    pub reverse: Option<String>,
    /// Change only one direction: `forward` (IF_A to IF_B) or `reverse`.
    #[arg(long, value_parser = ["forward", "reverse", "both"], default_value = "both")]
    pub direction: String,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Arguments of `pathlab emulate stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Runs `pathlab emulate`.
pub fn run(args: &Args, command_line: Vec<String>) -> anyhow::Result<()> {
    pathlab_os::runtime::validate_name(&args.common.name).map_err(|e| usage(anyhow::anyhow!(e)))?;
    match &args.action {
        Some(Action::Set(set)) => return run_set(&args.common.name, set),
        Some(Action::Stats(stats)) => return run_stats(&args.common.name, stats),
        None => {}
    }
    let config = args.config(command_line)?;
    if args.print_tc {
        print_tc(&config);
        return Ok(());
    }
    pathlab_os::require_net_admin("pathlab emulate").map_err(usage)?;
    // Before the swap: the guardian puts the interface back if this process is killed.
    let guardian = match &config.placement {
        Placement::Interpose { .. } if !pathlab_os::interpose::test_without_guardian() => Some(
            guardian::start(&config.name).context("starting the guardian of the interface swap")?,
        ),
        _ => None,
    };
    // Block Ctrl-C before any thread starts, so every thread leaves it to the signalfd.
    let signals = pathlab_os::termination_signals().context("setting up signal handling")?;
    let stats = session::run(&config, std::os::fd::AsFd::as_fd(&signals), &mut |event| {
        print_event(&config, &event);
    })
    .map_err(emulate_error)?;
    // Put back (an error above instead leaves the guardian to undo what is left once this
    // process has ended).
    if let Some(guardian) = guardian {
        guardian
            .stand_down()
            .context("telling the guardian the interface is back")?;
    }
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print_stats(&stats);
    }
    if let Some(failure) = &stats.failure {
        anyhow::bail!("emulator '{}' stopped: {failure}", args.common.name);
    }
    Ok(())
}

/// Arguments of `pathlab emulate-guard`, the guardian `emulate --iface` starts for itself
/// (hidden: not a command for people).
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The emulator's pid.
    #[arg(long)]
    owner_pid: u32,
    /// When it started, in clock ticks after boot (`/proc/PID/stat`, field 22).
    #[arg(long)]
    owner_start: u64,
    /// The emulator's name (`--name`): its control socket is removed with the swap.
    #[arg(long)]
    name: String,
}

/// Runs `pathlab emulate-guard`: watches the pipe from its emulator and, if the emulator
/// ends without standing it down, undoes its swap ([`guardian::run`]), saying what it did.
pub fn run_guard(args: &GuardArgs) -> anyhow::Result<()> {
    pathlab_os::runtime::validate_name(&args.name).map_err(|e| usage(anyhow::anyhow!(e)))?;
    let config = guardian::GuardConfig {
        owner_pid: args.owner_pid,
        owner_start: args.owner_start,
        name: args.name.clone(),
    };
    let Some(restores) = guardian::run(&config).context("guarding the interface swap")? else {
        return Ok(());
    };
    let who = format!("emulator '{}' (pid {})", args.name, args.owner_pid);
    for restored in &restores.restored {
        eprintln!(
            "pathlab: {who} ended without putting back interface {}; its guardian did \
             (the swap was at step '{}')",
            restored.interface,
            restored.step.name()
        );
        for note in &restored.notes {
            eprintln!("  {note}");
        }
    }
    for failed in &restores.failed {
        eprintln!(
            "pathlab: {who} ended without putting back {}; its guardian could not: {} \
             (record {}; `pathlab lab clean` tries again)",
            failed.interface.as_deref().unwrap_or("an interface"),
            failed.why,
            failed.record.display()
        );
    }
    if !restores.failed.is_empty() {
        anyhow::bail!("{who}: a swap was not undone");
    }
    Ok(())
}

impl Args {
    /// The two specs: SPEC and --reverse (the same as SPEC without it), or a twin's.
    fn specs_loaded(&self) -> anyhow::Result<(LinkSpec, LinkSpec)> {
        crate::cmd::spec::given_specs(self.twin.as_deref(), &self.spec, self.reverse.as_ref())
    }

    /// The emulator these arguments ask for, checked: the trunk's VLANs, two different
    /// interfaces, the specs loaded. Every problem is a usage error.
    fn config(&self, command_line: Vec<String>) -> anyhow::Result<EmulateConfig> {
        let placement = self.placement()?;
        placement.check().map_err(|e| match e {
            PlacementError::InterfaceName(e) => usage(anyhow::anyhow!("--iface: {e}")),
            other @ PlacementError::SameInterface(_) => usage(other),
        })?;
        let (forward, reverse) = self.specs_loaded()?;
        Ok(EmulateConfig {
            name: self.common.name.clone(),
            placement,
            forward,
            reverse,
            seed: self.seed,
            record: self.record.clone(),
            queue_sample_interval: self.sample_interval,
            pcap: self.pcap.clone(),
            time: self.time,
            on_interface_gone: if self.wait {
                OnInterfaceGone::Wait
            } else {
                OnInterfaceGone::Stop
            },
            late_bound: self.late_warn.0,
            scheduling: self.scheduling.request(),
            control: self.control.config(),
            record_dir: self.record_dir.clone(),
            command: command_line,
        })
    }

    /// Where the emulator sits: `--trunk` and the two VLANs it bridges (with
    /// `--native-vlan`), `--iface` (of `--netns`), or `--between`'s two interfaces.
    fn placement(&self) -> anyhow::Result<Placement> {
        match (&self.trunk, self.vlans) {
            (Some(trunk), Some(vlans)) => {
                let vlans = vlans
                    .with_untagged(self.native_vlan)
                    .map_err(|e| usage(anyhow::anyhow!("--native-vlan: {e}")))?;
                return Ok(Placement::Trunk {
                    iface: trunk.clone(),
                    vlans,
                });
            }
            (None, _) if self.vlans.is_some() || self.native_vlan.is_some() => {
                return Err(usage(anyhow::anyhow!(
                    "--vlans and --native-vlan go with --trunk IF"
                )));
            }
            _ => {}
        }
        Ok(match &self.iface {
            Some(iface) => Placement::Interpose {
                iface: iface.clone(),
                netns: self.netns.clone(),
            },
            None => Placement::Between([self.between[0].clone(), self.between[1].clone()]),
        })
    }
}

/// An emulator's failure as the command says it: the flag at fault for a directory or a
/// control address that will not do, a usage error for what the user can fix.
fn emulate_error(error: EmulateError) -> anyhow::Error {
    match error {
        EmulateError::ControlAddress(error) => crate::cmd::metrics::control_address_error(error),
        EmulateError::RecordDir(error) => usage(anyhow::anyhow!("--record-dir: {error}")),
        error if error.is_usage() => usage(error),
        error => anyhow::Error::new(error),
    }
}

/// Prints what a running emulator says, on stderr.
fn print_event(config: &EmulateConfig, event: &EmulateEvent<'_>) {
    let name = &config.name;
    match event {
        EmulateEvent::Started(started) => {
            announce(config, started);
            pathlab_lab::run::announce_scheduling(
                &format!("pathlab emulate '{name}'"),
                started.scheduling,
            );
            if let Some(http) = started.control {
                crate::cmd::metrics::announce_control(
                    http,
                    &format!(
                        "  live page and API: http://{addr}/ (metrics: http://{addr}/metrics); a \
                         change needs the token, and so does a read from another machine",
                        addr = http.server.local_addr()
                    ),
                );
            }
        }
        EmulateEvent::Late { from, to, warning } => print_late(name, from, to, *warning),
        EmulateEvent::Restored(note) => eprintln!("pathlab emulate '{name}': {note}"),
    }
}

/// Says on stderr, once at start, what the emulator sits between and what each way does.
fn announce(config: &EmulateConfig, started: &Started<'_>) {
    let [if_a, if_b] = started.ports;
    let (forward, reverse) = (&config.forward, &config.reverse);
    match &config.placement {
        Placement::Interpose { iface, netns } => {
            let netns = netns
                .as_ref()
                .map_or_else(|| "this namespace".to_owned(), |ns| format!("namespace {ns}"));
            eprintln!(
                "pathlab emulate '{name}': in front of {iface} in {netns} ({if_a} is its side, \
                 {if_b} the wire)\n  leaving through {iface}: {}\n  entering through {iface}: {}\n\
                 control: pathlab emulate stats --name {name}; pathlab emulate set --name {name} SPEC. \
                 Ctrl-C stops and puts {iface} back.",
                show(forward),
                show(reverse),
                name = config.name,
            );
            for note in started.notes {
                eprintln!("  note: {note}");
            }
        }
        _ => eprintln!(
            "pathlab emulate '{name}': {if_a} <-> {if_b}\n  {if_a} -> {if_b}: {}\n  {if_b} -> {if_a}: {}\n\
             control: pathlab emulate stats --name {name}; pathlab emulate set --name {name} SPEC. Ctrl-C stops.",
            show(forward),
            show(reverse),
            name = config.name,
        ),
    }
}

/// Prints one of the fidelity guard's warnings about direction `from` -> `to`.
fn print_late(name: &str, from: &str, to: &str, warning: LateWarning) {
    match warning {
        LateWarning::Late { p99_ns, bound_ns } => eprintln!(
            "pathlab emulate '{name}': {from} -> {to} sends late: p99 {} over the last \
             second, over the {} bound; what crosses it is not the link the spec \
             describes (the emulator cannot keep up here)",
            lateness_text(p99_ns),
            lateness_text(bound_ns)
        ),
        LateWarning::StillLate {
            p99_ns,
            late_for,
            late_seconds,
            seconds,
        } => eprintln!(
            "pathlab emulate '{name}': {from} -> {to} still sends late: p99 {} over the \
             last second, late for {:.0} s; {late_seconds} of {seconds} s late so far",
            lateness_text(p99_ns),
            late_for.as_secs_f64()
        ),
        LateWarning::OnTime { p99_ns, late_for } => eprintln!(
            "pathlab emulate '{name}': {from} -> {to} sends on time again: p99 {} over \
             the last second, after {:.0} s late",
            lateness_text(p99_ns),
            late_for.as_secs_f64()
        ),
    }
}

fn show(spec: &LinkSpec) -> String {
    if spec.is_passthrough() {
        "(nothing: packets pass unchanged)".into()
    } else {
        spec.to_string()
    }
}

/// `--print-tc`: the `tc` commands of the configured specs, on the interface's egress and
/// an ifb device for `--iface`, on each interface's egress otherwise.
fn print_tc(config: &EmulateConfig) {
    match &config.placement {
        Placement::Interpose { iface, .. } => print_tc_on(&config.forward, iface, &config.reverse),
        placement => {
            let [if_a, if_b] = placement.port_names();
            print_tc_between(&config.forward, &if_b, &config.reverse, &if_a);
        }
    }
}

fn print_tc_between(forward: &LinkSpec, if_b: &str, reverse: &LinkSpec, if_a: &str) {
    for (spec, from, to) in [(forward, if_a, if_b), (reverse, if_b, if_a)] {
        let tc = pathlab_core::spec::tc::to_tc_commands(spec, to);
        println!("# {from} -> {to}: on the egress of {to}");
        for command in &tc.commands {
            println!("{command}");
        }
        for caveat in &tc.caveats {
            println!("# note: {caveat}");
        }
    }
}

/// `--print-tc` for `--iface`: the spec on the interface's egress, and the reverse on an
/// ifb device its ingress is redirected to (tc has no queue on ingress).
fn print_tc_on(forward: &LinkSpec, iface: &str, reverse: &LinkSpec) {
    for (spec, what, dev) in [
        (
            forward,
            format!("leaving through {iface}: on its egress"),
            iface,
        ),
        (
            reverse,
            format!(
                "entering through {iface}: on the egress of ifb0, where its ingress is redirected"
            ),
            "ifb0",
        ),
    ] {
        println!("# {what}");
        if dev == "ifb0" {
            println!("ip link add ifb0 type ifb && ip link set ifb0 up");
            println!("tc qdisc add dev {iface} handle ffff: ingress");
            println!(
                "tc filter add dev {iface} parent ffff: matchall action mirred egress redirect dev ifb0"
            );
        }
        let tc = pathlab_core::spec::tc::to_tc_commands(spec, dev);
        for command in &tc.commands {
            println!("{command}");
        }
        for caveat in &tc.caveats {
            println!("# note: {caveat}");
        }
    }
}

fn run_set(name: &str, args: &SetArgs) -> anyhow::Result<()> {
    let specs = args.specs()?;
    let target = args.remote.target(name)?;
    client::set(&target, specs).map_err(request_error)
}

impl SetArgs {
    /// The specs to send, loaded and checked: both directions unless `--reverse` or
    /// `--direction` says otherwise.
    fn specs(&self) -> anyhow::Result<Specs> {
        let spec = load(&self.spec)?;
        let reverse = self
            .reverse
            .as_ref()
            .map(|r| load(std::slice::from_ref(r)))
            .transpose()?;
        let text = spec.to_string();
        let (forward, reverse) = match (self.direction.as_str(), reverse) {
            ("forward", _) => (Some(text), None),
            ("reverse", _) => (None, Some(text)),
            (_, Some(reverse)) => (Some(text), Some(reverse.to_string())),
            (_, None) => (Some(text.clone()), Some(text)),
        };
        Ok(Specs { forward, reverse })
    }
}

impl RemoteArgs {
    /// The emulator to ask: `--remote`'s, with the token of `--token` read (a usage error
    /// if it will not do), or the one named `name` on this machine.
    fn target(&self, name: &str) -> anyhow::Result<Target> {
        let Some(addr) = &self.remote else {
            return Ok(Target::Local(name.to_owned()));
        };
        let token = crate::cmd::read_token_file(self.token.as_deref())?;
        Ok(Target::Remote {
            addr: addr.clone(),
            token,
        })
    }
}

fn run_stats(name: &str, args: &StatsArgs) -> anyhow::Result<()> {
    let target = args.remote.target(name)?;
    let stats = client::stats(&target).map_err(request_error)?;
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print_stats(&stats);
    }
    Ok(())
}

fn request_error(error: RequestError) -> anyhow::Error {
    if error.is_usage() {
        usage(error)
    } else {
        anyhow::Error::new(error)
    }
}

/// Prints the counters of an emulator as a table.
pub fn print_stats(stats: &EmulatorStats) {
    let mut out = std::io::stdout().lock();
    let uptime = Duration::from_nanos(stats.uptime_ns);
    let _ = writeln!(
        out,
        "emulator '{}', up {:.3} s",
        stats.name,
        uptime.as_secs_f64()
    );
    if let Some(scheduling) = &stats.scheduling {
        let _ = writeln!(out, "forwarding threads: {}", scheduling.text());
        for note in &scheduling.notes {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    for direction in &stats.directions {
        print_direction_traffic(&mut out, direction, uptime.as_secs_f64().max(1e-9));
        print_direction_timing(&mut out, direction);
    }
}

/// One direction's heading and traffic in the stats table: what it received, forwarded
/// (its rate averaged over `seconds` of uptime), dropped and altered, and what it holds
/// now.
fn print_direction_traffic(
    out: &mut impl std::io::Write,
    direction: &pathlab_emulator::emulator::DirectionCounters,
    seconds: f64,
) {
    let _ = writeln!(
        out,
        "{} -> {}: {}",
        direction.from,
        direction.to,
        show_text(&direction.spec)
    );
    let _ = writeln!(
        out,
        "  received   {} packets ({} frames){}",
        direction.packets_received,
        direction.frames_received,
        if direction.malformed > 0 {
            format!(", {} malformed", direction.malformed)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "  forwarded  {} packets, {} bytes, {} average",
        direction.forwarded,
        direction.forwarded_bytes,
        format::rate(
            direction.forwarded_bytes as f64 * 8.0 / seconds,
            Digits::fixed(2)
        )
    );
    let drops: Vec<String> = pathlab_core::DropReason::ALL
        .iter()
        .filter(|r| direction.link.dropped(**r) > 0)
        .map(|r| format!("{} {}", direction.link.dropped(*r), r.name()))
        .collect();
    let _ = writeln!(
        out,
        "  dropped    {}{}",
        direction.link.dropped_total(),
        if drops.is_empty() {
            String::new()
        } else {
            format!(" ({})", drops.join(", "))
        }
    );
    if direction.link.ce_marked
        + direction.link.duplicated
        + direction.link.corrupted
        + direction.link.reordered
        > 0
    {
        let _ = writeln!(
            out,
            "  altered    {} CE-marked, {} duplicated, {} corrupted, {} reordered",
            direction.link.ce_marked,
            direction.link.duplicated,
            direction.link.corrupted,
            direction.link.reordered
        );
    }
    let _ = writeln!(
        out,
        "  now        {} queued ({} bytes), {} inside the link",
        direction.queue_packets, direction.queue_bytes, direction.in_flight
    );
}

/// How late one direction sent, how long frames waited to be read and the fidelity
/// guard's verdict, then what went wrong, if anything: failed sends, a full ring or
/// egress, an interface that went down or disappeared.
fn print_direction_timing(
    out: &mut impl std::io::Write,
    direction: &pathlab_emulator::emulator::DirectionCounters,
) {
    let late = &direction.lateness;
    let _ = writeln!(
        out,
        "  timing     sent late by p50 {} us, p99 {} us, max {} us (over {} packets)",
        late.p50_ns / 1000,
        late.p99_ns / 1000,
        late.max_ns / 1000,
        late.packets
    );
    let waited = &direction.waited;
    let _ = writeln!(
        out,
        "  reading    frames waited to be read p50 {} us, p99 {} us, max {} us (counted in \
         the lateness above)",
        waited.p50_ns / 1000,
        waited.p99_ns / 1000,
        waited.max_ns / 1000,
    );
    let _ = writeln!(out, "  guard      {}", guard_text(late));
    if direction.send_errors + direction.ring_full > 0 {
        let _ = writeln!(
            out,
            "  errors     {} sends failed, receive ring overflowed {} times",
            direction.send_errors, direction.ring_full
        );
    }
    if direction.egress_full > 0 {
        let _ = writeln!(
            out,
            "  egress     {} full: {} packets dropped there (a queue behind the emulator, \
             such as a token bucket, is the narrower link)",
            direction.to, direction.egress_full
        );
    }
    if direction.went_down > 0 {
        let _ = writeln!(
            out,
            "  down       {} went down {} time(s)",
            direction.from, direction.went_down
        );
    }
    if direction.disappeared + direction.reopened > 0 {
        let _ = writeln!(
            out,
            "  gone       {} disappeared {} time(s), reopened {} time(s)",
            direction.from, direction.disappeared, direction.reopened
        );
    }
}

/// The fidelity guard's line of a direction: `last second p99 40 us; late 0 of 12 s (p99
/// over 1 ms), worst second p99 90 us`.
fn guard_text(late: &pathlab_emulator::fidelity::LatenessSummary) -> String {
    let verdict = match late.bound_ns {
        Some(bound) => format!(
            "late {} of {} s (p99 over {})",
            late.late_seconds,
            late.seconds,
            lateness_text(bound)
        ),
        None => "off (no second judged late)".into(),
    };
    format!(
        "last second p99 {}; {verdict}, worst second p99 {}",
        lateness_text(late.last_second_p99_ns),
        lateness_text(late.worst_second_p99_ns)
    )
}

fn show_text(spec: &str) -> &str {
    if spec.is_empty() {
        "(nothing)"
    } else {
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_warn_is_a_time_above_zero_or_off() {
        assert_eq!(
            parse_late_bound("1ms"),
            Ok(LateBound(Some(Duration::from_millis(1))))
        );
        assert_eq!(
            parse_late_bound("250us"),
            Ok(LateBound(Some(Duration::from_micros(250))))
        );
        assert_eq!(parse_late_bound("off"), Ok(LateBound(None)));
        assert!(parse_late_bound("0ms").unwrap_err().ends_with("; or 'off'"));
        assert!(parse_late_bound("never").is_err());
        // The default shows as it is typed.
        assert_eq!(LateBound(Some(DEFAULT_LATE_BOUND)).to_string(), "1ms");
    }
}
