//! The bonding tunnel's OS side: a TUN device, UDP sockets (one per line on the client,
//! one on the server), the clock and signals. `pathlab_bond` decides everything; this
//! loop only moves bytes: it reads what the TUN device and the sockets have, hands it to
//! the state machine with the current instant, sends what it answers, and sleeps in
//! `ppoll` until its next deadline or the next packet.
//!
//! A stats socket (`bond/NAME.sock` in [`pathlab_os::runtime::runtime_dir`]) answers every
//! connection with a JSON [`BondStats`] snapshot: `pathlab bond stats` reads it.
//! The TUN device, the line routes and the stats socket are removed when the loop ends,
//! on a signal too; the TUN device also vanishes with the process after SIGKILL (it is not
//! persistent), and `pathlab lab clean` removes a stale stats socket; a killed client's
//! line routes are replaced by the next client's (and go with their namespace).

use std::io::{self, Write as _};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use pathlab_bond::endpoint::{
    device_mtu, Bond, BondConfig, Entropy, Received, DEFAULT_MAX_PAYLOAD,
};
use pathlab_bond::handshake::{ClientKeys, ServerKeys};
use pathlab_bond::inner::Framing;
use pathlab_bond::line::{LineFraming, LineState, ETHERNET_FRAMING_BYTES};
use pathlab_bond::peers::PeerError;
use pathlab_bond::server::{Address, Peers, Server, ServerConfig};
use pathlab_bond::stats::BondStats;
use pathlab_core::{Duration, Instant};

use crate::line::{self, Family, LineRoute};
use pathlab_os::netlink::Netlink;
use pathlab_os::sys;
use pathlab_os::tun::{self, Tun};
use pathlab_os::Clock;

/// The OS's CSPRNG (getrandom), for nonces and session ids.
#[derive(Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        sys::random_bytes(buf).expect("the kernel's random source never fails once booted");
    }
}

/// Addresses and routes put on the TUN device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TunOptions {
    /// The device's name.
    pub name: String,
    /// Its MTU; `None`: one inner packet per datagram of the smallest line (the line's
    /// payload less the tunnel's header, timestamp, tag and one fragment header), so
    /// nothing is fragmented. Larger MTUs work too, their packets in fragments.
    pub mtu: Option<u32>,
    /// Addresses (with prefix lengths).
    pub addresses: Vec<(IpAddr, u8)>,
    /// Routes into the tunnel.
    pub routes: Vec<(IpAddr, u8)>,
    /// A bridge the device joins as a port (a TAP device's LAN, `--bridge`).
    pub bridge: Option<String>,
}

/// One line of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineOptions {
    /// The interface the line leaves by.
    pub interface: String,
    /// The gateway to reach the server through, when the server is beyond the
    /// interface's own subnet and the main routing table does not route it there.
    pub via: Option<IpAddr>,
    /// Bytes the line's link layer adds to each IP packet, as its modem counts them
    /// (`None`: Ethernet's 14, [`pathlab_bond::line::ETHERNET_FRAMING_BYTES`]).
    pub framing_bytes: Option<u16>,
}

/// A client's options.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The name `pathlab bond stats` finds it by.
    pub name: String,
    /// The server's address.
    pub server: SocketAddr,
    /// The lines.
    pub lines: Vec<LineOptions>,
    /// Its keys and the server's.
    pub keys: ClientKeys,
    /// The TUN device.
    pub tun: TunOptions,
    /// The tunnel's settings (`lines`, `max_payload` and `line_framing` are set from `lines`).
    pub config: BondConfig,
    /// How long to wait for the server's first Response before giving up (once a session
    /// opened, the client never gives up: it handshakes again until the server answers).
    pub connect_timeout: Duration,
}

/// A server's options.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The name `pathlab bond stats` finds it by.
    pub name: String,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// Its keys.
    pub keys: ServerKeys,
    /// Who may connect.
    pub peers: Peers,
    /// The TUN device.
    pub tun: TunOptions,
    /// The server's settings.
    pub config: ServerConfig,
}

/// What the loop tells its caller as it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum BondEvent {
    /// The TUN device is up.
    TunUp {
        /// Its name.
        name: String,
        /// Its MTU.
        mtu: u32,
    },
    /// The client's session opened (again, after a reconnect).
    SessionOpen {
        /// Its id.
        session: u32,
        /// Sessions opened before this one.
        reconnects: u64,
    },
    /// A server's session count changed.
    Sessions {
        /// Sessions open now.
        open: usize,
    },
    /// A client line changed state.
    Line {
        /// Its interface.
        interface: String,
        /// Up or down now.
        state: LineState,
    },
    /// The lines' path MTU searches lowered the TUN device's MTU.
    TunMtu {
        /// The device's name.
        name: String,
        /// Its MTU now.
        mtu: u32,
        /// The narrowest line's UDP payload, as its search found it.
        line_payload: usize,
    },
}

