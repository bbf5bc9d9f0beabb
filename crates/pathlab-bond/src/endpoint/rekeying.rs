//! A [`Bond`]'s rekeys ([`crate::rekey`]): when the client starts one and retries it, how
//! each end answers the other's frame, and how the frames ride on the lines' datagrams.

use std::collections::VecDeque;

use pathlab_core::Instant;

use super::client::Backoff;
use super::{Bond, State};
use crate::crypto::Role;
use crate::entropy::fresh_id;
use crate::rekey::{RekeyInitiator, REKEY_MESSAGE_BYTES};
use crate::wire::Frame;

/// A client's rekey under way.
#[derive(Debug)]
pub(super) struct Rekeying {
    /// The latest attempts, newest last (a reply to the one before the newest still
    /// counts: the server holds both pending).
    attempts: VecDeque<RekeyInitiator>,
    /// When the attempts go (the handshake's timing).
    backoff: Backoff,
}

impl Rekeying {
    /// Attempts remembered (at most two).
    pub(super) fn attempts(&self) -> usize {
        self.attempts.len()
    }

    /// When the next attempt goes.
    pub(super) fn next_attempt(&self) -> Instant {
        self.backoff.next_attempt
    }
}

impl Bond {
    /// Whether the client's current keys are due for a rekey at `now`: old enough, or
    /// near their message bound.
    fn rekey_due(&self, now: Instant) -> bool {
        let State::Open { keys, .. } = &self.state else {
            return false;
        };
        keys.age(now) >= self.config.rekey_after
            || keys.sealed() >= self.config.rekey_after_messages
    }

    /// When the client's next rekey falls due by age (`None`: not a client, or one
    /// under way).
    pub(super) fn rekey_at(&self) -> Option<Instant> {
        let client = self.client.as_ref()?;
        if client.handshake.is_some() || self.closing_left > 0 {
            return None;
        }
        if let Some(rekeying) = &client.rekeying {
            return Some(rekeying.next_attempt());
        }
        match &self.state {
            State::Open { keys, .. } => Some(keys.since() + self.config.rekey_after),
            _ => None,
        }
    }

    /// A client's rekey timers: start one when due, and each attempt when due (its
    /// RekeyInit goes on every line, riding on the next datagram of each).
    pub(super) fn tick_rekey(&mut self, now: Instant) {
        let due = self.rekey_due(now);
        let interval = self.config.hello_interval;
        let max = self.config.hello_backoff_max;
        let lines = self.lines.len();
        let (Some(client), State::Open { keys, .. }) = (&mut self.client, &self.state) else {
            return;
        };
        if client.handshake.is_some() || self.closing_left > 0 || lines == 0 {
            return;
        }
        if client.rekeying.is_none() && due {
            client.rekeying = Some(Rekeying {
                attempts: VecDeque::new(),
                backoff: Backoff::new(now, interval),
            });
        }
        let Some(rekeying) = &mut client.rekeying else {
            return;
        };
        if now < rekeying.backoff.next_attempt {
            return;
        }
        let id = fresh_id(client.entropy.as_mut(), |id| {
            rekeying.attempts.iter().any(|a| a.id == id)
        });
        let mut message = [0; REKEY_MESSAGE_BYTES];
        let attempt =
            RekeyInitiator::start(keys.current(), id, client.entropy.as_mut(), &mut message);
        rekeying.attempts.push_back(attempt);
        if rekeying.attempts.len() > 2 {
            rekeying.attempts.pop_front();
        }
        rekeying
            .backoff
            .attempted(now, max, client.entropy.as_mut());
        let frame = Frame::Rekey {
            reply: false,
            id,
            message: &message,
        };
        for control in &mut self.control_out {
            control.clear();
            frame.encode(control);
        }
        self.counters.rekey_handshakes += 1;
    }

    /// A RekeyInit (at the server) or a RekeyReply (at the client) that came on line `j`.
    pub(super) fn handle_rekey(
        &mut self,
        now: Instant,
        j: usize,
        reply: bool,
        id: u32,
        message: &[u8],
    ) {
        let State::Open { keys, .. } = &mut self.state else {
            return;
        };
        match (self.role, reply) {
            (Role::Server, false) => {
                let Some(entropy) = self.rekey_entropy.as_mut() else {
                    return;
                };
                let Some(answer) = keys.answer(now, id, message, entropy.as_mut()) else {
                    return;
                };
                if let Some(control) = self.control_out.get_mut(j) {
                    control.clear();
                    Frame::Rekey {
                        reply: true,
                        id,
                        message: &answer,
                    }
                    .encode(control);
                }
            }
            (Role::Client, true) => {
                let Some(client) = &mut self.client else {
                    return;
                };
                let Some(rekeying) = &mut client.rekeying else {
                    // A copy of a reply already taken (one comes per line).
                    return;
                };
                let Some(at) = rekeying.attempts.iter().position(|a| a.id == id) else {
                    return;
                };
                let attempt = rekeying.attempts.remove(at).expect("found above");
                let Ok(new_keys) = attempt.finish(message) else {
                    self.counters.auth_failures += 1;
                    return;
                };
                client.rekeying = None;
                keys.install(now, Some(id), new_keys);
                self.counters.rekeys += 1;
                for control in &mut self.control_out {
                    control.clear();
                }
            }
            // A rekey frame at the wrong end: authenticated, so the peer's own mistake.
            _ => self.counters.malformed += 1,
        }
    }

    /// The first line with a rekey frame waiting to ride on a datagram.
    pub(super) fn control_line(&self) -> Option<usize> {
        self.control_out.iter().position(|c| !c.is_empty())
    }
}
