//! The `bond` recipe built in this process, as the bond tests that change its lines or
//! judge a transfer through it use it: a site, three routers and a server in namespaces,
//! each line's emulator a handle of this process (so a change takes effect at once and
//! nothing outlives the test), `pathlab bond` ends as [`Daemon`]s, and a TCP transfer of a
//! seeded byte stream hashed at both ends.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pathlab_core::rng::Rng;
use pathlab_emulator::emulator::{EmulatorConfig, EmulatorHandle, OnInterfaceGone, Pool};
use pathlab_emulator::port::{PacketPort, ReceiveMode};
use pathlab_lab::topology::{Topology, CABLE_A, CABLE_B};
use pathlab_lab::Experiment;
use pathlab_os::netns::Netns;
use sha2::{Digest as _, Sha256};

use super::emulated::PATHLAB;

/// The site's node in [`topology_spec`]'s topology.
pub const SITE: usize = 0;
/// The server's node.
pub const SRV: usize = 4;
/// Where the server listens: srv's end of its link to isp0.
pub const SERVER_ADDRESS: &str = "198.18.3.2:7000";
/// The server's address inside the tunnel (the client's is 198.19.0.2).
pub const SERVER_INNER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// The port of a transfer's receiver, on every address of srv.
pub const PORT: u16 = 5201;

/// A line of the site: its rate up, its tail-drop buffer, the one-way delay it starts
/// with. Down from srv every line has 50 Mbit/s.
pub struct LineShape {
    pub rate: &'static str,
    pub limit_packets: u32,
    pub delay_ms: u64,
}

impl LineShape {
    /// The link specs up and down of the line working, with a one-way delay of `delay_ms`.
    pub fn specs(&self, delay_ms: u64) -> (String, String) {
        (
            format!(
                "delay {delay_ms}ms rate {} limit {}",
                self.rate, self.limit_packets
            ),
            format!("delay {delay_ms}ms rate 50mbit limit 1000"),
        )
    }
}

/// The `bond` recipe's topology named `name` with `lines`: link i is 198.18.i.0/24, its
/// first node .1. The server listens on srv's end of its link to isp0 (198.18.3.2); the
/// site reaches it over each line through that line's router.
pub fn topology_spec(name: &str, lines: &[LineShape]) -> String {
    let specs: Vec<(String, String)> = lines.iter().map(|l| l.specs(l.delay_ms)).collect();
    topology_of(name, &specs)
}

/// [`topology_spec`] with each line's specs given, (up, down).
pub fn topology_of(name: &str, lines: &[(String, String)]) -> String {
    let mut spec = format!("name = \"{name}\"\nduration = \"90s\"\n");
    let _ = writeln!(spec, "[[node]]\nname = \"site\"\nkind = \"host\"");
    for k in 0..lines.len() {
        let _ = writeln!(spec, "[[node]]\nname = \"isp{k}\"\nkind = \"router\"");
    }
    let _ = writeln!(spec, "[[node]]\nname = \"srv\"\nkind = \"host\"");
    for (k, (up, down)) in lines.iter().enumerate() {
        let _ = writeln!(
            spec,
            "[[link]]\nbetween = [\"site\", \"isp{k}\"]\nspec = \"{up}\"\nreverse = \"{down}\""
        );
    }
    for k in 0..lines.len() {
        let _ = writeln!(spec, "[[link]]\nbetween = [\"isp{k}\", \"srv\"]");
    }
    spec
}

/// The client's `--line` options for `count` lines of [`topology_spec`]'s site.
pub fn client_lines(count: usize) -> Vec<String> {
    let mut args = vec!["--line".to_owned(), "to-isp0".to_owned()];
    for k in 1..count {
        args.push("--line".into());
        args.push(format!("to-isp{k},via=198.18.{k}.2"));
    }
    args
}