/// Why the tunnel could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum BondError {
    /// A line's interface or socket could not be set up.
    #[error("line '{interface}': {error}")]
    Line {
        /// The interface.
        interface: String,
        /// What failed.
        error: io::Error,
    },
    /// The TUN device could not be set up.
    #[error("TUN device '{name}': {error}")]
    Tun {
        /// The device.
        name: String,
        /// What failed.
        error: io::Error,
    },
    /// The server's socket could not be bound.
    #[error("cannot listen on {listen}: {error}")]
    Listen {
        /// The address.
        listen: SocketAddr,
        /// What failed.
        error: io::Error,
    },
    /// No Welcome came from the server in time.
    #[error(
        "no answer from the server {server} in {timeout}: is it running, reachable over \
         the lines, and does it have the same key?"
    )]
    NoAnswer {
        /// The server.
        server: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
    /// The peers given are inconsistent.
    #[error("{0}")]
    Peers(#[from] PeerError),
    /// Another tunnel runs under this name.
    #[error("a tunnel named '{0}' is already running (choose another --name)")]
    NameTaken(String),
    /// The process may not administer the network (it needs CAP_NET_ADMIN for the TUN
    /// device and the line routes); nothing was touched.
    #[error(transparent)]
    NeedsNetAdmin(#[from] pathlab_os::NeedsNetAdmin),
    /// The loop's own I/O failed.
    #[error("{what}: {error}")]
    Io {
        /// What it was doing.
        what: &'static str,
        /// What failed.
        error: io::Error,
    },
}

fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> BondError {
    move |error| BondError::Io { what, error }
}

/// The path of the stats socket of the tunnel called `name` in the calling thread's network
/// namespace. Names are per namespace, as the TUN devices' are: both ends of a tunnel on one
/// machine, each in its own namespace, may keep the default name.
pub fn stats_socket_path(name: &str) -> PathBuf {
    // A thread whose namespace cannot be read shares namespace 0's names.
    let netns = pathlab_os::runtime::current_netns().unwrap_or(0);
    pathlab_os::runtime::runtime_dir()
        .join("bond")
        .join(format!("netns-{netns}-{name}.sock"))
}

/// Reads a running tunnel's stats.
pub fn request_stats(name: &str) -> io::Result<BondStats> {
    let path = stats_socket_path(name);
    let stream = std::os::unix::net::UnixStream::connect(&path).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!(
                "no tunnel named '{name}' is running ({}: {error})",
                path.display()
            ),
        )
    })?;
    serde_json::from_reader(stream).map_err(io::Error::other)
}

/// The stats socket (the owner's only, answered for root and the tunnel's user); removed on
/// drop.
#[derive(Debug)]
struct StatsSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl StatsSocket {
    fn bind(name: &str) -> Result<StatsSocket, BondError> {
        let path = stats_socket_path(name);
        let listener = pathlab_os::local_socket::bind_private(&path)
            .map_err(io_error("binding the stats socket"))?
            .ok_or_else(|| BondError::NameTaken(name.to_owned()))?;
        Ok(StatsSocket { listener, path })
    }

    fn answer(&self, stats: impl FnOnce() -> BondStats) {
        // The lines' addresses and counters are for root and the tunnel's own user only
        // (the socket is theirs alone too, unless someone changed its mode).
        if let Ok((mut stream, _)) = self.listener.accept() {
            if !pathlab_os::local_socket::trusted_peer(&stream) {
                return;
            }
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(std::time::Duration::from_millis(200)));
            if let Ok(json) = serde_json::to_vec(&stats()) {
                let _ = stream.write_all(&json);
            }
        }
    }
}

impl Drop for StatsSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn open_tun(
    options: &TunOptions,
    smallest_payload: usize,
    framing: Framing,
    header_compression: bool,
) -> Result<Tun, BondError> {
    let failed = |error| BondError::Tun {
        name: options.name.clone(),
        error,
    };
    let mtu = options.mtu.unwrap_or_else(|| {
        (device_mtu(smallest_payload, framing, header_compression) as u32).max(576)
    });
    let mut tun = match framing {
        Framing::Ip => Tun::create_offloaded(&options.name, mtu),
        Framing::Ethernet => Tun::create_tap(&options.name, mtu),
    }
    .map_err(failed)?;
    if let Some(bridge) = &options.bridge {
        tun.join_bridge(bridge).map_err(failed)?;
    }
    for &(address, prefix) in &options.addresses {
        tun.add_address(address, prefix).map_err(failed)?;
    }
    for &(destination, prefix) in &options.routes {
        tun.add_route(destination, prefix).map_err(failed)?;
    }
    Ok(tun)
}

