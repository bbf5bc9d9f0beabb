//! The server: many client sessions behind one UDP address.
//!
//! A client opens a session with a Noise IKpsk2 handshake ([`crate::handshake`]): its
//! static key names the peer (one of the configured `--peer`s, or, in the simple mode of
//! one pre-shared key, any key that knows it). An Initiation whose timestamp is not newer
//! than the last one accepted from that peer is a replay: counted, unanswered. An accepted
//! one gets a session that stays *unconfirmed* until the first Data comes under its keys
//! (only the real client has them); only then does it replace the peer's previous session.
//! So a replayed Initiation, even after a restart forgot the timestamps, changes nothing
//! that carries traffic, and an unconfirmed session expires. In the simple mode the keys the
//! server forgets (it keeps a bounded number) leave floors ([`crate::replay`]): a captured
//! Initiation is refused after its key was forgotten too.
//!
//! Every answer before authentication is smaller than its cause (a Response is 96 bytes, a
//! CookieReply 68, a Stale 12, for an Initiation of 153 or any Data). Under load the
//! server demands a cookie (proof that the client receives at its source address) before
//! it spends a Diffie-Hellman, and holds each source to its share of handshakes
//! ([`crate::ratelimit`], WireGuard's 20 a second).
//!
//! A session's lines are the client's: the server learns each line's address (and the
//! local address it came to, on a multi-homed server) from the newest authenticated Data on
//! it, so a line behind a NAT that rebinds keeps working and a replayed datagram moves
//! nothing. Inner packets go down to the session of the peer whose allowed prefixes hold
//! their destination (cryptokey routing), and come up only from sources in the sender's
//! own prefixes; in the simple mode, to the session whose client sent from the
//! destination (learnt, bounded), or to the only session.
//!
//! With [`Framing::Ethernet`] (a TAP device, `--tap`) the server bridges one client: its
//! TAP's frames go to the session confirmed last (the client's current one; a client that
//! comes back under a new session takes the frames at once), and frames from any session go
//! to the TAP, unchecked by address (the caller allows one peer at most, whose every frame
//! is its own; a learning bridge per client is not done).

mod sizes;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use pathlab_core::{Duration, Instant};

use crate::crypto::Psk;
use crate::endpoint::{Bond, BondConfig, Entropy, Received};
use crate::handshake::{self, Incoming, PublicKey, Responder, ServerKeys, TIMESTAMP_BYTES};
use crate::inner::Framing;
use crate::line::LineFraming;
use crate::peers::{AllowedIps, PeerConfig, PeerError};
use crate::ratelimit::{self, SourceLimiter};
use crate::replay::ReplayFloors;
use crate::wire::{Header, Kind};

/// The server's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Each session's settings (`lines` is the most lines a client may have).
    pub session: BondConfig,
    /// Most sessions at once; handshakes beyond are refused (counted, not answered).
    pub max_clients: usize,
    /// A session silent this long is forgotten.
    pub idle_timeout: Duration,
    /// A session whose client sent no Data under its keys this long after the handshake
    /// is forgotten (a replayed Initiation's, or a client that went away).
    pub unconfirmed_timeout: Duration,
    /// Handshakes a second the server does before it asks for cookies.
    pub handshakes_before_cookie: u32,
    /// Stale signals a second at most (they answer Data of unknown sessions).
    pub stale_per_second: u32,
    /// Sources whose handshakes are counted under load at once (each held to
    /// [`ratelimit::HANDSHAKES_PER_SECOND`]); beyond, a new source waits.
    pub max_handshake_sources: usize,
}

impl ServerConfig {
    /// Defaults for sessions of `session` and at most `max_clients` of them.
    pub fn new(session: BondConfig, max_clients: usize) -> ServerConfig {
        ServerConfig {
            session,
            max_clients,
            idle_timeout: Duration::from_secs(60),
            unconfirmed_timeout: Duration::from_secs(10),
            handshakes_before_cookie: 50,
            stale_per_second: 50,
            max_handshake_sources: ratelimit::DEFAULT_MAX_SOURCES,
        }
    }
}

/// The most inner addresses the simple mode learns routes for.
pub const MAX_LEARNED_ROUTES: usize = 65_536;

