//! What a tunnel end is asked to run, and the checks that turn it into what the loop runs
//! with. [`BondServerConfig`] and [`BondClientConfig`] hold what a user gave, typed and
//! with the key files already read; their `options` check it and resolve it (keys parsed,
//! peers listed, the protocol's settings filled in) into the [`ServerOptions`] and
//! [`ClientOptions`] that [`crate::launch::Launcher`] runs. [`create_key_file`] makes the
//! key files they read. Every refusal is a
//! [`ConfigError`] that names the input that was wrong, so the command line can call it a
//! usage error before anything is touched.

use std::net::{AddrParseError, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pathlab_bond::class::ClassRule;
use pathlab_bond::crypto::{KeyError, Psk};
use pathlab_bond::endpoint::{BondConfig, Entropy};
use pathlab_bond::fair::{FairKey, Order};
use pathlab_bond::handshake::{ClientKeys, HandshakeError, PublicKey, SecretKey, ServerKeys};
use pathlab_bond::inner::Framing;
use pathlab_bond::line::MAX_FRAMING_BYTES;
use pathlab_bond::peers::PeerConfig;
use pathlab_bond::sched::SchedulerKind;
use pathlab_bond::server::{Peers, ServerConfig};
use pathlab_core::spec::SpecError;
use pathlab_core::{BitsPerSec, Duration};

use crate::tunnel::{ClientOptions, LineOptions, OsEntropy, ServerOptions, TunOptions};

/// The most lines a client may bond: each is a socket and a scheduler's slot.
pub const MAX_CLIENT_LINES: usize = 16;

/// The most lines a server lets one client have (its per-session tables are sized by it).
pub const MAX_SERVER_LINES: usize = 64;

/// The TUN device's MTU range: IPv4's least datagram every host takes, to IP's largest.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 576..=65_535;

/// A key file's contents, read by the caller, with its path to name it in messages. The
/// caller reads it (and checks that only its owner may read it); this crate parses it. The
/// bytes are zeroed when it is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its bytes, as read.
    pub contents: Vec<u8>,
}

// The file's bytes are a secret: wiped when the configuration is done with them.
impl Drop for KeyFile {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.contents);
    }
}

impl zeroize::ZeroizeOnDrop for KeyFile {}

impl KeyFile {
    /// The pre-shared key the file holds (`--psk`).
    pub fn psk(&self) -> Result<Psk, ConfigError> {
        Psk::from_file_contents(&self.contents).map_err(|source| ConfigError::Psk {
            path: self.path.clone(),
            source,
        })
    }

    /// The private key the file holds (`--key`, `pathlab bond public`).
    pub fn secret_key(&self) -> Result<SecretKey, ConfigError> {
        SecretKey::from_file_contents(&self.contents).map_err(|source| ConfigError::SecretKey {
            path: self.path.clone(),
            source,
        })
    }
}

/// Writes a fresh private key (32 random bytes from the OS, 64 hex digits and a newline)
/// to a new file at `path`, readable by its owner only, and returns its public key. An
/// existing file is refused, never overwritten: it may be an end's only key.
pub fn create_key_file(path: &Path) -> Result<PublicKey, KeyFileError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let key = SecretKey::generate(&mut OsEntropy);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|error| KeyFileError::Create {
            path: path.to_owned(),
            error,
        })?;
    writeln!(file, "{}", key.to_hex()).map_err(KeyFileError::Write)?;
    Ok(key.public_key())
}

/// Why [`create_key_file`] failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be created (it exists, or its directory is not writable).
    #[error("cannot create the key file '{}': {error}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The key could not be written into the new file.
    #[error("{0}")]
    Write(std::io::Error),
}