/// Datagrams to send, collected in reused buffers and sent [`line::MAX_BATCH`] at a time
/// with one `sendmmsg` per socket; consecutive datagrams of one size to one destination go
/// as one UDP GSO train (one trip through the stack for up to 44 full datagrams, and with
/// the receiver's UDP GRO one trip up its stack too).
#[derive(Debug)]
struct Outbox {
    buffers: Vec<Vec<u8>>,
    /// (socket index, destination, source address to send from) of each filled buffer,
    /// in order.
    queued: Vec<(usize, SocketAddr, Option<IpAddr>)>,
    /// Per socket: whether it takes GSO trains (false once its device or kernel refused
    /// one).
    gso: Vec<bool>,
    /// The trains of the flush under way (reused).
    trains: Vec<line::Train>,
}

impl Outbox {
    fn new(sockets: usize) -> Outbox {
        Outbox {
            buffers: (0..line::MAX_BATCH)
                .map(|_| Vec::with_capacity(BUFFER_BYTES))
                .collect(),
            queued: Vec::with_capacity(line::MAX_BATCH),
            gso: vec![true; sockets],
            trains: Vec::with_capacity(line::MAX_BATCH),
        }
    }

    /// The buffer for the next datagram.
    fn next(&mut self) -> &mut Vec<u8> {
        &mut self.buffers[self.queued.len()]
    }

    /// The buffer [`Outbox::next`] gave is filled: to `to` by socket `socket`, sent from the
    /// local address `from` (the one the peer's datagram came to, on a multi-homed server;
    /// `None`: the kernel's choice). True when the box is full and must be flushed.
    fn push(&mut self, socket: usize, to: SocketAddr, from: Option<IpAddr>) -> bool {
        self.queued.push((socket, to, from));
        self.queued.len() == self.buffers.len()
    }

    /// Sends everything queued. A datagram the kernel refuses (a line whose interface is
    /// down or unroutable) is dropped: the liveness logic sees the silence. A socket whose
    /// device cannot take GSO trains sends one datagram per message from then on.
    fn flush(&mut self, sockets: &[&UdpSocket]) {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        for (index, socket) in sockets.iter().enumerate() {
            let mut datagrams: [&[u8]; line::MAX_BATCH] = [&[]; line::MAX_BATCH];
            let mut destinations = [(unspecified, None); line::MAX_BATCH];
            let mut count = 0;
            for ((s, to, from), buf) in self.queued.iter().zip(&self.buffers) {
                if *s == index {
                    datagrams[count] = buf;
                    destinations[count] = (*to, *from);
                    count += 1;
                }
            }
            let (datagrams, destinations) = (&datagrams[..count], &destinations[..count]);
            let mut from = 0;
            while from < count {
                plan_trains(
                    datagrams,
                    destinations,
                    from,
                    self.gso[index],
                    &mut self.trains,
                );
                from = count;
                let mut sent = 0;
                while sent < self.trains.len() {
                    match line::send_trains(socket, datagrams, &self.trains[sent..]) {
                        Ok(n) if n > 0 => sent += n,
                        // The local address to answer from is gone (removed while the
                        // server runs): send it from the kernel's choice instead, which is
                        // no reason to give up GSO.
                        Err(_) if self.trains[sent].from.is_some() => {
                            self.trains[sent].from = None;
                        }
                        Err(error)
                            if self.trains[sent].segment_size.is_some()
                                && line::is_gso_refusal(&error) =>
                        {
                            // Send the rest again, one datagram per message.
                            self.gso[index] = false;
                            from = self.trains[sent].first;
                            break;
                        }
                        _ => sent += 1, // skip the one refused
                    }
                }
            }
        }
        self.queued.clear();
    }
}

/// Cuts `datagrams[from..]` into trains: runs to one destination from one local address,
/// of one size but a shorter last, within the kernel's limits of a GSO train; with `gso`
/// false, one datagram each.
fn plan_trains(
    datagrams: &[&[u8]],
    destinations: &[(SocketAddr, Option<IpAddr>)],
    from: usize,
    gso: bool,
    trains: &mut Vec<line::Train>,
) {
    trains.clear();
    let mut first = from;
    while first < datagrams.len() {
        let size = datagrams[first].len();
        let mut end = first + 1;
        let mut total = size;
        if gso && size > 0 {
            while end < datagrams.len()
                && end - first < line::MAX_TRAIN_SEGMENTS
                && destinations[end] == destinations[first]
                && datagrams[end - 1].len() == size
                && !datagrams[end].is_empty()
                && datagrams[end].len() <= size
                && total + datagrams[end].len() <= line::MAX_TRAIN_BYTES
            {
                total += datagrams[end].len();
                end += 1;
            }
        }
        let count = end - first;
        trains.push(line::Train {
            to: destinations[first].0,
            first,
            count,
            segment_size: (count > 1).then_some(size as u16),
            from: destinations[first].1,
        });
        first = end;
    }
}

/// Writes the packets the state machine delivered into the TUN device, runs of one TCP
/// flow as one super-packet (a full TUN queue drops, as a NIC would), and empties the list.
fn deliver(tun: &Tun, delivered: &mut Vec<Vec<u8>>) {
    if delivered.is_empty() {
        return;
    }
    let packets: Vec<&[u8]> = delivered.iter().map(Vec::as_slice).collect();
    tun.send_packets(&packets);
    delivered.clear();
}