/// Who may open sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peers {
    /// The simple mode: any client key, the pre-shared key being the proof (one site, or
    /// sites that trust each other).
    AnyKey,
    /// These peers only, each from its allowed prefixes.
    Listed(Vec<PeerConfig>),
}

/// What the bond's tunnel server did with datagrams and sessions (`pathlab bond stats`
/// shows them); not the measurement server's counters (`pathlab server`, in
/// `pathlab-probe-driver`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BondServerCounters {
    /// Sessions opened (confirmed by the client's first Data).
    pub sessions_opened: u64,
    /// Sessions forgotten after `idle_timeout`, closed by their client, or replaced by
    /// the same client's new session.
    pub sessions_ended: u64,
    /// Sessions a client closed with a Close.
    pub sessions_closed: u64,
    /// Sessions a client's new session replaced (it restarted, or lost the old one).
    pub sessions_replaced: u64,
    /// Handshakes refused because `max_clients` sessions were open.
    pub refused_full: u64,
    /// Datagrams that failed authentication before reaching a session (a bad mac1, an
    /// Initiation Noise refused, Data for no session).
    pub auth_failures: u64,
    /// Datagrams that did not parse.
    pub malformed: u64,
    /// Inner packets from the TUN side that no session claims.
    pub unroutable: u64,
    /// Handshakes accepted (a Response sent, a session waiting for its first Data).
    pub handshakes: u64,
    /// Copies of an Initiation already answered (one per line), answered again from the
    /// first Response.
    pub hello_copies: u64,
    /// Initiations refused as replays (their timestamp not newer than the peer's last, or
    /// in the simple mode than the floor kept for a key the server forgot).
    pub replayed_hellos: u64,
    /// Initiations refused under load, their cookie valid, because their source had sent
    /// more than its share ([`ratelimit::HANDSHAKES_PER_SECOND`], a burst of
    /// [`ratelimit::HANDSHAKE_BURST`]) or the table of sources was full.
    pub rate_limited: u64,
    /// Initiations from keys that are no peer of this server.
    pub unknown_peers: u64,
    /// CookieReplies sent (under load).
    pub cookies_sent: u64,
    /// Stale signals sent (Data for a session the server does not know).
    pub stale_sent: u64,
    /// Sessions that never saw Data under their keys and expired.
    pub unconfirmed_expired: u64,
    /// Inner packets whose source lies outside their client's allowed prefixes, dropped.
    pub spoofed_sources: u64,
}

/// Entries in the server's bounded tables (each has its bound in its doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerTables {
    /// Keys known: the listed peers, or in the simple mode at most 4 x `max_clients` + 16.
    pub peers: usize,
    /// Sessions, confirmed or not: at most 2 x `max_clients`.
    pub sessions: usize,
    /// Keys forgotten whose replay floors are kept exactly (at most
    /// [`crate::replay::EXACT_FLOORS`]; older ones folded into a fixed array).
    pub replay_floors: usize,
    /// Sources whose handshakes are counted (at most `max_handshake_sources`, each
    /// forgotten a second after its last).
    pub handshake_sources: usize,
}

/// Where a datagram goes, or came from: the peer's address and the server's own (the one it
/// came to, to answer from on a multi-homed server; `None` lets the kernel choose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address {
    /// The peer's address and port.
    pub remote: SocketAddr,
    /// The server's address the datagram came to.
    pub local: Option<IpAddr>,
}

#[derive(Debug)]
struct Session {
    bond: Bond,
    peer: PublicKey,
    remotes: Vec<Option<Address>>,
    last_heard: Instant,
    opened: Instant,
    confirmed: bool,
    /// The Response, sent again to copies of its Initiation.
    response: Vec<u8>,
    initiation: [u8; 32],
}

/// What the server keeps of a peer.
#[derive(Debug)]
struct PeerState {
    name: String,
    /// The newest Initiation timestamp accepted.
    greatest: [u8; TIMESTAMP_BYTES],
    current: Option<u32>,
    pending: Option<u32>,
    last_used: Instant,
}

/// A token bucket of whole tokens a second.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

impl Window {
    /// Counts one event at `now` if fewer than `limit` came in this second.
    fn take(&mut self, now: Instant, limit: u32) -> bool {
        self.roll(now);
        if self.count >= limit {
            return false;
        }
        self.count += 1;
        true
    }