/// What both ends are given besides their own end's options: the device, how the tunnel
/// treats its users, and the keys.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// The name `pathlab bond stats` finds the tunnel by (`None`: the device's name).
    pub name: Option<String>,
    /// The TUN (or TAP) device, its addresses and routes.
    pub tun: TunOptions,
    /// Whether the device is a TAP carrying Ethernet frames rather than a TUN carrying IP.
    pub tap: bool,
    /// How users are told apart to share the tunnel fairly.
    pub fair: FairKey,
    /// What the far end keeps in order: each flow, or each user.
    pub order: Order,
    /// Whether inner packets are compressed with LZ4 when that shrinks them.
    pub compress: bool,
    /// Whether several small inner packets share a datagram.
    pub packing: bool,
    /// Whether inner IP/TCP and IP/UDP headers are compressed (and acknowledged).
    pub header_compression: bool,
    /// The queueing delay each line is held at.
    pub target: Duration,
    /// How old the session's keys get before the client rekeys (`--rekey-after`; at
    /// least [`pathlab_bond::rekey::MIN_REKEY_AFTER`]).
    pub rekey_after: Duration,
    /// Traffic class rules (`--class`, parsed: [`pathlab_bond::class::parse_rules`]),
    /// first match first, before the default.
    pub classes: Vec<ClassRule>,
    /// The pre-shared key, if one was given ([`KeyFile::psk`] reads it).
    pub psk: Option<Psk>,
    /// This end's private key, if one was given ([`KeyFile::secret_key`] reads it).
    pub key: Option<SecretKey>,
}

impl TunnelConfig {
    /// The name the tunnel is found by: the one given, else the device's.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.tun.name)
    }

    /// Checks what both ends share and returns the protocol's settings for `lines` lines.
    fn resolve(&self, lines: usize) -> Result<BondConfig, ConfigError> {
        pathlab_os::runtime::validate_name(self.name()).map_err(ConfigError::Name)?;
        if let Some(mtu) = self.tun.mtu.filter(|mtu| !MTU_RANGE.contains(mtu)) {
            return Err(ConfigError::Mtu(mtu));
        }
        if self.tap && !self.tun.routes.is_empty() {
            return Err(ConfigError::TapRoutes);
        }
        if self.rekey_after < pathlab_bond::rekey::MIN_REKEY_AFTER {
            return Err(ConfigError::RekeyAfter(self.rekey_after));
        }
        let mut config = BondConfig::new(lines);
        config.controller.target = self.target;
        config.rekey_after = self.rekey_after;
        config.classes.clone_from(&self.classes);
        // A key is refused 60 s after its successor was due (WireGuard's 120 s and 180 s).
        config.reject_after = self.rekey_after + Duration::from_secs(60);
        config.compress = self.compress;
        config.fair.packing = self.packing;
        config.header_compression = self.header_compression;
        config.framing = if self.tap {
            Framing::Ethernet
        } else {
            Framing::Ip
        };
        config.fair.key = self.fair;
        config.fair.order = self.order;
        Ok(config)
    }
}

/// What a server is asked to run (`pathlab bond server`).
#[derive(Debug, Clone)]
pub struct BondServerConfig {
    /// The address and port to listen on.
    pub listen: SocketAddr,
    /// Most clients at once.
    pub max_clients: usize,
    /// Most lines a client may have.
    pub max_lines: usize,
    /// The clients that may connect, by their public keys (empty: the simple mode).
    pub peers: Vec<PeerConfig>,
    /// What both ends share.
    pub tunnel: TunnelConfig,
}

impl BondServerConfig {
    /// Checks the configuration and resolves it into what the server's loop runs with:
    /// the simple mode (a pre-shared key alone, any client key) or the server's key and
    /// its listed peers; a TAP server bridges one peer at most.
    pub fn options(&self) -> Result<ServerOptions, ConfigError> {
        let session = self.tunnel.resolve(self.max_lines)?;
        let (keys, peers) = self.keys()?;
        if self.tunnel.tap {
            check_tap_peers(&peers)?;
        }
        if self.max_clients == 0 || self.max_lines == 0 || self.max_lines > MAX_SERVER_LINES {
            return Err(ConfigError::Limits);
        }
        Ok(ServerOptions {
            name: self.tunnel.name().to_owned(),
            listen: self.listen,
            keys,
            peers,
            tun: self.tunnel.tun.clone(),
            config: ServerConfig::new(session, self.max_clients),
        })
    }