/// Batches of datagrams taken from one socket per pass (each up to [`line::MAX_BATCH`]).
const RECEIVE_BATCHES: usize = 2;
/// Packets taken from the TUN device per pass (once reached, no further read).
const RECEIVE_BUDGET: usize = 256;
/// The largest datagram or read: a vnet header and a 64 KB super-packet.
const BUFFER_BYTES: usize = pathlab_os::tun::OFFLOADED_READ_BYTES;
/// A receive batch's slot: a GRO train of datagrams (up to 64 KB).
const RECEIVE_SLOT_BYTES: usize = 65_536;
/// The longest sleep, so signals and stats are seen promptly even when idle.
const MAX_SLEEP: Duration = Duration::from_millis(200);
/// Routing tables the client's line routes use: this one for line 0, the next for 1, ...
const FIRST_LINE_TABLE: u32 = 27_000;

/// A line's interface MTU, as the largest UDP payload over it.
fn max_payload(netlink: &mut Netlink, interface: &str, family: Family) -> io::Result<usize> {
    let info = netlink.link_by_name(interface)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface '{interface}' in this network namespace"),
        )
    })?;
    let headers = LineFraming {
        ipv6: family == Family::V6,
        framing_bytes: 0,
    }
    .overhead_bytes();
    Ok((info.mtu as usize).saturating_sub(headers))
}