    fn roll(&mut self, now: Instant) {
        if now.saturating_since(self.start) >= Duration::from_secs(1) {
            self.start = now;
            self.count = 0;
        }
    }
}

/// The server side of the tunnel.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    responder: Responder,
    entropy: Box<dyn Entropy>,
    /// The listed peers (empty in the simple mode) and their table.
    listed: Vec<PeerConfig>,
    allowed: Option<AllowedIps>,
    peers: HashMap<PublicKey, PeerState>,
    sessions: HashMap<u32, Session>,
    by_initiation: HashMap<[u8; 32], u32>,
    /// The simple mode's learnt routes.
    routes: HashMap<IpAddr, u32>,
    /// Datagrams to send before any session's.
    outbox: Vec<(Address, Vec<u8>)>,
    handshake_load: Window,
    /// Handshakes per source, counted under load.
    limiter: SourceLimiter,
    /// The replay floors of the keys the simple mode forgot.
    floors: ReplayFloors,
    stale_budget: Window,
    counters: BondServerCounters,
    /// Round-robin start over sessions for fairness of transmit polling.
    poll_order: Vec<u32>,
    /// The session confirmed last (where a TAP server's frames go).
    last_confirmed: Option<u32>,
}

impl Server {
    /// A server with no sessions: its keys, and who may connect. Refuses peers that share a
    /// name, a key or an allowed prefix.
    pub fn new(
        config: ServerConfig,
        keys: ServerKeys,
        peers: Peers,
        mut entropy: Box<dyn Entropy>,
    ) -> Result<Server, PeerError> {
        let (listed, allowed) = match peers {
            Peers::AnyKey => (Vec::new(), None),
            Peers::Listed(listed) => {
                let allowed = AllowedIps::new(&listed)?;
                (listed, Some(allowed))
            }
        };
        let peers = listed
            .iter()
            .map(|p| {
                (
                    p.key,
                    PeerState {
                        name: p.name.clone(),
                        greatest: [0; TIMESTAMP_BYTES],
                        current: None,
                        pending: None,
                        last_used: Instant::ZERO,
                    },
                )
            })
            .collect();
        let mut hash_key = [0; 32];
        entropy.fill(&mut hash_key);
        Ok(Server {
            responder: Responder::new(keys),
            entropy,
            listed,
            allowed,
            peers,
            sessions: HashMap::new(),
            by_initiation: HashMap::new(),
            routes: HashMap::new(),
            outbox: Vec::new(),
            handshake_load: Window {
                start: Instant::ZERO,
                count: 0,
            },
            limiter: SourceLimiter::new(config.max_handshake_sources),
            floors: ReplayFloors::new(hash_key),
            stale_budget: Window {
                start: Instant::ZERO,
                count: 0,
            },
            counters: BondServerCounters::default(),
            poll_order: Vec::new(),
            last_confirmed: None,
            config,
        })
    }