    /// The server's keys and peers: the simple mode (a pre-shared key alone), or its key
    /// and listed peers.
    fn keys(&self) -> Result<(ServerKeys, Peers), ConfigError> {
        match (&self.tunnel.key, self.tunnel.psk.as_ref()) {
            (Some(key), psk) => {
                if self.peers.is_empty() {
                    return Err(ConfigError::ServerNeedsPeers);
                }
                Ok((
                    ServerKeys::new(key.clone(), psk),
                    Peers::Listed(self.peers.clone()),
                ))
            }
            (None, Some(psk)) => {
                if !self.peers.is_empty() {
                    return Err(ConfigError::PeersNeedKey);
                }
                Ok((ServerKeys::from_psk(psk), Peers::AnyKey))
            }
            (None, None) => Err(ConfigError::ServerNeedsKeys),
        }
    }
}

/// A TAP server bridges one client's frames to its TAP: it has no address to route frames
/// to several clients by, nor to check a client's frames against.
fn check_tap_peers(peers: &Peers) -> Result<(), ConfigError> {
    let Peers::Listed(listed) = peers else {
        return Ok(());
    };
    if listed.len() > 1 {
        return Err(ConfigError::TapPeers(listed.len()));
    }
    if let Some(peer) = listed.iter().find(|p| p.is_narrowed()) {
        return Err(ConfigError::TapAllowed(peer.name.clone()));
    }
    Ok(())
}

/// One of a client's lines, as `--line IFACE[,via=GW][,rate=R][,overhead=BYTES]` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineConfig {
    /// The interface, its gateway and its link layer's overhead.
    pub line: LineOptions,
    /// The rate the line is capped at and weighed by for the weighted round robin.
    pub rate: Option<BitsPerSec>,
}

impl FromStr for LineConfig {
    type Err = ConfigError;

    /// Parses `IFACE[,via=GW][,rate=R][,overhead=BYTES]`.
    fn from_str(text: &str) -> Result<LineConfig, ConfigError> {
        let mut parts = text.split(',');
        let interface = parts.next().unwrap_or_default().to_owned();
        if interface.is_empty() {
            return Err(ConfigError::LineWithoutInterface(text.to_owned()));
        }
        let mut line = LineOptions {
            interface,
            via: None,
            framing_bytes: None,
        };
        let mut rate = None;
        for part in parts {
            match part.split_once('=') {
                Some(("via", gateway)) => {
                    line.via =
                        Some(gateway.parse().map_err(|source| ConfigError::LineGateway {
                            text: text.to_owned(),
                            gateway: gateway.to_owned(),
                            source,
                        })?);
                }
                Some(("rate", value)) => {
                    rate = Some(pathlab_core::spec::parse_rate(value).map_err(|source| {
                        ConfigError::LineRate {
                            text: text.to_owned(),
                            value: value.to_owned(),
                            source,
                        }
                    })?);
                }
                Some(("overhead", value)) => {
                    let bytes = value
                        .parse::<u16>()
                        .ok()
                        .filter(|bytes| *bytes <= MAX_FRAMING_BYTES)
                        .ok_or_else(|| ConfigError::LineOverhead {
                            text: text.to_owned(),
                            value: value.to_owned(),
                        })?;
                    line.framing_bytes = Some(bytes);
                }
                _ => {
                    return Err(ConfigError::LineOption {
                        text: text.to_owned(),
                        part: part.to_owned(),
                    })
                }
            }
        }
        Ok(LineConfig { line, rate })
    }
}

/// What a client is asked to run (`pathlab bond client`).
#[derive(Debug, Clone)]
pub struct BondClientConfig {
    /// The server's address and port.
    pub server: SocketAddr,
    /// The lines, in order.
    pub lines: Vec<LineConfig>,
    /// How datagrams are spread over the lines.
    pub scheduler: SchedulerKind,
    /// The server's public key as given, 64 hex digits (with `tunnel.key`); parsed once
    /// the keys it goes with are known to be there, so a missing half is named first.
    pub server_key: Option<String>,
    /// How long to wait for the server's first answer before giving up.
    pub connect_timeout: Duration,
    /// What both ends share.
    pub tunnel: TunnelConfig,
}

