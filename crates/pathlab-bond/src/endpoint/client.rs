//! The client's side of a [`Bond`]: its handshakes, how it notices a lost session and
//! opens a new one (see the module above for when).

use std::collections::VecDeque;

use pathlab_core::{Duration, Instant};

use super::{Bond, State};
use crate::entropy::{fresh_id, Entropy};
use crate::handshake::{self, ClientKeys, Initiation};
use crate::rekey::KeyRing;
use crate::wire::Header;

/// When a handshake's (or a rekey's) next attempt goes: each retry waits twice as long as
/// the one before, up to a maximum, less a random part.
#[derive(Debug)]
pub(super) struct Backoff {
    /// When the next attempt starts.
    pub(super) next_attempt: Instant,
    /// The wait after the next attempt (before jitter).
    pub(super) interval: Duration,
}

impl Backoff {
    /// The first attempt at `now`, the first retry `interval` later.
    pub(super) fn new(now: Instant, interval: Duration) -> Backoff {
        Backoff {
            next_attempt: now,
            interval,
        }
    }

    /// An attempt went at `now`: the next goes after the interval, which doubles up to
    /// `max`.
    pub(super) fn attempted(&mut self, now: Instant, max: Duration, entropy: &mut dyn Entropy) {
        // The wait, 75-100% of the interval: clients that lost their server together do
        // not come back together.
        let mut jitter = [0; 2];
        entropy.fill(&mut jitter);
        let fraction = 0.75 + 0.25 * f64::from(u16::from_be_bytes(jitter)) / f64::from(u16::MAX);
        self.next_attempt = now + Duration::from_secs_f64(self.interval.as_secs_f64() * fraction);
        self.interval = self.interval.saturating_mul(2).min(max);
    }
}

/// A client's handshake under way.
#[derive(Debug)]
pub(super) struct Handshaking {
    /// The latest attempts, newest last: a Response to the one before the newest still
    /// counts (a round trip longer than the retry interval).
    pub(super) attempts: VecDeque<Initiation>,
    /// The newest Initiation's bytes.
    pub(super) message: Vec<u8>,
    /// Lines the newest Initiation still has to go on (from line `lines - left`).
    pub(super) copies_left: usize,
    /// When the attempts go.
    pub(super) backoff: Backoff,
}

/// What a client keeps across sessions: its keys, randomness and handshake.
#[derive(Debug)]
pub(super) struct ClientSide {
    pub(super) keys: ClientKeys,
    pub(super) entropy: Box<dyn Entropy>,
    /// The wall clock (unix ns) at `Instant::ZERO`: the Initiation's timestamp.
    pub(super) unix_at_zero_ns: u64,
    /// The last timestamp sent: the next is greater, even if the wall clock steps back.
    pub(super) last_timestamp_ns: u64,
    /// A cookie the server gave, and when.
    pub(super) cookie: Option<([u8; handshake::MAC_BYTES], Instant)>,
    pub(super) handshake: Option<Handshaking>,
    /// A rekey under way ([`crate::rekey`]).
    pub(super) rekeying: Option<super::rekeying::Rekeying>,
}

impl Bond {
    /// A Response: the session it opens replaces the current one, if any.
    pub(super) fn handle_response(&mut self, now: Instant, header: Header, datagram: &[u8]) {
        let Some(client) = &mut self.client else {
            return;
        };
        let Some(handshake) = &mut client.handshake else {
            // A copy of a Response already taken (the server answers every line's copy).
            return;
        };
        let Some(at) = handshake
            .attempts
            .iter()
            .position(|a| a.index == header.session)
        else {
            return;
        };
        let attempt = handshake.attempts.remove(at).expect("found above");
        let Ok((session, keys)) = attempt.finish(datagram) else {
            self.counters.auth_failures += 1;
            return;
        };
        client.handshake = None;
        if matches!(self.state, State::Open { .. }) {
            // A new session: the far end starts afresh.
            self.counters.reconnects += 1;
            let lines = std::mem::take(&mut self.lines);
            self.lines = lines
                .into_iter()
                .enumerate()
                .map(|(j, line)| line.renewed(Bond::line_controller(&self.config, j), now))
                .collect();
            self.reorder.renew();
            self.fair.new_session();
            self.copy_out = None;
            self.compressor.reset();
            self.decompressor.reset();
        }
        self.state = State::Open {
            session,
            keys: KeyRing::new(keys, now),
        };
        for control in &mut self.control_out {
            control.clear();
        }
        self.last_authenticated = now;
        for line in &mut self.lines {
            line.reset_liveness(now);
        }
    }