    /// The simple mode: the server's key derives from `psk`, and any client that knows it
    /// may connect.
    pub fn with_psk(config: ServerConfig, psk: &Psk, entropy: Box<dyn Entropy>) -> Server {
        Server::new(config, ServerKeys::from_psk(psk), Peers::AnyKey, entropy)
            .expect("no listed peers to disagree")
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The server's public key (what clients give as `--server-key`).
    pub fn public_key(&self) -> PublicKey {
        self.responder.public_key()
    }

    /// The counters.
    pub fn counters(&self) -> BondServerCounters {
        self.counters
    }

    /// The open (confirmed) sessions, by id, with their peer's name.
    pub fn sessions(&self) -> impl Iterator<Item = (u32, &str, &Bond)> {
        self.sessions
            .iter()
            .filter(|(_, s)| s.confirmed)
            .map(|(id, s)| {
                let name = self.peers.get(&s.peer).map_or("", |p| p.name.as_str());
                (*id, name, &s.bond)
            })
    }

    /// Sessions waiting for their client's first Data.
    pub fn unconfirmed_sessions(&self) -> usize {
        self.sessions.values().filter(|s| !s.confirmed).count()
    }

    /// How full the server's bounded tables are.
    pub fn tables(&self) -> ServerTables {
        ServerTables {
            peers: self.peers.len(),
            sessions: self.sessions.len(),
            replay_floors: self.floors.exact_len(),
            handshake_sources: self.limiter.len(),
        }
    }

    /// A datagram from `from` at `now`.
    pub fn handle_datagram(&mut self, now: Instant, from: Address, datagram: &mut [u8]) {
        let Ok(header) = Header::decode(datagram) else {
            self.counters.malformed += 1;
            return;
        };
        match header.kind {
            Kind::Hello => self.handle_initiation(now, from, datagram),
            Kind::Data => self.handle_data(now, from, header, datagram),
            Kind::Welcome | Kind::Cookie | Kind::Stale => self.counters.auth_failures += 1,
        }
    }

    fn handle_data(&mut self, now: Instant, from: Address, header: Header, datagram: &mut [u8]) {
        let Some(session) = self.sessions.get_mut(&header.session) else {
            self.counters.auth_failures += 1;
            // Tell the client its session is gone (a restart, an expiry), so it need not
            // wait for silence to handshake again. A 12-byte answer to a datagram at least
            // as long, within a budget: no amplification, no flood.
            if self.stale_budget.take(now, self.config.stale_per_second) {
                let mut stale = Vec::new();
                Header {
                    kind: Kind::Stale,
                    line: header.line,
                    session: header.session,
                    seq: 0,
                }
                .encode(&mut stale);
                self.outbox.push((from, stale));
                self.counters.stale_sent += 1;
            }
            return;
        };
        if let Received::Authentic { line, newest } = session.bond.handle_datagram(now, datagram) {
            session.last_heard = now;
            if newest {
                if let Some(slot) = session.remotes.get_mut(usize::from(line)) {
                    *slot = Some(from);
                    // The line's datagrams are IPv6 or IPv4 (an IPv4-mapped source is
                    // IPv4 on the wire): its IP header counts in what its modem carries.
                    let ipv6 = from.remote.ip().to_canonical().is_ipv6();
                    let framing = session.bond.config().line_framing.get(usize::from(line));
                    session.bond.set_line_framing(
                        usize::from(line),
                        LineFraming {
                            ipv6,
                            ..framing.copied().unwrap_or_default()
                        },
                    );
                }
            }
            if !session.confirmed {
                self.confirm(now, header.session);
            }
        }
        if self
            .sessions
            .get(&header.session)
            .is_some_and(|s| s.bond.is_closed())
        {
            self.counters.sessions_closed += 1;
            self.end_session(header.session);
        }
    }

    /// The client's first Data under a session's keys: it is the real client, and the
    /// session replaces the peer's previous one.
    fn confirm(&mut self, now: Instant, id: u32) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        session.confirmed = true;
        self.last_confirmed = Some(id);
        let peer_key = session.peer;
        self.counters.sessions_opened += 1;
        let previous = self.peers.get_mut(&peer_key).and_then(|peer| {
            peer.last_used = now;
            if peer.pending == Some(id) {
                peer.pending = None;
            }
            peer.current.replace(id)
        });
        if let Some(previous) = previous.filter(|p| *p != id) {
            self.counters.sessions_replaced += 1;
            self.end_session(previous);
        }
    }

    /// A Hello (a client's Initiation) from `from` at `now`: a copy of one answered is
    /// answered again (or counted as a replay), a client under load is asked for a cookie,
    /// and a new one from a peer that may connect opens a session waiting for its first
    /// Data.
    fn handle_initiation(&mut self, now: Instant, from: Address, datagram: &[u8]) {
        match self.responder.check_mac1(datagram) {
            Ok(()) => {}
            Err(handshake::HandshakeError::Length { .. }) => {
                self.counters.malformed += 1;
                return;
            }
            Err(_) => {
                self.counters.auth_failures += 1;
                return;
            }
        }
        let digest = handshake::initiation_digest(datagram);
        if self.answered_before(from, &digest)
            || self.cookie_demanded(now, from, datagram)
            || self.rate_limited(now, from)
        {
            return;
        }
        self.handshake_load.count += 1;
        let Ok(incoming) = self
            .responder
            .read_initiation(datagram, self.entropy.as_mut())
        else {
            self.counters.auth_failures += 1;
            return;
        };
        if usize::from(incoming.lines) > self.config.session.lines {
            self.counters.malformed += 1;
            return;
        }
        if !self.peers.contains_key(&incoming.peer)
            && incoming.timestamp <= self.floors.floor(&incoming.peer)
        {
            // A key the simple mode forgot: not newer than what it accepted from it before.
            self.counters.replayed_hellos += 1;
            return;
        }
        if !self.known_or_learnt(now, incoming.peer) {
            return;
        }
        let peer = self.peers.get_mut(&incoming.peer).expect("present");
        if incoming.timestamp <= peer.greatest {
            self.counters.replayed_hellos += 1;
            return;
        }
        let confirmed = self.sessions.values().filter(|s| s.confirmed).count();
        if peer.current.is_none() && confirmed >= self.config.max_clients {
            self.counters.refused_full += 1;
            return;
        }
        peer.greatest = incoming.timestamp;
        peer.last_used = now;
        if let Some(stale) = peer.pending.take() {
            self.counters.unconfirmed_expired += 1;
            self.end_session(stale);
        }
        self.make_room_for_unconfirmed();
        self.open_session(now, from, digest, incoming);
    }

