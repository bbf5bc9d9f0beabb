//! `pathlab bond`: bond several lines into one tunnel (server, client, stats).

use std::net::{IpAddr, SocketAddr};

use anyhow::Context as _;
use pathlab_bond::fair::{FairKey, Order};
use pathlab_bond::line::LineState;
use pathlab_bond::peers::PeerConfig;
use pathlab_bond::sched::SchedulerKind;
use pathlab_bond::server::Peers;
use pathlab_bond::stats::BondStats;
use pathlab_bond_driver::config::{
    create_key_file, BondClientConfig, BondServerConfig, KeyFile, KeyFileError, LineConfig,
    TunnelConfig,
};
use pathlab_bond_driver::launch::Launcher;
use pathlab_bond_driver::tunnel::{
    BondError, BondEvent, ClientOptions, OsEntropy, ServerOptions, TunOptions,
};
use pathlab_core::format::{self, Digits};
use pathlab_core::Duration;

use crate::usage;

/// Arguments of `pathlab bond`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BondCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BondCommand {
    /// The end that puts the lines back together (one UDP address, many clients).
    Server(ServerArgs),
    /// The site with the lines: carries its traffic over all of them at once.
    Client(ClientArgs),
    /// A running tunnel's lines: state, rate, queue delay, loss; sessions and counters.
    Stats(StatsArgs),
    /// Write a fresh key (32 random bytes, 64 hex digits) to FILE, readable by its owner
    /// only, and print its public key. It serves as an end's private key (--key) or as a
    /// pre-shared key (--psk).
    Key(KeyArgs),
    /// Print the public key of a key file (what the other end gives as --server-key or in
    /// --peer NAME,key=PUBLIC).
    Public(KeyArgs),
}

#[derive(Debug, clap::Args)]
struct KeyArgs {
    /// The key file (`bond key` refuses one that exists).
    #[arg(value_name = "FILE")]
    file: std::path::PathBuf,
}

