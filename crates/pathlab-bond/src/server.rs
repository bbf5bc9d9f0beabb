//! The server: many client sessions behind one UDP address.
//!
//! A Hello sealed with the pre-shared key opens a session (or, repeated on another line or
//! after a lost Welcome, finds the one it opened) and is answered with a Welcome no larger
//! than itself; anything else must name a session and authenticate under its keys. A
//! session's lines are the client's: the server learns each line's address from the
//! datagrams that authenticate on it, so a line behind a NAT that rebinds keeps working.
//! Inner packets from the TUN device go to the session whose client sent packets from their
//! destination address (learnt like a switch learns MAC addresses), or to the only session
//! when there is one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use pathlab_core::{Duration, Instant};

use crate::crypto::{self, Psk, Role, SessionKeys};
use crate::endpoint::{Bond, BondConfig, Entropy};
use crate::wire::{self, Header, Hello, Kind, Welcome};

/// The server's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Each session's settings (`lines` is the most lines a client may have).
    pub session: BondConfig,
    /// Most sessions at once; Hellos beyond are refused (counted, not answered).
    pub max_clients: usize,
    /// A session silent this long is forgotten.
    pub idle_timeout: Duration,
}

/// What the bond's tunnel server did with datagrams and sessions (`pathlab bond stats`
/// shows them); not the measurement server's counters (`pathlab server`, in
/// `pathlab-probe-driver`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BondServerCounters {
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Sessions forgotten after `idle_timeout`, or closed by their client.
    pub sessions_ended: u64,
    /// Hellos refused because `max_clients` sessions were open.
    pub refused_full: u64,
    /// Datagrams that failed authentication before reaching a session (Hellos with
    /// another key, Data for no session).
    pub auth_failures: u64,
    /// Datagrams that did not parse.
    pub malformed: u64,
    /// Inner packets from the TUN side that no session claims.
    pub unroutable: u64,
}

#[derive(Debug)]
struct Session {
    bond: Bond,
    client_nonce: [u8; 16],
    welcome: Vec<u8>,
    remotes: Vec<Option<SocketAddr>>,
    last_heard: Instant,
}

/// The server side of the tunnel.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    psk: Psk,
    hello_keys: SessionKeys,
    entropy: Box<dyn Entropy>,
    sessions: HashMap<u32, Session>,
    by_nonce: HashMap<[u8; 16], u32>,
    routes: HashMap<IpAddr, u32>,
    /// Welcomes to send: (address, datagram).
    welcomes: Vec<(SocketAddr, Vec<u8>)>,
    counters: BondServerCounters,
    /// Round-robin start over sessions for fairness of transmit polling.
    poll_order: Vec<u32>,
}

impl Server {
    /// A server with no sessions.
    pub fn new(config: ServerConfig, psk: Psk, entropy: Box<dyn Entropy>) -> Server {
        Server {
            hello_keys: SessionKeys::hello(&psk, Role::Server),
            psk,
            entropy,
            sessions: HashMap::new(),
            by_nonce: HashMap::new(),
            routes: HashMap::new(),
            welcomes: Vec::new(),
            counters: BondServerCounters::default(),
            poll_order: Vec::new(),
            config,
        }
    }

    /// The counters.
    pub fn counters(&self) -> BondServerCounters {
        self.counters
    }

    /// The open sessions, by id.
    pub fn sessions(&self) -> impl Iterator<Item = (u32, &Bond)> {
        self.sessions.iter().map(|(id, s)| (*id, &s.bond))
    }