    /// Whether the Initiation whose digest is `digest` was answered already, and if so
    /// answers it again (or counts a replay).
    fn answered_before(&mut self, from: Address, digest: &[u8; 32]) -> bool {
        // A copy (another line's) of an Initiation already answered: the same Response, no
        // second handshake.
        // Once the session confirmed, the client needs no Response: a copy is a replay.
        let Some(session) = self
            .by_initiation
            .get(digest)
            .and_then(|id| self.sessions.get(id))
        else {
            return false;
        };
        if session.confirmed {
            self.counters.replayed_hellos += 1;
        } else {
            self.outbox.push((from, session.response.clone()));
            self.counters.hello_copies += 1;
        }
        true
    }

    /// Counts a handshake attempt at `now` and, under load, whether the Initiation lacks a
    /// valid cookie for `from`'s address: then a Cookie Reply is queued for it.
    fn cookie_demanded(&mut self, now: Instant, from: Address, datagram: &[u8]) -> bool {
        // Under load, a Diffie-Hellman only for a client that proved its address.
        self.handshake_load.roll(now);
        if self.handshake_load.count >= self.config.handshakes_before_cookie {
            let address = handshake::address_bytes(from.remote);
            if !self
                .responder
                .check_mac2(now, &address, datagram, self.entropy.as_mut())
            {
                let mut reply = Vec::new();
                self.responder.cookie_reply(
                    now,
                    &address,
                    datagram,
                    self.entropy.as_mut(),
                    &mut reply,
                );
                self.outbox.push((from, reply));
                self.counters.cookies_sent += 1;
                return true;
            }
        }
        false
    }

    /// Whether an Initiation from `from` at `now`, under load (its cookie valid), exceeds
    /// its source's share: then it is counted and dropped, as WireGuard's rate limiter does.
    fn rate_limited(&mut self, now: Instant, from: Address) -> bool {
        if self.handshake_load.count < self.config.handshakes_before_cookie
            || self.limiter.allow(now, from.remote.ip())
        {
            return false;
        }
        self.counters.rate_limited += 1;
        true
    }

    /// Whether the peer of key `peer` may go on handshaking: one known already, or (in the
    /// simple mode, without a list of peers) one learnt now if there is room for it.
    fn known_or_learnt(&mut self, now: Instant, peer: PublicKey) -> bool {
        if self.peers.contains_key(&peer) {
            return true;
        }
        if self.allowed.is_some() {
            self.counters.unknown_peers += 1;
            return false;
        }
        if !self.make_room_for_peer() {
            self.counters.refused_full += 1;
            return false;
        }
        self.peers.insert(
            peer,
            PeerState {
                name: format!("key-{}", &peer.to_string()[..8]),
                // Not below what was accepted from it before it was forgotten.
                greatest: self.floors.floor(&peer),
                current: None,
                pending: None,
                last_used: now,
            },
        );
        true
    }