/// What both ends share.
#[derive(Debug, clap::Args)]
// A flattened struct's `after_help` is its command's: `bond server`'s and `bond client`'s.
#[command(after_help = "When the tunnel stops, it prints its final stats (as JSON with -J).")]
struct Common {
    /// A pre-shared key (at least 32 bytes, in a file only its owner may read: `pathlab
    /// bond key bond.key` makes one). Alone at both ends, it is the simple mode for one
    /// site: every key derives from it. With --key, it is mixed into every handshake.
    #[arg(long, value_name = "FILE")]
    psk: Option<std::path::PathBuf>,
    /// This end's private key (a file only its owner may read: `pathlab bond key` makes
    /// one and prints its public key for the other end).
    #[arg(long, value_name = "FILE")]
    key: Option<std::path::PathBuf>,
    /// The TUN device's name (the TAP device's, with --tap).
    #[arg(long, value_name = "NAME", default_value = "bond0")]
    tun: String,
    /// Carry Ethernet frames, VLAN tags and all, through a TAP device instead of IP
    /// packets through a TUN device: the two ends' TAPs are ports of two bridges, one LAN.
    /// Its MTU leaves room for the Ethernet header and one 802.1Q tag (1408 on 1500-byte
    /// IPv4 lines). A server bridges one client (at most one --peer, without allowed=).
    #[arg(long)]
    tap: bool,
    /// The bridge the TAP device joins as a port (it must exist).
    #[arg(long, value_name = "BRIDGE", requires = "tap")]
    bridge: Option<String>,
    /// An address of the TUN device, with its prefix (repeat for IPv4 and IPv6).
    #[arg(long, value_name = "CIDR")]
    address: Vec<String>,
    /// A route into the tunnel (repeat).
    #[arg(long, value_name = "CIDR")]
    route: Vec<String>,
    /// The TUN device's MTU (default: what fits one datagram of the smallest line, 1426
    /// on 1500-byte IPv4 lines; larger inner packets are fragmented over datagrams).
    #[arg(long, value_name = "BYTES")]
    mtu: Option<u32>,
    /// How users share the tunnel: by inner source address, by flow, or not at all.
    #[arg(long, value_parser = ["src", "flow", "off"], default_value = "src")]
    fair: String,
    /// What the far end keeps in order: each flow (a host's ping does not wait for its
    /// bulk flow), or each user as `--fair` tells them apart (its flows one queue).
    #[arg(long, value_parser = ["flow", "user"], default_value = "flow")]
    order: String,
    /// Compress inner packets with LZ4 when it shrinks them.
    #[arg(long)]
    compress: bool,
    /// Several small inner packets per datagram (on), or one per datagram (off, the
    /// comparison: a line whose modem forwards a bounded number of packets per second
    /// then carries one small packet per packet).
    #[arg(long, value_parser = ["on", "off"], default_value = "on")]
    packing: String,
    /// Compress inner IP/TCP and IP/UDP headers against references the other end
    /// acknowledged (off: this end neither compresses nor acknowledges, so the other end
    /// sends it whole packets too; the two ends may differ).
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"], default_value = "on")]
    header_compression: String,
    /// The queueing delay each line is held at.
    #[arg(long, value_name = "TIME", default_value = "5ms", value_parser = parse_target)]
    target: Duration,
    /// How often the session's keys roll over (a handshake inside the session; at least
    /// 10s). A previous key opens what was in flight until 60s after this.
    #[arg(long, value_name = "TIME", default_value = "120s", value_parser = parse_rekey_after)]
    rekey_after: Duration,
    /// A traffic class rule, CLASS:MATCH[,MATCH...] (repeat, first match wins; at most
    /// 64). CLASS: bulk (spread over the lines), interactive (one copy at once on the line
    /// where it lands first), redundant (a copy on each of the two lines where it lands
    /// first; the far end drops the second). MATCH: udp, tcp, icmp, proto=N, port=A[-B]
    /// (either port), sport=, dport=, dscp=N[-M] or dscp=ef, any. E.g.
    /// redundant:udp,dport=5060-5061 or interactive:dscp=34. Packets no rule matches: DSCP
    /// EF and small steady UDP flows (calls) redundant, the rest bulk; a last bulk:any
    /// turns that off. Each end classifies what it sends.
    #[arg(long = "class", value_name = "RULE")]
    class: Vec<String>,
    /// The name `pathlab bond stats --name` finds this tunnel by (default: the TUN name).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    output: crate::cmd::args::JsonOutput,
    #[command(flatten)]
    metrics: crate::cmd::metrics::MetricsArgs,
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// The address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Most clients at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_clients: usize,
    /// Most lines a client may have.
    #[arg(long, value_name = "N", default_value_t = 8)]
    max_lines: usize,
    /// A client that may connect (with --key): its name, its public key and the inner
    /// prefixes it may send from and receive at (none: every address, for one client).
    /// Repeat for each client.
    #[arg(long, value_name = "NAME,key=PUBLIC[,allowed=CIDR]...")]
    peer: Vec<String>,
    /// A file of peers, one per line as --peer takes them (# starts a comment).
    #[arg(long, value_name = "FILE")]
    peers: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
struct ClientArgs {
    /// The server's address and port.
    #[arg(value_name = "SERVER:PORT")]
    server: SocketAddr,
    /// A line: IFACE[,via=GATEWAY][,rate=RATE][,overhead=BYTES] (repeat). `via` routes
    /// the line's datagrams through its own gateway; `rate` caps the line and weighs it
    /// for `wrr`; `overhead` is what the line's link layer adds to each IP packet as its
    /// modem counts it (default Ethernet's 14; 0 to 256): rates count UDP and IP headers
    /// and this.
    #[arg(
        long,
        value_name = "IFACE[,via=GW][,rate=R][,overhead=BYTES]",
        required = true
    )]
    line: Vec<String>,
    /// How datagrams are spread over the lines: earliest arrival over paced lines, or
    /// the unpaced round robins other tunnels use (for comparison).
    #[arg(long, value_parser = ["delay", "rr", "wrr"], default_value = "delay")]
    scheduler: String,
    /// The server's public key (with --key; `pathlab bond public` prints it from the
    /// server's key file).
    #[arg(long, value_name = "PUBLIC")]
    server_key: Option<String>,
    /// Give up if the server has not answered the first handshake after this long (once
    /// a session opened, the client never gives up).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = crate::cmd::parse_time)]
    connect_timeout: Duration,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, clap::Args)]