    /// A datagram from `from` at `now`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) {
        let Ok(header) = Header::decode(datagram) else {
            self.counters.malformed += 1;
            return;
        };
        match header.kind {
            Kind::Hello => self.handle_hello(now, from, datagram),
            Kind::Data => {
                let Some(session) = self.sessions.get_mut(&header.session) else {
                    self.counters.auth_failures += 1;
                    return;
                };
                let before = session.bond.counters();
                session.bond.handle_datagram(now, datagram);
                let after = session.bond.counters();
                // Only a datagram that authenticated (no failure counted) teaches the line's
                // address: a forged one must not redirect the session's traffic.
                if after.auth_failures == before.auth_failures
                    && after.malformed == before.malformed
                    && after.replays == before.replays
                {
                    session.last_heard = now;
                    if let Some(slot) = session.remotes.get_mut(usize::from(header.line)) {
                        *slot = Some(from);
                    }
                }
                if session.bond.is_closed() {
                    self.end_session(header.session);
                }
            }
            Kind::Welcome => self.counters.auth_failures += 1,
        }
    }

    fn handle_hello(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) {
        let received_len = datagram.len();
        // A Hello must be as long as the Welcome it asks for (the client pads it): a
        // shorter one gets no answer, so it must not get a session either.
        if received_len < wire::HEADER_BYTES + wire::WELCOME_BODY_BYTES + wire::TAG_BYTES {
            self.counters.malformed += 1;
            return;
        }
        let Ok((header, body)) = crypto::open(&self.hello_keys.open, datagram) else {
            self.counters.auth_failures += 1;
            return;
        };
        let Ok(hello) = Hello::decode(&body[..body.len().min(wire::HELLO_BODY_BYTES)]) else {
            self.counters.malformed += 1;
            return;
        };
        if usize::from(header.line) >= self.config.session.lines
            || usize::from(hello.lines) > self.config.session.lines
        {
            self.counters.malformed += 1;
            return;
        }
        let id = match self.by_nonce.get(&hello.client_nonce) {
            Some(&id) => id,
            None => {
                if self.sessions.len() >= self.config.max_clients {
                    self.counters.refused_full += 1;
                    return;
                }
                let id = self.open_session(now, &hello);
                self.by_nonce.insert(hello.client_nonce, id);
                id
            }
        };
        let session = self.sessions.get_mut(&id).expect("just found or made");
        session.last_heard = now;
        if let Some(slot) = session.remotes.get_mut(usize::from(header.line)) {
            *slot = Some(from);
        }
        // Never answer with more than was received (no amplification).
        if session.welcome.len() <= received_len {
            self.welcomes.push((from, session.welcome.clone()));
        }
    }

    fn open_session(&mut self, now: Instant, hello: &Hello) -> u32 {
        let mut id = 0;
        while id == 0 || self.sessions.contains_key(&id) {
            let mut bytes = [0; 4];
            self.entropy.fill(&mut bytes);
            id = u32::from_be_bytes(bytes);
        }
        let mut server_nonce = [0; 16];
        self.entropy.fill(&mut server_nonce);
        let mut config = self.config.session.clone();
        config.lines = usize::from(hello.lines);
        config
            .max_payload
            .resize(config.lines, crate::endpoint::DEFAULT_MAX_PAYLOAD);
        config.line_rates.resize(config.lines, None);
        let bond = Bond::server(
            config,
            self.psk.clone(),
            id,
            &hello.client_nonce,
            &server_nonce,
            now,
        );
        let header = Header {
            kind: Kind::Welcome,
            line: 0,
            session: id,
            seq: {
                let mut bytes = [0; 8];
                self.entropy.fill(&mut bytes);
                // With the random session id, 80 random bits of the hello key's nonce.
                (u64::from_be_bytes(bytes) & wire::MAX_SEQ) | 1
            },
        };
        let mut welcome = Vec::new();
        header.encode(&mut welcome);
        Welcome {
            client_nonce: hello.client_nonce,
            server_nonce,
            session: id,
        }
        .encode(&mut welcome);
        crypto::seal(&self.hello_keys.seal, &header, &mut welcome).expect("room for a tag");
        self.sessions.insert(
            id,
            Session {
                remotes: vec![None; usize::from(hello.lines)],
                bond,
                client_nonce: hello.client_nonce,
                welcome,
                last_heard: now,
            },
        );
        self.poll_order.push(id);
        self.counters.sessions_opened += 1;
        id
    }

    fn end_session(&mut self, id: u32) {
        if let Some(session) = self.sessions.remove(&id) {
            self.by_nonce.remove(&session.client_nonce);
            self.routes.retain(|_, s| *s != id);
            self.poll_order.retain(|s| *s != id);
            self.counters.sessions_ended += 1;
        }
    }

    /// An inner packet from the TUN side at `now`: to the session its destination belongs to.
    pub fn handle_inner(&mut self, now: Instant, data: Vec<u8>) {
        let session = match destination(&data).and_then(|d| self.routes.get(&d)) {
            Some(&id) => Some(id),
            None if self.sessions.len() == 1 => self.sessions.keys().next().copied(),
            None => None,
        };
        match session.and_then(|id| self.sessions.get_mut(&id)) {
            Some(session) => session.bond.handle_inner(now, data),
            None => self.counters.unroutable += 1,
        }
    }

    /// The next inner packet for the TUN side (any session's).
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        for (&id, session) in &mut self.sessions {
            if let Some(packet) = session.bond.poll_deliver() {
                if let Some(source) = source(&packet) {
                    self.routes.insert(source, id);
                }
                return Some(packet);
            }
        }
        None
    }

    /// The next datagram to send at `now`, in `buf`, and where to.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SocketAddr> {
        if let Some((to, datagram)) = self.welcomes.pop() {
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

    /// Timers due at `now`; forgets sessions idle for `idle_timeout`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let idle: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| now.saturating_since(s.last_heard) >= self.config.idle_timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in idle {
            self.end_session(id);
        }
        for session in self.sessions.values_mut() {
            session.bond.handle_timeout(now);
        }
    }

    /// When the server next needs a call.
    pub fn poll_at(&self) -> Option<Instant> {
        let welcomes = (!self.welcomes.is_empty()).then_some(Instant::ZERO);
        let sessions = self.sessions.values().flat_map(|s| {
            [
                s.bond.poll_at(),
                Some(s.last_heard + self.config.idle_timeout),
            ]
        });
        welcomes.into_iter().chain(sessions.flatten()).min()
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