/// [`client_lines`] for `rates.len()` lines, each capped at its rate (`rate=`).
pub fn client_lines_capped(rates: &[&str]) -> Vec<String> {
    let mut args = client_lines(rates.len());
    for (value, rate) in args.iter_mut().skip(1).step_by(2).zip(rates) {
        let _ = write!(value, ",rate={rate}");
    }
    args
}

/// An emulator on each of the site's first `count` links, in its cable namespace, on a
/// forwarding thread per core (as `pathlab lab` runs them); no recording.
pub fn start_line_emulators(
    topology: &Topology,
    experiment: &Experiment,
    count: usize,
    seed: u64,
    command: &str,
) -> Vec<EmulatorHandle> {
    let pool = Pool::per_core().expect("forwarding threads");
    (0..count)
        .map(|i| {
            let link = &experiment.links[i];
            let cable = topology.cables[i].as_ref().expect("an emulated link");
            let ports = cable
                .run(|| {
                    Ok::<_, pathlab_emulator::port::PortError>([
                        PacketPort::open_with(CABLE_A, ReceiveMode::for_link(&link.forward))?,
                        PacketPort::open_with(CABLE_B, ReceiveMode::for_link(&link.reverse))?,
                    ])
                })
                .expect("enter the cable")
                .expect("the cable's ports open");
            pool.spawn(
                ports,
                EmulatorConfig {
                    name: link.name.clone(),
                    forward: link.forward.clone(),
                    reverse: link.reverse.clone(),
                    seed: seed.wrapping_add(i as u64),
                    record: None,
                    pcap: None,
                    queue_sample_interval: pathlab_core::Duration::from_secs(1),
                    command: vec![command.into()],
                    on_interface_gone: OnInterfaceGone::Stop,
                },
            )
            .expect("the emulator starts")
        })
        .collect()
}

/// A pathlab process in a namespace, its stderr in a file. Dropped, it gets SIGTERM (as
/// Ctrl-C: a tunnel end removes its stats socket on the way out), then SIGKILL if it has
/// not ended within 5 s.
pub struct Daemon {
    child: Option<Child>,
    stderr: PathBuf,
}