struct StatsArgs {
    /// The tunnel's name (its TUN device's name unless --name was given).
    #[arg(long, default_value = "bond0")]
    name: String,
    #[command(flatten)]
    output: crate::cmd::args::JsonOutput,
}

fn parse_rekey_after(text: &str) -> Result<Duration, String> {
    let after = crate::cmd::parse_time(text)?;
    if after < pathlab_bond::rekey::MIN_REKEY_AFTER {
        return Err(format!(
            "rekeys must be at least 10s apart, {text} was given"
        ));
    }
    Ok(after)
}

fn parse_target(text: &str) -> Result<Duration, String> {
    let target = crate::cmd::parse_time(text)?;
    if target > Duration::from_secs(1) {
        return Err(format!(
            "a target of {text} would let every line hold a second of queue; give at most 1s"
        ));
    }
    Ok(target)
}

/// Runs `pathlab bond`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        BondCommand::Server(server) => run_server(server),
        BondCommand::Client(client) => run_client(client),
        BondCommand::Stats(stats) => run_stats(stats),
        BondCommand::Key(key) => {
            let public = create_key_file(&key.file).map_err(|error| match error {
                KeyFileError::Create { .. } => usage(error),
                KeyFileError::Write(_) => anyhow::Error::new(error),
            })?;
            println!("{public}");
            Ok(())
        }
        BondCommand::Public(key) => {
            println!(
                "{}",
                key_file(&key.file)?
                    .secret_key()
                    .map_err(usage)?
                    .public_key()
            );
            Ok(())
        }
    }
}

/// Reads a key file (its owner's only) for the tunnel's configuration to parse.
fn key_file(path: &std::path::Path) -> anyhow::Result<KeyFile> {
    Ok(KeyFile {
        path: path.to_owned(),
        contents: crate::cmd::read_key_file(path).map_err(usage)?,
    })
}

fn parse_cidrs(texts: &[String]) -> anyhow::Result<Vec<(IpAddr, u8)>> {
    texts
        .iter()
        .map(|text| pathlab_bond::peers::parse_cidr(text).map_err(usage))
        .collect()
}

impl Common {
    /// What both ends share, with the key files read.
    fn config(&self) -> anyhow::Result<TunnelConfig> {
        let psk = self
            .psk
            .as_deref()
            .map(|path| key_file(path)?.psk().map_err(usage))
            .transpose()?;
        let addresses = parse_cidrs(&self.address)?;
        let routes = parse_cidrs(&self.route)?;
        Ok(TunnelConfig {
            name: self.name.clone(),
            tun: TunOptions {
                name: self.tun.clone(),
                mtu: self.mtu,
                addresses,
                routes,
                bridge: self.bridge.clone(),
            },
            tap: self.tap,
            fair: match self.fair.as_str() {
                "flow" => FairKey::Flow,
                "off" => FairKey::Off,
                _ => FairKey::Source,
            },
            order: match self.order.as_str() {
                "user" => Order::User,
                _ => Order::Flow,
            },
            compress: self.compress,
            packing: self.packing == "on",
            header_compression: self.header_compression == "on",
            target: self.target,
            rekey_after: self.rekey_after,
            classes: pathlab_bond::class::parse_rules(&self.class)
                .map_err(|e| usage(anyhow::anyhow!(e)))?,
            psk,
            key: self
                .key
                .as_deref()
                .map(|path| key_file(path)?.secret_key().map_err(usage))
                .transpose()?,
        })
    }
}