    /// Ends the oldest session waiting for its first Data when as many wait as clients may
    /// connect.
    fn make_room_for_unconfirmed(&mut self) {
        // Sessions waiting for their first Data are bounded too: the oldest makes room (a
        // real client's confirms within a round trip; flooding faster than that asks for
        // cookies first).
        if self.unconfirmed_sessions() >= self.config.max_clients {
            let oldest = self
                .sessions
                .iter()
                .filter(|(_, s)| !s.confirmed)
                .min_by_key(|(_, s)| s.opened)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.counters.unconfirmed_expired += 1;
                self.end_session(oldest);
            }
        }
    }

    /// Answers the Initiation `incoming` (whose digest is `digest`) from `from` with a
    /// Response and opens its session, unconfirmed, under a new random id.
    fn open_session(&mut self, now: Instant, from: Address, digest: [u8; 32], incoming: Incoming) {
        let mut id = 0;
        while id == 0 || self.sessions.contains_key(&id) {
            let mut bytes = [0; 4];
            self.entropy.fill(&mut bytes);
            id = u32::from_be_bytes(bytes);
        }
        let mut config = self.config.session.clone();
        config.lines = usize::from(incoming.lines);
        config
            .max_payload
            .resize(config.lines, crate::endpoint::DEFAULT_MAX_PAYLOAD);
        config.line_rates.resize(config.lines, None);
        config
            .line_framing
            .resize(config.lines, LineFraming::default());
        let peer_key = incoming.peer;
        let mut response = Vec::new();
        let keys = incoming.respond(id, &mut response);
        let rekey_entropy = Box::new(crate::entropy::SeedStream::draw(self.entropy.as_mut()));
        self.outbox.push((from, response.clone()));
        self.sessions.insert(
            id,
            Session {
                remotes: vec![None; config.lines],
                bond: Bond::server(config, id, keys, rekey_entropy, now),
                peer: peer_key,
                last_heard: now,
                opened: now,
                confirmed: false,
                response,
                initiation: digest,
            },
        );
        self.by_initiation.insert(digest, id);
        self.peers.get_mut(&peer_key).expect("present").pending = Some(id);
        self.poll_order.push(id);
        self.counters.handshakes += 1;
    }

    /// The simple mode keeps what it learnt of at most this many keys: the least recently
    /// used without a session is forgotten for a new one.
    fn make_room_for_peer(&mut self) -> bool {
        let limit = 4 * self.config.max_clients + 16;
        if self.peers.len() < limit {
            return true;
        }
        let oldest = self
            .peers
            .iter()
            .filter(|(_, p)| p.current.is_none() && p.pending.is_none())
            .min_by_key(|(_, p)| p.last_used)
            .map(|(key, _)| *key);
        match oldest {
            Some(key) => {
                if let Some(forgotten) = self.peers.remove(&key) {
                    self.floors.remember(key, forgotten.greatest);
                }
                true
            }
            None => false,
        }
    }

    fn end_session(&mut self, id: u32) {
        if let Some(session) = self.sessions.remove(&id) {
            self.by_initiation.remove(&session.initiation);
            if let Some(peer) = self.peers.get_mut(&session.peer) {
                if peer.current == Some(id) {
                    peer.current = None;
                }
                if peer.pending == Some(id) {
                    peer.pending = None;
                }
            }
            self.routes.retain(|_, s| *s != id);
            self.poll_order.retain(|s| *s != id);
            if self.last_confirmed == Some(id) {
                self.last_confirmed = None;
            }
            if session.confirmed {
                self.counters.sessions_ended += 1;
            }
        }
    }

    /// The session an inner packet to `destination` goes to.
    fn session_for(&self, destination: Option<IpAddr>) -> Option<u32> {
        match &self.allowed {
            Some(allowed) => {
                let peer = &self.listed[allowed.lookup(destination?)?];
                self.peers.get(&peer.key)?.current
            }
            None => match destination.and_then(|d| self.routes.get(&d)) {
                Some(&id) => Some(id),
                None => {
                    let mut confirmed = self.sessions.iter().filter(|(_, s)| s.confirmed);
                    match (confirmed.next(), confirmed.next()) {
                        (Some((&id, _)), None) => Some(id),
                        _ => None,
                    }
                }
            },
        }
    }

    /// The session a TAP server's frames go to: the one confirmed last, or when it ended
    /// the confirmed session heard from last.
    fn bridged_session(&self) -> Option<u32> {
        self.last_confirmed.or_else(|| {
            self.sessions
                .iter()
                .filter(|(_, s)| s.confirmed)
                .max_by_key(|(_, s)| s.last_heard)
                .map(|(&id, _)| id)
        })
    }

    /// An inner packet from the TUN side at `now`: to the session its destination belongs
    /// to (a frame from a TAP: to the bridged session).
    pub fn handle_inner(&mut self, now: Instant, data: Vec<u8>) {
        let session = match self.config.session.framing {
            Framing::Ip => self.session_for(destination(&data)),
            Framing::Ethernet => self.bridged_session(),
        };
        match session.and_then(|id| self.sessions.get_mut(&id)) {
            Some(session) => session.bond.handle_inner(now, data),
            None => self.counters.unroutable += 1,
        }
    }

    /// The next inner packet for the TUN side (any session's). A packet whose source lies
    /// outside its client's allowed prefixes is dropped and counted.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        let ids: Vec<u32> = self.sessions.keys().copied().collect();
        for id in ids {
            loop {
                let session = self.sessions.get_mut(&id).expect("listed above");
                let Some(packet) = session.bond.poll_deliver() else {
                    break;
                };
                let peer = session.peer;
                if self.config.session.framing == Framing::Ethernet {
                    return Some(packet);
                }
                let Some(source) = source(&packet) else {
                    self.counters.spoofed_sources += 1;
                    continue;
                };
                match &self.allowed {
                    Some(allowed) => {
                        let owner = allowed.lookup(source).map(|i| self.listed[i].key);
                        if owner != Some(peer) {
                            self.counters.spoofed_sources += 1;
                            continue;
                        }
                    }
                    None => {
                        if self.routes.len() < MAX_LEARNED_ROUTES
                            || self.routes.contains_key(&source)
                        {
                            self.routes.insert(source, id);
                        }
                    }
                }
                return Some(packet);
            }
        }
        None
    }

    /// The next datagram to send at `now`, in `buf`, and where to (and from).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Address> {
        if let Some((to, datagram)) = self.outbox.pop() {
            buf.clear();
            buf.extend_from_slice(&datagram);
            return Some(to);
        }
        // Start with a different session each call, so one busy session cannot starve the
        // others' control traffic.
        if !self.poll_order.is_empty() {
            self.poll_order.rotate_left(1);
        }
        for &id in &self.poll_order {
            let session = self.sessions.get_mut(&id).expect("ordered sessions exist");
            while let Some(transmit) = session.bond.poll_transmit(now, buf) {
                if let Some(Some(to)) = session.remotes.get(usize::from(transmit.line)) {
                    return Some(*to);
                }
                // A line whose address is not known yet: the client will teach it.
            }
        }
        None
    }

    /// Closes every session: the next [`Server::poll_transmit`] calls send each client a
    /// Close on every line it was heard on, so it handshakes again as soon as the server is
    /// back, instead of waiting for silence.
    pub fn close_all(&mut self) {
        for session in self.sessions.values_mut() {
            session.bond.close();
        }
    }

    /// Timers due at `now`; forgets sessions idle for `idle_timeout`, sessions never
    /// confirmed after `unconfirmed_timeout`, and handshake sources quiet for a second.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.limiter.expire(now);
        let (idle, unconfirmed) = (self.config.idle_timeout, self.config.unconfirmed_timeout);
        let expired: Vec<(u32, bool)> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                if s.confirmed {
                    now.saturating_since(s.last_heard) >= idle
                } else {
                    now.saturating_since(s.opened) >= unconfirmed
                }
            })
            .map(|(id, s)| (*id, s.confirmed))
            .collect();
        for (id, confirmed) in expired {
            if !confirmed {
                self.counters.unconfirmed_expired += 1;
            }
            self.end_session(id);
        }
        for session in self.sessions.values_mut() {
            session.bond.handle_timeout(now);
        }
    }

    /// When the server next needs a call.
    pub fn poll_at(&self) -> Option<Instant> {
        let outbox = (!self.outbox.is_empty()).then_some(Instant::ZERO);
        let sessions = self.sessions.values().flat_map(|s| {
            [
                s.bond.poll_at(),
                Some(if s.confirmed {
                    s.last_heard + self.config.idle_timeout
                } else {
                    s.opened + self.config.unconfirmed_timeout
                }),
            ]
        });
        outbox.into_iter().chain(sessions.flatten()).min()
    }
}

/// The source address of an IP packet.
pub fn source(packet: &[u8]) -> Option<IpAddr> {
    crate::inner::addresses(packet).map(|(source, _)| source)
}

/// The destination address of an IP packet.
pub fn destination(packet: &[u8]) -> Option<IpAddr> {
    crate::inner::addresses(packet).map(|(_, destination)| destination)
}