fn sleep_until(
    fds: &[BorrowedFd<'_>],
    ready: &mut [bool],
    clock: &Clock,
    at: Option<Instant>,
) -> io::Result<()> {
    let now = clock.now();
    let wait = at.map_or(MAX_SLEEP, |at| at.saturating_since(now).min(MAX_SLEEP));
    sys::poll_readable(fds, Some(wait.into()), ready)
}

/// Runs a client until a termination signal arrives on `signals`; `on_event` hears of
/// what changes. Returns the last snapshot.
pub fn run_client(
    options: &ClientOptions,
    signals: BorrowedFd<'_>,
    mut on_event: impl FnMut(&BondEvent),
) -> Result<BondStats, BondError> {
    let family = Family::of(options.server.ip());
    let mut netlink = Netlink::open().map_err(io_error("opening netlink"))?;
    let mut sockets = Vec::new();
    let mut routes = Vec::new();
    let mut config = options.config.clone();
    config.lines = options.lines.len();
    config.max_payload.clear();
    config.line_framing = options
        .lines
        .iter()
        .map(|line| LineFraming {
            ipv6: family == Family::V6,
            framing_bytes: line.framing_bytes.unwrap_or(ETHERNET_FRAMING_BYTES),
        })
        .collect();
    for (k, line) in options.lines.iter().enumerate() {
        let failed = |error| BondError::Line {
            interface: line.interface.clone(),
            error,
        };
        let socket = line::line_socket(&line.interface, None, family).map_err(failed)?;
        let _ = line::enable_udp_gro(&socket); // without it, one datagram per message
        if let Some(via) = line.via {
            routes.push(
                LineRoute::add(&line.interface, via, FIRST_LINE_TABLE + k as u32)
                    .map_err(failed)?,
            );
        }
        config
            .max_payload
            .push(max_payload(&mut netlink, &line.interface, family).map_err(failed)?);
        sockets.push(socket);
    }
    config.line_rates.resize(config.lines, None);
    let stats_socket = StatsSocket::bind(&options.name)?;
    let smallest = config
        .max_payload
        .iter()
        .copied()
        .min()
        .unwrap_or(DEFAULT_MAX_PAYLOAD);
    let framing = config.framing;
    let mut tun = open_tun(&options.tun, smallest, framing, config.header_compression)?;
    on_event(&BondEvent::TunUp {
        name: tun.name().to_owned(),
        mtu: tun.mtu(),
    });
    let clock = Clock::start();
    let mut client = ClientEnd::new(options, config, &clock);
    let stats = TunnelLoop::new(&mut tun, &sockets, &stats_socket, signals, &clock)
        .run(&mut client, &mut on_event)?;
    drop(routes);
    Ok(stats)
}

/// Runs a server until a termination signal arrives on `signals`.
pub fn run_server(
    options: &ServerOptions,
    signals: BorrowedFd<'_>,
    mut on_event: impl FnMut(&BondEvent),
) -> Result<BondStats, BondError> {
    let socket = UdpSocket::bind(options.listen).map_err(|error| BondError::Listen {
        listen: options.listen,
        error,
    })?;
    socket
        .set_nonblocking(true)
        .map_err(io_error("setting up the socket"))?;
    // DF on, as on the client's lines: the server probes each line's path MTU downward.
    sys::set_df_probe(socket.as_fd(), options.listen.is_ipv6())
        .map_err(io_error("setting DF for path MTU probing"))?;
    if options.listen.is_ipv6() {
        // An IPv6 socket carries IPv4 clients too (mapped addresses), whose datagrams
        // follow the IPv4 option: without it, a probe too big for the path is fragmented
        // instead of lost. A socket that takes no IPv4 (bindv6only) refuses it: no matter.
        let _ = sys::set_df_probe(socket.as_fd(), false);
    }
    let _ = sys::grow_receive_buffer(socket.as_fd(), line::LINE_BUFFER_BYTES);
    let _ = sys::grow_send_buffer(socket.as_fd(), line::LINE_BUFFER_BYTES);
    let _ = line::enable_udp_gro(&socket);
    // Each datagram's local address, to answer from it: a server on 0.0.0.0 or [::] with
    // several addresses must not answer from whichever one the route picks.
    line::enable_packet_info(&socket).map_err(io_error("asking for each datagram's address"))?;
    let stats_socket = StatsSocket::bind(&options.name)?;
    // Datagrams of a 1500-byte path of the listening address's family: sized for IPv4, a
    // full one would leave an IPv6 server in two fragments.
    let max_payload = match Family::of(options.listen.ip()) {
        Family::V4 => DEFAULT_MAX_PAYLOAD,
        Family::V6 => 1500 - 40 - 8,
    };
    let mut config = options.config.clone();
    config.session.max_payload = vec![max_payload; config.session.lines];
    let mut tun = open_tun(
        &options.tun,
        max_payload,
        config.session.framing,
        config.session.header_compression,
    )?;
    on_event(&BondEvent::TunUp {
        name: tun.name().to_owned(),
        mtu: tun.mtu(),
    });
    let clock = Clock::start();
    let mut server = ServerEnd {
        server: Server::new(
            config,
            options.keys.clone(),
            options.peers.clone(),
            Box::new(OsEntropy),
        )?,
        name: &options.name,
        open: 0,
    };
    TunnelLoop::new(
        &mut tun,
        std::slice::from_ref(&socket),
        &stats_socket,
        signals,
        &clock,
    )
    .run(&mut server, &mut on_event)
}

/// A datagram a state machine built, and where it goes.
#[derive(Debug, Clone, Copy)]
struct Outgoing {
    /// The index of the socket to send it by (a client's line; the server's one socket).
    socket: usize,
    /// Its destination.
    to: SocketAddr,
    /// The local address to send it from (`None`: the kernel's choice).
    from: Option<IpAddr>,
}

/// What a client and a server do differently in the event loop they share
/// ([`TunnelLoop::run`]): which state machine the loop feeds (a client's session, a
/// server's sessions), where what it emits goes, and what is announced after each pass.
trait TunnelEnd {
    /// What reading a socket is called in the error when it fails.
    const READING_SOCKET: &'static str;
    /// Whether an ICMP error read from a socket ends this pass's reading of that socket
    /// (true) or the next batch is read all the same (false).
    const REFUSAL_ENDS_READING: bool;

    /// Hands the state machine an inner packet read from the TUN device.
    fn handle_inner(&mut self, now: Instant, packet: Vec<u8>);

    /// Hands the state machine a datagram (one segment of a GRO train) that socket
    /// `socket` received from `source`, addressed to the local `destination`.
    fn handle_datagram(
        &mut self,
        now: Instant,
        socket: usize,
        source: SocketAddr,
        destination: Option<IpAddr>,
        datagram: &mut [u8],
    );

    /// Lets the state machine's timers fire.
    fn handle_timeout(&mut self, now: Instant);

    /// The next inner packet to write into the TUN device.
    fn poll_deliver(&mut self) -> Option<Vec<u8>>;

    /// Builds the next datagram to send into `buf`, and says where it goes.
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing>;

    /// Tells `on_event` what changed in this pass (and adjusts the TUN device to it); an
    /// error ends the loop.
    fn announce_changes(
        &mut self,
        now: Instant,
        tun: &mut Tun,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<(), BondError>;

    /// A snapshot of the tunnel, `uptime_s` seconds after it started.
    fn stats(&self, uptime_s: f64) -> BondStats;

    /// When the state machine next needs [`TunnelEnd::handle_timeout`].
    fn poll_at(&self) -> Option<Instant>;

    /// Queues a Close for every peer, as the loop ends.
    fn close(&mut self);
}

/// A client's side of the loop: its one session and what it has announced of it.
struct ClientEnd<'a> {
    options: &'a ClientOptions,
    bond: Bond,
    /// The lines' interfaces, in line order.
    interfaces: Vec<String>,
    /// Per line, the state last announced.
    states: Vec<LineState>,
    /// The session last announced open.
    announced: Option<u32>,
    /// Per line, the address it last heard the server from (what authenticated).
    heard_from: Vec<Option<SocketAddr>>,
}

impl<'a> ClientEnd<'a> {
    /// A client with a session to open under `config`, its lines all up and none heard yet.
    fn new(options: &'a ClientOptions, config: BondConfig, clock: &Clock) -> ClientEnd<'a> {
        let interfaces: Vec<String> = options.lines.iter().map(|l| l.interface.clone()).collect();
        let bond = Bond::client(
            config,
            options.keys.clone(),
            Box::new(OsEntropy),
            clock.now(),
            pathlab_os::clock::unix_now_ns(),
        );
        let lines = options.lines.len();
        ClientEnd {
            options,
            bond,
            interfaces,
            states: vec![LineState::Up; lines],
            announced: None,
            heard_from: vec![None; lines],
        }
    }

    /// Announces the session once it opens (again, after a reconnect); an error once the
    /// first one took longer than the connect timeout.
    fn announce_session(
        &mut self,
        now: Instant,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<(), BondError> {
        let bond = &self.bond;
        if bond.is_open() && bond.session() != self.announced {
            self.announced = bond.session();
            on_event(&BondEvent::SessionOpen {
                session: bond.session().unwrap_or(0),
                reconnects: bond.counters().reconnects,
            });
        }
        if self.announced.is_none()
            && now.saturating_since(Instant::ZERO) > self.options.connect_timeout
        {
            return Err(BondError::NoAnswer {
                server: self.options.server,
                timeout: self.options.connect_timeout,
            });
        }
        Ok(())
    }

    /// Announces each line that went up or down.
    fn announce_lines(&mut self, on_event: &mut impl FnMut(&BondEvent)) {
        for (k, line) in self.bond.lines().iter().enumerate() {
            if line.state() != self.states[k] {
                self.states[k] = line.state();
                on_event(&BondEvent::Line {
                    interface: self.interfaces[k].clone(),
                    state: self.states[k],
                });
            }
        }
    }

    /// Lowers the TUN device's MTU to the narrowest line's path MTU, when no MTU was given.
    fn follow_tunnel_mtu(
        &self,
        tun: &mut Tun,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<(), BondError> {
        // The TUN's MTU follows the narrowest line's path MTU, down only (a narrow line
        // that goes down and comes back must not see packets it cannot carry whole).
        if let (None, Some(mtu)) = (self.options.tun.mtu, self.bond.tunnel_mtu()) {
            let mtu = (mtu as u32).max(tun::MIN_TUN_MTU);
            if mtu < tun.mtu() {
                tun.set_mtu(mtu)
                    .map_err(io_error("lowering the TUN device's MTU"))?;
                on_event(&BondEvent::TunMtu {
                    name: tun.name().to_owned(),
                    mtu,
                    line_payload: self.bond.narrowest_payload().unwrap_or_default(),
                });
            }
        }
        Ok(())
    }
}

impl TunnelEnd for ClientEnd<'_> {
    const READING_SOCKET: &'static str = "reading a line";
    // An ICMP error (port unreachable while the server starts): the line liveness logic
    // sees the silence; nothing to do here.
    const REFUSAL_ENDS_READING: bool = true;

    fn handle_inner(&mut self, now: Instant, packet: Vec<u8>) {
        self.bond.handle_inner(now, packet);
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        socket: usize,
        source: SocketAddr,
        _destination: Option<IpAddr>,
        datagram: &mut [u8],
    ) {
        // Any source is heard: what authenticates is the server, whatever address a
        // multi-homed one answers from.
        if let Received::Authentic { .. } = self.bond.handle_datagram(now, datagram) {
            self.heard_from[socket] = Some(source);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.bond.handle_timeout(now);
    }

    fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        self.bond.poll_deliver()
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing> {
        let transmit = self.bond.poll_transmit(now, buf)?;
        Some(Outgoing {
            socket: usize::from(transmit.line),
            to: self.options.server,
            from: None,
        })
    }

    fn announce_changes(
        &mut self,
        now: Instant,
        tun: &mut Tun,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<(), BondError> {
        self.announce_session(now, on_event)?;
        self.announce_lines(on_event);
        self.follow_tunnel_mtu(tun, on_event)
    }

    fn stats(&self, uptime_s: f64) -> BondStats {
        BondStats::client(
            &self.options.name,
            uptime_s,
            &self.bond,
            &self.interfaces,
            &self.heard_from,
        )
    }

    fn poll_at(&self) -> Option<Instant> {
        self.bond.poll_at()
    }

    fn close(&mut self) {
        // A Close on every line, so the server frees the slot now rather than after its
        // idle timeout.
        self.bond.close();
    }
}

/// A server's side of the loop: its sessions and how many it last announced.
struct ServerEnd<'a> {
    server: Server,
    /// The name `pathlab bond stats` finds it by.
    name: &'a str,
    /// Sessions open, as last announced.
    open: usize,
}

impl TunnelEnd for ServerEnd<'_> {
    const READING_SOCKET: &'static str = "reading the socket";
    const REFUSAL_ENDS_READING: bool = false;

    fn handle_inner(&mut self, now: Instant, packet: Vec<u8>) {
        self.server.handle_inner(now, packet);
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        _socket: usize,
        source: SocketAddr,
        destination: Option<IpAddr>,
        datagram: &mut [u8],
    ) {
        let from = Address {
            remote: source,
            local: destination,
        };
        self.server.handle_datagram(now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.server.handle_timeout(now);
    }

    fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        self.server.poll_deliver()
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing> {
        let to = self.server.poll_transmit(now, buf)?;
        Some(Outgoing {
            socket: 0,
            to: to.remote,
            from: to.local,
        })
    }

    fn announce_changes(
        &mut self,
        _now: Instant,
        _tun: &mut Tun,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<(), BondError> {
        let sessions = self.server.sessions().count();
        if sessions != self.open {
            self.open = sessions;
            on_event(&BondEvent::Sessions { open: self.open });
        }
        Ok(())
    }

    fn stats(&self, uptime_s: f64) -> BondStats {
        BondStats::server(self.name, uptime_s, &self.server)
    }

    fn poll_at(&self) -> Option<Instant> {
        self.server.poll_at()
    }

    fn close(&mut self) {
        // A Close to every client on every line it was heard on: each handshakes again as
        // soon as a server answers, instead of waiting for silence.
        self.server.close_all();
    }
}

/// The event loop a client and a server share: what the OS gives it (the TUN device, the
/// sockets, the stats socket, the signals, the clock) and the buffers it reuses pass
/// after pass. [`TunnelLoop::run`] drives a [`TunnelEnd`] with them.
struct TunnelLoop<'a> {
    tun: &'a mut Tun,
    /// A client's lines' sockets, in line order; the server's one.
    sockets: &'a [UdpSocket],
    /// The same sockets, as [`Outbox::flush`] takes them.
    socket_refs: Vec<&'a UdpSocket>,
    stats_socket: &'a StatsSocket,
    signals: BorrowedFd<'a>,
    clock: &'a Clock,
    /// A read from the TUN device, or a datagram handed to the state machine.
    buf: Vec<u8>,
    /// The tunnel's core keeps the inner packets it is handed (to seal them into
    /// datagrams), so none come back to a pool: each read allocates.
    inner: pathlab_core::buffers::BufferPool,
    /// Inner packets to write into the TUN device.
    delivered: Vec<Vec<u8>>,
    outbox: Outbox,
    batch: line::RecvBatch,
    /// Per descriptor polled (the TUN device, the signals, the stats socket, the
    /// sockets): whether it was readable when the last sleep ended.
    ready: Vec<bool>,
}

impl<'a> TunnelLoop<'a> {
    /// A loop over these descriptors, its buffers empty and nothing ready yet.
    fn new(
        tun: &'a mut Tun,
        sockets: &'a [UdpSocket],
        stats_socket: &'a StatsSocket,
        signals: BorrowedFd<'a>,
        clock: &'a Clock,
    ) -> TunnelLoop<'a> {
        TunnelLoop {
            tun,
            sockets,
            socket_refs: sockets.iter().collect(),
            stats_socket,
            signals,
            clock,
            buf: vec![0u8; BUFFER_BYTES],
            inner: pathlab_core::buffers::BufferPool::new(0),
            delivered: Vec::new(),
            outbox: Outbox::new(sockets.len()),
            batch: line::RecvBatch::new(line::MAX_BATCH, RECEIVE_SLOT_BYTES),
            ready: vec![false; sockets.len() + 3],
        }
    }

    /// Runs `end` until a termination signal arrives: each pass reads the TUN device and
    /// the sockets, fires the timers, writes what is delivered, sends what is built,
    /// announces what changed, answers the stats socket and sleeps until the next deadline
    /// or input. Then sends `end`'s Close and returns the last snapshot.
    fn run(
        mut self,
        end: &mut impl TunnelEnd,
        on_event: &mut impl FnMut(&BondEvent),
    ) -> Result<BondStats, BondError> {
        loop {
            // `now` is read again before datagrams are handled and before they are built:
            // the one-way delay a receiver measures is its `now` less the sender's, so a
            // `now` read before a loop pass of milliseconds (a busy host, batches of 64 KB)
            // gave samples too low (an arrival dated before it happened, which the base
            // delay then kept: every later sample read as a standing queue and the rate fell
            // to a tenth, measured on benches/bond_cpu.py) and too high (a datagram dated
            // before it was built).
            let mut now = self.clock.now();
            self.receive_inner(end, now)?;
            now = self.receive_datagrams(end, now)?;
            end.handle_timeout(now);
            while let Some(packet) = end.poll_deliver() {
                self.delivered.push(packet);
            }
            deliver(self.tun, &mut self.delivered);
            now = self.clock.now();
            self.transmit(end, now);
            end.announce_changes(now, self.tun, on_event)?;
            if self.ready[2] {
                let uptime = now.as_secs_f64();
                self.stats_socket.answer(|| end.stats(uptime));
            }
            if self.sleep(end.poll_at())? {
                break;
            }
        }
        let stats = end.stats(self.clock.now().as_secs_f64());
        end.close();
        let now = self.clock.now();
        self.transmit(end, now);
        Ok(stats)
    }

    /// Hands `end` the inner packets the TUN device has, up to [`RECEIVE_BUDGET`].
    fn receive_inner(&mut self, end: &mut impl TunnelEnd, now: Instant) -> Result<(), BondError> {
        let mut taken = 0;
        while taken < RECEIVE_BUDGET {
            match self
                .tun
                .recv_packets(&mut self.buf, &mut self.inner, |packet| {
                    end.handle_inner(now, packet);
                }) {
                Ok(packets) => taken += packets.max(1),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(io_error("reading the TUN device")(error)),
            }
        }
        Ok(())
    }

    /// Hands `end` the datagrams every socket has, up to [`RECEIVE_BATCHES`] batches each,
    /// each batch at the instant it was read; returns the last such instant (`now` when
    /// none came).
    fn receive_datagrams<E: TunnelEnd>(
        &mut self,
        end: &mut E,
        mut now: Instant,
    ) -> Result<Instant, BondError> {
        for (k, socket) in self.sockets.iter().enumerate() {
            for _ in 0..RECEIVE_BATCHES {
                match line::recv_batch(socket, &mut self.batch) {
                    Ok(0) => break,
                    Ok(_) => {
                        now = self.clock.now();
                        for datagram in self.batch.datagrams() {
                            // Longer than any line's datagram: not even worth
                            // authenticating (not ours).
                            if datagram.truncated {
                                continue;
                            }
                            for segment in datagram.segments() {
                                let len = segment.len();
                                self.buf[..len].copy_from_slice(segment);
                                end.handle_datagram(
                                    now,
                                    k,
                                    datagram.source,
                                    datagram.destination,
                                    &mut self.buf[..len],
                                );
                            }
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                    Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
                        if E::REFUSAL_ENDS_READING {
                            break;
                        }
                    }
                    Err(error) => return Err(io_error(E::READING_SOCKET)(error)),
                }
            }
        }
        Ok(now)
    }

    /// Sends every datagram `end` builds, batched in the outbox.
    fn transmit(&mut self, end: &mut impl TunnelEnd, now: Instant) {
        while let Some(outgoing) = end.poll_transmit(now, self.outbox.next()) {
            if self
                .outbox
                .push(outgoing.socket, outgoing.to, outgoing.from)
            {
                self.outbox.flush(&self.socket_refs);
            }
        }
        self.outbox.flush(&self.socket_refs);
    }

    /// Sleeps until `at` (at most [`MAX_SLEEP`]) or input; true when a termination signal
    /// arrived.
    fn sleep(&mut self, at: Option<Instant>) -> Result<bool, BondError> {
        let mut fds: Vec<BorrowedFd<'_>> = vec![
            self.tun.as_fd(),
            self.signals,
            self.stats_socket.listener.as_fd(),
        ];
        fds.extend(self.sockets.iter().map(AsFd::as_fd));
        sleep_until(&fds, &mut self.ready, self.clock, at)
            .map_err(io_error("waiting for packets"))?;
        Ok(self.ready[1] && pathlab_os::read_termination_signal(self.signals).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trains(lens: &[usize], gso: bool) -> Vec<(usize, usize, Option<u16>)> {
        let buffers: Vec<Vec<u8>> = lens.iter().map(|&len| vec![0; len]).collect();
        let datagrams: Vec<&[u8]> = buffers.iter().map(Vec::as_slice).collect();
        let to = SocketAddr::from(([198, 18, 0, 2], 7000));
        let destinations = vec![(to, None); lens.len()];
        let mut planned = Vec::new();
        plan_trains(&datagrams, &destinations, 0, gso, &mut planned);
        planned
            .iter()
            .map(|t| (t.first, t.count, t.segment_size))
            .collect()
    }

    #[test]
    fn trains_are_runs_of_one_size_ending_at_a_shorter_datagram() {
        assert_eq!(
            trains(&[1472, 1472, 1472, 300, 1472, 80, 90], true),
            vec![(0, 4, Some(1472)), (4, 2, Some(1472)), (6, 1, None)]
        );
        // A longer datagram starts a new train; no GSO: one datagram each.
        assert_eq!(trains(&[300, 1472], true), vec![(0, 1, None), (1, 1, None)]);
        assert_eq!(
            trains(&[1472, 1472], false),
            vec![(0, 1, None), (1, 1, None)]
        );
    }

    #[test]
    fn a_train_stays_within_one_ipv4_packet() {
        let planned = trains(&[1472; 64], true);
        assert_eq!(planned[0], (0, 44, Some(1472)), "44 x 1472 = 64768 bytes");
        assert_eq!(planned[1], (44, 20, Some(1472)));
    }
}