impl Daemon {
    pub fn start(netns: &Netns, args: &[impl AsRef<std::ffi::OsStr>], stderr: PathBuf) -> Daemon {
        let file = std::fs::File::create(&stderr).expect("can create the stderr file");
        let child = netns
            .command(PATHLAB)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("pathlab starts");
        Daemon {
            child: Some(child),
            stderr,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to 10 s for a stderr line that holds `what`; panics naming `role` if it
    /// does not come or the process ends first.
    pub fn wait_for(&mut self, what: &str, role: &str) {
        let waiting = Instant::now();
        while !self.stderr().contains(what) {
            assert!(
                waiting.elapsed() < Duration::from_secs(10) && self.exited().is_none(),
                "the {role} did not say {what:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills it with SIGKILL, as `kill -9` or the OOM killer would, and reaps it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    /// Whether it has ended by itself (its exit status).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = pathlab_os::testing::send_signal(child.id(), libc::SIGTERM);
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_secs(5) {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The arguments of a `pathlab bond server` on [`SERVER_ADDRESS`] with the key `key`, and
/// `extra`.
pub fn server_args(key: &str, extra: &[&str]) -> Vec<String> {
    ["bond", "server", "--listen", SERVER_ADDRESS, "--psk", key]
        .into_iter()
        .chain(["--address", "198.19.0.1/24"])
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// Starts `pathlab bond ARGS` as the server in `srv` and waits until it listens (the
/// client's first handshake then succeeds at once).
pub fn start_server(srv: &Netns, args: &[String], stderr: PathBuf) -> Daemon {
    let mut server = Daemon::start(srv, args, stderr);
    server.wait_for("bond0 is up", "server");
    server
}

/// Starts a `pathlab bond client` in `site` over `lines` (its `--line` options) with the key `key` and
/// `extra`, and waits until its session opens.
pub fn start_client(
    site: &Netns,
    key: &str,
    lines: Vec<String>,
    extra: &[&str],
    stderr: PathBuf,
) -> Daemon {
    let mut args: Vec<String> = vec!["bond".into(), "client".into(), SERVER_ADDRESS.into()];
    args.extend(lines);
    for arg in ["--psk", key, "--address", "198.19.0.2/24"]
        .iter()
        .chain(extra)
    {
        args.push((*arg).to_owned());
    }
    let mut client = Daemon::start(site, &args, stderr);
    client.wait_for("bond: session", "client");
    client
}

/// The tunnel's stats sockets, removed when dropped as `pathlab lab clean` removes stale
/// ones: a killed end leaves its socket. Made before the processes, so dropped after them.
pub struct StatsSockets(Vec<PathBuf>);

impl StatsSockets {
    /// The sockets of the tunnels named `bond0` in `namespaces`.
    pub fn of(namespaces: &[&Netns]) -> StatsSockets {
        StatsSockets(
            namespaces
                .iter()
                .map(|netns| {
                    netns
                        .run(|| pathlab_bond_driver::tunnel::stats_socket_path("bond0"))
                        .expect("enter the namespace")
                })
                .collect(),
        )
    }
}

impl Drop for StatsSockets {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `pathlab bond stats -J` of the tunnel `bond0` in `netns`: what it printed on stdout
/// and stderr.
pub fn bond_stats_text(netns: &Netns) -> (String, String) {
    let output = netns
        .command(PATHLAB)
        .args(["bond", "stats", "-J"])
        .output()
        .expect("pathlab runs");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// [`bond_stats_text`], parsed.
pub fn bond_stats(netns: &Netns) -> Result<pathlab_bond::stats::BondStats, String> {
    let (stdout, stderr) = bond_stats_text(netns);
    serde_json::from_str(&stdout).map_err(|e| format!("bond stats -J: {e}: {stdout}{stderr}"))
}

/// Sets its flag when dropped: the transfer's threads give up once it is set.
pub struct AbortOnDrop<'a>(pub &'a AtomicBool);

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Fills `buffer` with the next bytes of `rng`'s stream (what the sender sends).
fn fill(rng: &mut Rng, buffer: &mut [u8]) {
    for chunk in buffer.chunks_mut(8) {
        let bytes = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// What the receiver saw: the hash and length of what arrived, and when each read
/// returned (since the test's start) with the bytes received by then.
pub struct Received {
    pub digest: [u8; 32],
    pub bytes: u64,
    pub reads: Vec<(Duration, u64)>,
}

impl Received {
    /// Mbit/s that arrived between `from` and `to` (since the test's start), by the
    /// receiver's reads.
    pub fn mbps(&self, from: Duration, to: Duration) -> f64 {
        let at = |t: Duration| {
            self.reads
                .iter()
                .take_while(|(when, _)| *when <= t)
                .last()
                .map_or(0, |&(_, bytes)| bytes)
        };
        (at(to) - at(from)) as f64 * 8.0 / to.saturating_sub(from).as_secs_f64() / 1e6
    }
}

/// Accepts one connection on `listener` and reads it to its end, hashing; gives up (an
/// error) when `abort` is set.
pub fn receive(
    listener: &TcpListener,
    started: Instant,
    progress: &AtomicU64,
    abort: &AtomicBool,
) -> Result<Received, String> {
    listener.set_nonblocking(true).unwrap();
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if abort.load(Ordering::SeqCst) {
                    return Err("no connection came".into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 256 * 1024];
    let mut bytes = 0;
    let mut reads = Vec::new();
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buffer[..n]);
                bytes += n as u64;
                reads.push((started.elapsed(), bytes));
                progress.store(bytes, Ordering::SeqCst);
            }
            Err(e) if would_block(&e) => {
                if abort.load(Ordering::SeqCst) {
                    return Err(format!("gave up after {bytes} bytes"));
                }
            }
            Err(e) => return Err(format!("read after {bytes} bytes: {e}")),
        }
    }
    Ok(Received {
        digest: hasher.finalize().into(),
        bytes,
        reads,
    })
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// How much a sender sends: so many bytes, or as much as it can until a moment.
#[derive(Debug, Clone, Copy)]
pub enum Amount {
    Bytes(u64),
    Until(Instant),
}

/// What a sender sent: the SHA-256 and length of its stream.
pub struct Sent {
    pub digest: [u8; 32],
    pub bytes: u64,
}

/// Connects from `site` to the receiver at [`SERVER_INNER`] through the tunnel and sends
/// `amount` of the seed's stream, hashing; gives up (an error) when `abort` is set.
pub fn send(site: &Netns, seed: u64, amount: Amount, abort: &AtomicBool) -> Result<Sent, String> {
    let target = SocketAddr::from((SERVER_INNER, PORT));
    let mut stream = site
        .run(|| TcpStream::connect_timeout(&target, Duration::from_secs(10)))
        .expect("enter the site")
        .map_err(|e| format!("connect to {target}: {e}"))?;
    stream
        .set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut rng = Rng::seed_from(seed ^ 0x5EED_DA7A);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 64 * 1024];
    let mut sent = 0;
    loop {
        let len = match amount {
            Amount::Bytes(total) if sent >= total => break,
            Amount::Until(end) if Instant::now() >= end => break,
            Amount::Bytes(total) => (total - sent).min(buffer.len() as u64) as usize,
            Amount::Until(_) => buffer.len(),
        };
        fill(&mut rng, &mut buffer[..len]);
        hasher.update(&buffer[..len]);
        let mut written = 0;
        while written < len {
            match stream.write(&buffer[written..len]) {
                Ok(n) => written += n,
                Err(e) if would_block(&e) => {
                    if abort.load(Ordering::SeqCst) {
                        return Err(format!("gave up after {} bytes", sent + written as u64));
                    }
                }
                Err(e) => return Err(format!("write after {} bytes: {e}", sent + written as u64)),
            }
        }
        sent += len as u64;
    }
    stream
        .shutdown(std::net::Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    Ok(Sent {
        digest: hasher.finalize().into(),
        bytes: sent,
    })
}

/// Why a transfer failed: an end's error, or what arrived is not what was sent (length
/// or SHA-256); `None` if it arrived intact.
pub fn transfer_failure(
    sent: &Result<Sent, String>,
    received: &Result<Received, String>,
) -> Option<String> {
    match (sent, received) {
        (Ok(sent), Ok(received))
            if received.bytes == sent.bytes && received.digest == sent.digest =>
        {
            None
        }
        (Ok(sent), Ok(received)) => Some(format!(
            "{} bytes arrived of {}, SHA-256 {} against {} sent",
            received.bytes,
            sent.bytes,
            hex(&received.digest),
            hex(&sent.digest)
        )),
        (sent, received) => Some(format!(
            "sender: {:?}; receiver: {:?}",
            sent.as_ref().map(|s| s.bytes),
            received.as_ref().map(|r| r.bytes)
        )),
    }
}

/// Mbit/s arrived in each whole second from `from`, from the receiver's reads.
pub fn per_second(reads: &[(Duration, u64)], from: Duration) -> Vec<f64> {
    let mut seconds: Vec<u64> = Vec::new();
    let mut before = 0;
    for &(at, bytes) in reads {
        let second = (at.saturating_sub(from)).as_secs() as usize;
        if seconds.len() <= second {
            seconds.resize(second + 1, 0);
        }
        seconds[second] += bytes - before;
        before = bytes;
    }
    seconds.iter().map(|&b| b as f64 * 8.0 / 1e6).collect()
}

/// Bytes in hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}