impl ServerArgs {
    /// The server's options, checked.
    fn config(&self) -> anyhow::Result<ServerOptions> {
        let tunnel = self.common.config()?;
        let mut peers = self
            .peer
            .iter()
            .map(|p| PeerConfig::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(usage)?;
        if let Some(path) = &self.peers {
            let contents = std::fs::read(path)
                .with_context(|| format!("cannot read the peers file '{}'", path.display()))
                .map_err(usage)?;
            peers.extend(
                PeerConfig::parse_file(&contents)
                    .with_context(|| format!("peers file '{}'", path.display()))
                    .map_err(usage)?,
            );
        }
        let config = BondServerConfig {
            listen: self.listen,
            max_clients: self.max_clients,
            max_lines: self.max_lines,
            peers,
            tunnel,
        };
        config.options().map_err(usage)
    }
}

impl ClientArgs {
    /// The client's options, checked (in the simple mode, with a fresh key of its own).
    fn config(&self) -> anyhow::Result<ClientOptions> {
        let lines = self
            .line
            .iter()
            .map(|line| line.parse::<LineConfig>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(usage)?;
        let config = BondClientConfig {
            server: self.server,
            lines,
            scheduler: match self.scheduler.as_str() {
                "rr" => SchedulerKind::RoundRobin,
                "wrr" => SchedulerKind::WeightedRoundRobin,
                _ => SchedulerKind::Delay,
            },
            server_key: self.server_key.clone(),
            connect_timeout: self.connect_timeout,
            tunnel: self.common.config()?,
        };
        config.options(&mut OsEntropy).map_err(usage)
    }
}

/// Runs the tunnel `body` with `--metrics` served beside it. A scrape asks the tunnel's
/// stats socket named `name`, as `pathlab bond stats` does, so both read one snapshot's
/// numbers and the tunnel's loop carries no second reporting path.
fn with_metrics<R>(
    metrics: &crate::cmd::metrics::MetricsArgs,
    name: &str,
    body: impl FnOnce() -> R,
) -> anyhow::Result<R> {
    let metrics = crate::cmd::metrics::Metrics::bind(metrics)?;
    let render = || {
        pathlab_bond_driver::tunnel::request_stats(name)
            .map(|stats| pathlab_bond_driver::metrics::metrics(&stats))
            .map_err(crate::cmd::metrics::render_error)
    };
    Ok(metrics.serve_while(&render, body))
}

/// Starts a tunnel end: a missing capability is the user's to fix (exit code 2).
fn launcher(command: &'static str) -> anyhow::Result<Launcher> {
    Launcher::new(command).map_err(|error| match error {
        BondError::NeedsNetAdmin(_) => usage(error),
        other => anyhow::Error::new(other),
    })
}

fn print_event(event: &BondEvent) {
    match event {
        BondEvent::TunUp { name, mtu } => eprintln!("bond: {name} is up, MTU {mtu}"),
        BondEvent::SessionOpen {
            session,
            reconnects: 0,
        } => {
            eprintln!("bond: session {session:08x} open");
        }
        BondEvent::SessionOpen {
            session,
            reconnects,
        } => {
            eprintln!("bond: session {session:08x} open (reconnect {reconnects})");
        }
        BondEvent::Sessions { open } => eprintln!("bond: {open} client(s) connected"),
        BondEvent::Line { interface, state } => match state {
            LineState::Up => eprintln!("bond: line {interface} is up"),
            LineState::Down => eprintln!("bond: line {interface} is DOWN"),
        },
        BondEvent::TunMtu {
            name,
            mtu,
            line_payload,
        } => eprintln!(
            "bond: {name}'s MTU lowered to {mtu}: the narrowest line carries datagrams of {line_payload} bytes"
        ),
    }
}

fn run_server(args: &ServerArgs) -> anyhow::Result<()> {
    let options = args.config()?;
    let launcher = launcher("pathlab bond server")?;
    let public = match &options.peers {
        Peers::Listed(listed) => {
            format!(
                ", public key {}, {} peer(s)",
                options.keys.secret.public_key(),
                listed.len()
            )
        }
        Peers::AnyKey => String::new(),
    };
    eprintln!("bond: server listening on {}{public}", options.listen);
    let stats = with_metrics(&args.common.metrics, &options.name, || {
        launcher.serve(&options, print_event)
    })??;
    finish(&stats, args.common.output.json)
}

fn run_client(args: &ClientArgs) -> anyhow::Result<()> {
    let options = args.config()?;
    let launcher = launcher("pathlab bond client")?;
    let stats = with_metrics(&args.common.metrics, &options.name, || {
        launcher.connect(&options, print_event)
    })?
    .map_err(|error| match error {
        BondError::Line { .. } => usage(error),
        other => anyhow::Error::new(other),
    })?;
    finish(&stats, args.common.output.json)
}

fn finish(stats: &BondStats, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(stats)?);
    } else {
        print_stats(stats);
    }
    Ok(())
}