impl BondClientConfig {
    /// Checks the configuration and resolves it into what the client's loop runs with.
    /// In the simple mode (a pre-shared key alone) the client's own key is made afresh
    /// from `entropy`.
    pub fn options(&self, entropy: &mut dyn Entropy) -> Result<ClientOptions, ConfigError> {
        if self.lines.len() > MAX_CLIENT_LINES {
            return Err(ConfigError::TooManyLines(self.lines.len()));
        }
        let mut config = self.tunnel.resolve(self.lines.len())?;
        let keys = self.keys(entropy)?;
        config.scheduler = self.scheduler;
        config.line_rates = self.lines.iter().map(|line| line.rate).collect();
        if config.scheduler == SchedulerKind::WeightedRoundRobin
            && config.line_rates.iter().any(Option::is_none)
        {
            return Err(ConfigError::WeightsNeedRates);
        }
        Ok(ClientOptions {
            name: self.tunnel.name().to_owned(),
            server: self.server,
            lines: self.lines.iter().map(|line| line.line.clone()).collect(),
            keys,
            tun: self.tunnel.tun.clone(),
            config,
            connect_timeout: self.connect_timeout,
        })
    }

    /// The client's keys: the simple mode (a pre-shared key alone), or its key and the
    /// server's.
    fn keys(&self, entropy: &mut dyn Entropy) -> Result<ClientKeys, ConfigError> {
        match (&self.tunnel.key, &self.server_key, self.tunnel.psk.as_ref()) {
            (Some(key), Some(server), psk) => {
                let server = PublicKey::from_hex(server).map_err(ConfigError::ServerKey)?;
                Ok(ClientKeys::new(key.clone(), server, psk))
            }
            (None, None, Some(psk)) => Ok(ClientKeys::from_psk(psk, SecretKey::generate(entropy))),
            (Some(_), None, _) => Err(ConfigError::KeyNeedsServerKey),
            (None, Some(_), _) => Err(ConfigError::ServerKeyNeedsKey),
            (None, None, None) => Err(ConfigError::ClientNeedsKeys),
        }
    }
}