    pub(super) fn handle_cookie(&mut self, now: Instant, header: Header, datagram: &[u8]) {
        let Some(client) = &mut self.client else {
            return;
        };
        let Some(handshake) = &client.handshake else {
            return;
        };
        let cookie = handshake
            .attempts
            .iter()
            .find(|a| a.index == header.session)
            .and_then(|a| a.open_cookie(&client.keys.server, datagram).ok());
        match cookie {
            Some(cookie) => {
                client.cookie = Some((cookie, now));
                self.counters.cookies += 1;
            }
            None => self.counters.auth_failures += 1,
        }
    }

    pub(super) fn handle_stale(&mut self, now: Instant, header: Header) {
        if self.session() != Some(header.session) {
            return;
        }
        self.counters.stale_signals += 1;
        // Anyone can forge a Stale: believe it only when the session has gone quiet too.
        if now.saturating_since(self.last_authenticated) >= self.config.stale_after {
            self.start_handshaking(now);
        }
    }

    pub(super) fn start_handshaking(&mut self, now: Instant) {
        let interval = self.config.hello_interval;
        if let Some(client) = &mut self.client {
            if client.handshake.is_none() && self.closing_left == 0 {
                client.handshake = Some(Handshaking {
                    attempts: VecDeque::new(),
                    message: Vec::new(),
                    copies_left: 0,
                    backoff: Backoff::new(now, interval),
                });
                client.rekeying = None;
            }
        }
    }

    /// A client's handshake timers: start one when needed, and each attempt when due.
    pub(super) fn tick_client(&mut self, now: Instant) {
        if self.client.is_none() || self.closing_left > 0 {
            return;
        }
        let needed = match self.state {
            State::Connecting => true,
            // Silence, or keys that rekeys failed to replace for `reject_after`.
            State::Open { ref keys, .. } => {
                now.saturating_since(self.last_authenticated) >= self.config.rehandshake_after
                    || keys.age(now) >= self.config.reject_after
            }
            State::Closed => false,
        };
        if needed {
            self.start_handshaking(now);
        }
        self.tick_rekey(now);
        let lines = self.lines.len();
        let max = self.config.hello_backoff_max;
        let Some(client) = &mut self.client else {
            return;
        };
        let Some(handshake) = &mut client.handshake else {
            return;
        };
        if now < handshake.backoff.next_attempt || lines == 0 {
            return;
        }
        let index = fresh_id(client.entropy.as_mut(), |index| {
            handshake.attempts.iter().any(|a| a.index == index)
        });
        let unix_ns = client
            .unix_at_zero_ns
            .saturating_add(now.as_nanos())
            .max(client.last_timestamp_ns + 1);
        client.last_timestamp_ns = unix_ns;
        let cookie_lifetime =
            handshake::COOKIE_SECRET_LIFETIME.saturating_sub(Duration::from_secs(10));
        let cookie = client
            .cookie
            .as_ref()
            .filter(|(_, at)| now.saturating_since(*at) < cookie_lifetime)
            .map(|(cookie, _)| cookie);
        let attempt = Initiation::start(
            &client.keys,
            index,
            unix_ns,
            lines as u8,
            cookie,
            client.entropy.as_mut(),
            &mut handshake.message,
        );
        handshake.attempts.push_back(attempt);
        if handshake.attempts.len() > 2 {
            handshake.attempts.pop_front();
        }
        handshake.copies_left = lines;
        handshake
            .backoff
            .attempted(now, max, client.entropy.as_mut());
        self.counters.handshakes += 1;
    }
}