fn run_stats(args: &StatsArgs) -> anyhow::Result<()> {
    let stats = pathlab_bond_driver::tunnel::request_stats(&args.name).map_err(usage)?;
    finish(&stats, args.output.json)
}

/// A session's traffic classes: packets sent per class, and the redundant class's copies.
fn print_classes(session: &pathlab_bond::stats::SessionStats) {
    let counters = &session.counters;
    println!(
        "  classes: bulk {}, interactive {}, redundant {} ({} copies sent, {} dropped); copies dropped here {}",
        counters.class_bulk,
        counters.class_interactive,
        counters.class_redundant,
        counters.redundant_copies,
        counters.express_dropped,
        session.reorder.duplicates,
    );
}

fn print_stats(stats: &BondStats) {
    println!(
        "{} '{}', up {:.0} s, {} session(s)",
        stats.role,
        stats.name,
        stats.uptime_s,
        stats.sessions.len()
    );
    for session in &stats.sessions {
        println!(
            "session {:08x}: in {} out {} packets, backlog {} B, reorder wait {:.1} ms, auth failures {}, replays {}",
            session.session,
            session.counters.inner_in,
            session.counters.inner_out,
            session.backlog_bytes,
            session.reorder_timeout_ms,
            session.counters.auth_failures,
            session.counters.replays,
        );
        if !session.peer.is_empty() {
            println!("  peer {}", session.peer);
        }
        let counters = &session.counters;
        if counters.headers_compressed + counters.headers_full_sent + counters.headers_acks_sent > 0
        {
            println!(
                "  headers: {} compressed, {} saved, {} sent whole, {} contexts; received: {} references acknowledged, {} dropped without context, {} failed",
                counters.headers_compressed,
                format::bytes_si(counters.headers_saved_bytes, Digits::fixed(1)),
                counters.headers_full_sent,
                counters.headers_contexts,
                counters.headers_acks_sent,
                counters.headers_missing_context,
                counters.headers_decode_failed,
            );
        }
        println!(
            "  rekeys {} ({} rekey handshakes started)",
            session.counters.rekeys, session.counters.rekey_handshakes
        );
        print_classes(session);
        if stats.role == "client" {
            println!(
                "  handshakes {}, reconnects {}, cookies {}, stale signals {}",
                session.counters.handshakes,
                session.counters.reconnects,
                session.counters.cookies,
                session.counters.stale_signals,
            );
        }
        println!(
            "  {:<12} {:<5} {:>14} {:>14} {:>9} {:>9} {:>9} {:>7}",
            "line", "state", "rate", "achieved", "queue ms", "owd+ ms", "rtt ms", "loss"
        );
        for line in &session.lines {
            let name = if line.interface.is_empty() {
                format!("#{}", line.index)
            } else {
                line.interface.clone()
            };
            let optional = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
            println!(
                "  {:<12} {:<5} {:>14} {:>14} {:>9.1} {:>9} {:>9} {:>7}",
                name,
                match line.state {
                    LineState::Up => "up",
                    LineState::Down => "DOWN",
                },
                format::rate(line.rate_bps as f64, Digits::fixed(2)),
                format::rate(line.delivery_bps as f64, Digits::fixed(2)),
                line.queue_delay_ms,
                optional(line.relative_owd_ms),
                optional(line.srtt_ms),
                format::fraction_as_percent(line.loss, Digits::fixed(2)),
            );
        }
    }
    if let Some(server) = &stats.server {
        println!(
            "handshakes {} (copies {}, replays {}, unknown keys {}, cookies sent {}, rate-limited {}), sessions opened {} closed {} replaced {} ended {}, unconfirmed expired {}, stale sent {}, spoofed sources {}, refused full {}",
            server.handshakes,
            server.hello_copies,
            server.replayed_hellos,
            server.unknown_peers,
            server.cookies_sent,
            server.rate_limited,
            server.sessions_opened,
            server.sessions_closed,
            server.sessions_replaced,
            server.sessions_ended,
            server.unconfirmed_expired,
            server.stale_sent,
            server.spoofed_sources,
            server.refused_full,
        );
    }
}