/// Why a tunnel's configuration was refused: each names the input that was wrong and what
/// was expected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--rekey-after` is below the least it takes.
    #[error(
        "--rekey-after {}s: rekeys must be at least {}s apart",
        .0.as_secs_f64(),
        pathlab_bond::rekey::MIN_REKEY_AFTER.as_secs_f64()
    )]
    RekeyAfter(Duration),
    /// The pre-shared key file does not hold a usable key.
    #[error("key file '{}'", path.display())]
    Psk {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: KeyError,
    },
    /// A private key file does not hold a key.
    #[error("key file '{}'", path.display())]
    SecretKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: HandshakeError,
    },
    /// The tunnel's name cannot name its stats socket.
    #[error("{0}")]
    Name(String),
    /// The device's MTU is outside [`MTU_RANGE`].
    #[error("--mtu {0} is outside 576..65535")]
    Mtu(u32),
    /// Routes were given for a TAP device, which carries frames.
    #[error(
        "--route puts IP routes into a TUN device; with --tap the device is an Ethernet \
         port that carries frames: route on the bridge it joins (--bridge) instead"
    )]
    TapRoutes,
    /// A line names no interface.
    #[error("--line '{0}' names no interface")]
    LineWithoutInterface(String),
    /// A line's gateway is not an address.
    #[error("--line '{text}': '{gateway}' is not an IP address")]
    LineGateway {
        /// The line as given.
        text: String,
        /// The gateway as given.
        gateway: String,
        /// Why it is not an address.
        source: AddrParseError,
    },
    /// A line's rate is not a rate.
    #[error("--line '{text}': bad rate '{value}'")]
    LineRate {
        /// The line as given.
        text: String,
        /// The rate as given.
        value: String,
        /// Why it is not a rate.
        source: SpecError,
    },
    /// A line's overhead is not a byte count the line framing takes.
    #[error(
        "--line '{text}': overhead={value} is not a byte count from 0 to {MAX_FRAMING_BYTES} \
         (the link layer's bytes per packet: Ethernet 14, the default)"
    )]
    LineOverhead {
        /// The line as given.
        text: String,
        /// The overhead as given.
        value: String,
    },
    /// A line has an option it does not take.
    #[error("--line '{text}': '{part}' is none of via=GATEWAY, rate=RATE, overhead=BYTES")]
    LineOption {
        /// The line as given.
        text: String,
        /// The option.
        part: String,
    },
    /// More lines than [`MAX_CLIENT_LINES`].
    #[error("at most 16 lines, not {0}")]
    TooManyLines(usize),
    /// The weighted round robin was asked for and a line has no rate to weigh it by.
    #[error("--scheduler wrr weighs lines by their rates: give every --line a rate=RATE")]
    WeightsNeedRates,
    /// The server's public key is not one.
    #[error("--server-key")]
    ServerKey(#[source] HandshakeError),
    /// A client's key without the server's.
    #[error("--key needs the server's public key: --server-key PUBLIC")]
    KeyNeedsServerKey,
    /// The server's key without the client's own.
    #[error("--server-key needs this client's own --key FILE")]
    ServerKeyNeedsKey,
    /// A client with no key at all.
    #[error(
        "give --psk FILE (the simple mode, one key at both ends) or --key FILE with \
         --server-key PUBLIC"
    )]
    ClientNeedsKeys,
    /// A server with its own key and no peers to accept.
    #[error(
        "a server with --key needs its clients: --peer NAME,key=PUBLIC[,allowed=CIDR] \
         (repeat) or --peers FILE"
    )]
    ServerNeedsPeers,
    /// Peers listed for a server in the simple mode, which has no key to know them by.
    #[error("--peer and --peers name clients by their keys: give the server's own --key too")]
    PeersNeedKey,
    /// A server with no key at all.
    #[error(
        "give --psk FILE (the simple mode, one key at both ends) or --key FILE with \
         --peer/--peers"
    )]
    ServerNeedsKeys,
    /// A TAP server with several peers.
    #[error(
        "--tap bridges one client's frames to the TAP device, and {0} peers are given: \
         run one server (its own --listen port and TAP) per client"
    )]
    TapPeers(usize),
    /// A TAP server's peer with allowed prefixes, which frames are not routed by.
    #[error(
        "--peer {0}: allowed= routes IP packets by address; with --tap the peer's frames \
         are bridged whatever their addresses: leave allowed= out"
    )]
    TapAllowed(String),
    /// A server's limits out of range.
    #[error("--max-clients must be at least 1 and --max-lines 1 to 64")]
    Limits,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entropy that repeats one byte: keys made from it are the same run after run.
    #[derive(Debug)]
    struct Fixed(u8);

    impl Entropy for Fixed {
        fn fill(&mut self, buf: &mut [u8]) {
            buf.fill(self.0);
        }
    }

    const KEY_HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn key_file(name: &str) -> KeyFile {
        KeyFile {
            path: PathBuf::from(name),
            contents: format!("{KEY_HEX}\n").into_bytes(),
        }
    }

    fn tunnel(psk: bool, key: bool) -> TunnelConfig {
        TunnelConfig {
            name: None,
            tun: TunOptions {
                name: "bond0".to_owned(),
                ..TunOptions::default()
            },
            tap: false,
            fair: FairKey::Source,
            order: Order::Flow,
            compress: false,
            packing: true,
            header_compression: true,
            target: Duration::from_millis(5),
            rekey_after: Duration::from_secs(120),
            classes: Vec::new(),
            psk: psk.then(|| key_file("psk.key").psk().unwrap()),
            key: key.then(|| key_file("own.key").secret_key().unwrap()),
        }
    }

    fn server(psk: bool, key: bool, peers: &[&str]) -> BondServerConfig {
        BondServerConfig {
            listen: "127.0.0.1:7000".parse().unwrap(),
            max_clients: 64,
            max_lines: 8,
            peers: peers
                .iter()
                .map(|p| PeerConfig::parse(p).unwrap())
                .collect(),
            tunnel: tunnel(psk, key),
        }
    }

    fn client(psk: bool, key: bool, server_key: Option<&str>, lines: &[&str]) -> BondClientConfig {
        BondClientConfig {
            server: "127.0.0.1:7000".parse().unwrap(),
            lines: lines.iter().map(|l| l.parse().unwrap()).collect(),
            scheduler: SchedulerKind::Delay,
            server_key: server_key.map(str::to_owned),
            connect_timeout: Duration::from_secs(10),
            tunnel: tunnel(psk, key),
        }
    }

    fn public_hex() -> String {
        key_file("own.key")
            .secret_key()
            .unwrap()
            .public_key()
            .to_string()
    }

    #[test]
    fn a_line_takes_its_gateway_rate_and_overhead() {
        let line: LineConfig = "eth1,via=192.0.2.1,rate=20mbit,overhead=0".parse().unwrap();
        assert_eq!(line.line.interface, "eth1");
        assert_eq!(line.line.via, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(line.line.framing_bytes, Some(0));
        assert_eq!(line.rate, Some(BitsPerSec(20_000_000)));
        let bare: LineConfig = "eth2".parse().unwrap();
        assert_eq!(
            (bare.line.via, bare.line.framing_bytes, bare.rate),
            (None, None, None)
        );
    }

    #[test]
    fn a_bad_line_is_refused_with_what_was_wrong() {
        let refused = |text: &str| text.parse::<LineConfig>().unwrap_err();
        assert!(matches!(
            refused(",rate=1mbit"),
            ConfigError::LineWithoutInterface(_)
        ));
        assert!(matches!(
            refused("eth1,via=gateway"),
            ConfigError::LineGateway { .. }
        ));
        assert!(matches!(
            refused("eth1,rate=fast"),
            ConfigError::LineRate { .. }
        ));
        // 256 is the most a line's link layer adds that the framing takes.
        assert!(matches!(
            refused("eth1,overhead=257"),
            ConfigError::LineOverhead { .. }
        ));
        assert!(matches!(
            refused("eth1,overhead=-4"),
            ConfigError::LineOverhead { .. }
        ));
        assert_eq!(
            refused("eth9,speed=3").to_string(),
            "--line 'eth9,speed=3': 'speed=3' is none of via=GATEWAY, rate=RATE, overhead=BYTES"
        );
    }

    #[test]
    fn a_server_with_a_psk_alone_takes_any_client_key() {
        let options = server(true, false, &[]).options().unwrap();
        assert_eq!(options.peers, Peers::AnyKey);
        assert_eq!(options.name, "bond0");
        assert_eq!(options.config.max_clients, 64);
        assert_eq!(options.config.session.lines, 8);
    }

    #[test]
    fn a_server_with_its_key_lists_its_peers() {
        let peer = format!("site-a,key={}", public_hex());
        let options = server(false, true, &[&peer]).options().unwrap();
        assert!(matches!(&options.peers, Peers::Listed(listed) if listed.len() == 1));
    }

    #[test]
    fn a_server_refuses_keys_without_their_other_halves() {
        let peer = format!("site-a,key={}", public_hex());
        let refused = |config: BondServerConfig| config.options().unwrap_err();
        assert!(matches!(
            refused(server(false, true, &[])),
            ConfigError::ServerNeedsPeers
        ));
        assert!(matches!(
            refused(server(true, false, &[&peer])),
            ConfigError::PeersNeedKey
        ));
        assert!(matches!(
            refused(server(false, false, &[])),
            ConfigError::ServerNeedsKeys
        ));
    }

    #[test]
    fn a_tap_server_refuses_several_peers_allowed_prefixes_and_routes() {
        let public = public_hex();
        let one = format!("site-a,key={public}");
        let two = format!("site-b,key={public}");
        let allowed = format!("site-a,key={public},allowed=198.19.1.0/24");
        let tap = |peers: &[&str]| {
            let mut config = server(false, true, peers);
            config.tunnel.tap = true;
            config.options()
        };
        // One peer without allowed= owns the bridge (every peer was refused before: one
        // without allowed= is given every address, which counted as narrowing).
        assert!(tap(&[&one]).is_ok());
        assert!(matches!(tap(&[&one, &two]), Err(ConfigError::TapPeers(2))));
        assert!(matches!(tap(&[&allowed]), Err(ConfigError::TapAllowed(name)) if name == "site-a"));
        let mut routed = server(true, false, &[]);
        routed.tunnel.tap = true;
        routed.tunnel.tun.routes = vec![("198.19.0.0".parse().unwrap(), 16)];
        assert!(matches!(routed.options(), Err(ConfigError::TapRoutes)));
    }

    #[test]
    fn a_server_refuses_limits_and_an_mtu_out_of_range() {
        for (clients, lines) in [(0, 8), (64, 0), (64, 65)] {
            let mut config = server(true, false, &[]);
            (config.max_clients, config.max_lines) = (clients, lines);
            assert!(
                matches!(config.options(), Err(ConfigError::Limits)),
                "{clients} {lines}"
            );
        }
        let mut config = server(true, false, &[]);
        config.tunnel.tun.mtu = Some(575);
        assert!(matches!(config.options(), Err(ConfigError::Mtu(575))));
        config.tunnel.tun.mtu = Some(576);
        assert!(config.options().is_ok());
    }

    #[test]
    fn a_client_in_the_simple_mode_makes_its_own_key() {
        let options = client(true, false, None, &["eth1", "eth2,rate=10mbit"])
            .options(&mut Fixed(7))
            .unwrap();
        assert_eq!(options.lines.len(), 2);
        assert_eq!(options.config.lines, 2);
        assert_eq!(
            options.config.line_rates,
            vec![None, Some(BitsPerSec(10_000_000))]
        );
    }

    #[test]
    fn a_client_refuses_keys_without_their_other_halves() {
        let public = public_hex();
        let refused = |config: BondClientConfig| config.options(&mut Fixed(7)).unwrap_err();
        assert!(matches!(
            refused(client(false, true, None, &["eth1"])),
            ConfigError::KeyNeedsServerKey
        ));
        assert!(matches!(
            refused(client(false, false, Some(&public), &["eth1"])),
            ConfigError::ServerKeyNeedsKey
        ));
        assert!(matches!(
            refused(client(false, false, None, &["eth1"])),
            ConfigError::ClientNeedsKeys
        ));
        assert!(matches!(
            refused(client(false, true, Some("abcd"), &["eth1"])),
            ConfigError::ServerKey(_)
        ));
        assert!(client(false, true, Some(&public), &["eth1"])
            .options(&mut Fixed(7))
            .is_ok());
    }

    #[test]
    fn a_client_needs_every_rate_for_the_weighted_round_robin_and_at_most_16_lines() {
        let mut weighted = client(true, false, None, &["eth1,rate=10mbit", "eth2"]);
        weighted.scheduler = SchedulerKind::WeightedRoundRobin;
        assert!(matches!(
            weighted.options(&mut Fixed(7)),
            Err(ConfigError::WeightsNeedRates)
        ));
        let lines: Vec<String> = (0..17).map(|k| format!("eth{k}")).collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert!(matches!(
            client(true, false, None, &lines).options(&mut Fixed(7)),
            Err(ConfigError::TooManyLines(17))
        ));
        assert!(client(true, false, None, &lines[..16])
            .options(&mut Fixed(7))
            .is_ok());
    }

    #[test]
    fn a_key_file_that_holds_no_key_is_named() {
        let short = KeyFile {
            path: PathBuf::from("short.key"),
            contents: b"too short".to_vec(),
        };
        assert!(short.psk().unwrap_err().to_string().contains("short.key"));
        assert!(short
            .secret_key()
            .unwrap_err()
            .to_string()
            .contains("short.key"));
    }
}
