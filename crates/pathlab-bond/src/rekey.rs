//! Keys that roll over inside a session: the rekey handshake and the key ring.
//!
//! A session's keys are replaced every [`BondConfig::rekey_after`] (and before a key has
//! sealed [`BondConfig::rekey_after_messages`] datagrams) by a second, smaller handshake
//! that runs inside the session, as two frames of its Data (so under its keys, on its
//! lines, covered by its replay windows):
//!
//! ```text
//! Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s, prologue "pathlab-bond v2 rekey",
//! psk = the current keys' chain ([`SessionKeys`]'s HKDF of their split)
//!   -> psk, e        RekeyInit  (client to server; id u32, 48 bytes)
//!   <- e, ee         RekeyReply (server to client; the same id, 48 bytes)
//! ```
//!
//! The fresh ephemeral Diffie-Hellman gives the new keys forward secrecy; the chain binds
//! them to the session (only its two ends know it), so nothing else need authenticate the
//! frames. A rekey is not a new session: the session id, the lines' controllers, the
//! reorder buffer, the header-compression references and the fair queue stay; only the
//! [`KeyRing`] changes.
//!
//! The switch, without a lost datagram: the server answers a RekeyInit and keeps the new
//! keys *pending* (it opens with them, still seals with the current ones); the client,
//! once the RekeyReply comes, seals with the new keys at once and keeps the previous
//! opening key; the server's first datagram that opens under pending keys promotes them
//! (it seals with them from then on) and keeps the previous opening key. A previous key
//! opens what was in flight until [`BondConfig::reject_after`] from its creation (or the
//! next rekey), then it is dropped (zeroed): a datagram under it fails authentication. The
//! per-line seqs go on across keys (the nonce never repeats under a key, and one replay
//! window per line covers every key). Which key opens a datagram is found by trying them,
//! newest first (a failed Poly1305 check leaves the bytes as they were).
//!
//! [`BondConfig::rekey_after`]: crate::endpoint::BondConfig::rekey_after
//! [`BondConfig::rekey_after_messages`]: crate::endpoint::BondConfig::rekey_after_messages
//! [`BondConfig::reject_after`]: crate::endpoint::BondConfig::reject_after

use pathlab_core::{Duration, Instant};

use crate::crypto::{self, CryptoError, Key, SessionKeys};
use crate::entropy::Entropy;
use crate::handshake::{builder, HandshakeError};
use crate::wire::{Header, HEADER_BYTES, TAG_BYTES};

/// The rekey's Noise pattern.
pub const REKEY_PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// The rekey's prologue.
const REKEY_PROLOGUE: &[u8] = b"pathlab-bond v2 rekey";
/// Bytes of each rekey message (the wire's: [`crate::wire::REKEY_MESSAGE_BYTES`]).
pub use crate::wire::REKEY_MESSAGE_BYTES;
/// The least `rekey_after` a configuration takes.
pub const MIN_REKEY_AFTER: Duration = Duration::from_secs(10);
/// WireGuard's `REKEY_AFTER_MESSAGES`: a key seals at most this many datagrams before a
/// rekey starts. The wire's 48-bit seq per line bounds a line sooner (every key
/// included); this bound is for the cipher.
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// Rekeys the server holds pending at once: a client's retry before the first reply came,
/// whichever reply the client takes.
const MAX_PENDING: usize = 2;

/// The client's side of a rekey: its RekeyInit was sent, the RekeyReply is awaited.
pub struct RekeyInitiator {
    state: snow::HandshakeState,
    /// The id the reply must echo.
    pub id: u32,
}

impl std::fmt::Debug for RekeyInitiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RekeyInitiator")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn rekey_state(
    chain: &[u8; 32],
    entropy: &mut dyn Entropy,
    initiator: bool,
) -> snow::HandshakeState {
    let builder = builder(REKEY_PATTERN, entropy)
        .psk(0, chain)
        .and_then(|b| b.prologue(REKEY_PROLOGUE))
        .expect("a key of the pattern's size");
    if initiator {
        builder.build_initiator()
    } else {
        builder.build_responder()
    }
    .expect("a complete builder")
}

impl RekeyInitiator {
    /// Starts a rekey of the session whose keys are `keys`: writes the RekeyInit's message
    /// into `out`.
    pub fn start(
        keys: &SessionKeys,
        id: u32,
        entropy: &mut dyn Entropy,
        out: &mut [u8; REKEY_MESSAGE_BYTES],
    ) -> RekeyInitiator {
        let mut state = rekey_state(&keys.chain, entropy, true);
        let written = state.write_message(&[], out).expect("room for the message");
        debug_assert_eq!(written, REKEY_MESSAGE_BYTES);
        RekeyInitiator { state, id }
    }

    /// The new keys, from the server's RekeyReply.
    pub fn finish(mut self, reply: &[u8]) -> Result<SessionKeys, HandshakeError> {
        let mut payload = [0; REKEY_MESSAGE_BYTES];
        let len = self
            .state
            .read_message(reply, &mut payload)
            .map_err(|_| HandshakeError::Noise)?;
        if len != 0 {
            return Err(HandshakeError::Payload("a RekeyReply carries nothing"));
        }
        Ok(SessionKeys::from_split_wiping(
            self.state.dangerously_get_raw_split(),
            true,
        ))
    }
}

/// The server's answer to a RekeyInit under `keys`: the RekeyReply's message in `out`, and
/// the new keys.
pub fn respond(
    keys: &SessionKeys,
    init: &[u8],
    entropy: &mut dyn Entropy,
    out: &mut [u8; REKEY_MESSAGE_BYTES],
) -> Result<SessionKeys, HandshakeError> {
    let mut state = rekey_state(&keys.chain, entropy, false);
    let mut payload = [0; REKEY_MESSAGE_BYTES];
    let len = state
        .read_message(init, &mut payload)
        .map_err(|_| HandshakeError::Noise)?;
    if len != 0 {
        return Err(HandshakeError::Payload("a RekeyInit carries nothing"));
    }
    let written = state.write_message(&[], out).expect("room for the message");
    debug_assert_eq!(written, REKEY_MESSAGE_BYTES);
    Ok(SessionKeys::from_split_wiping(
        state.dangerously_get_raw_split(),
        false,
    ))
}

/// Keys the server agreed to and the client may switch to.
#[derive(Debug)]
struct Pending {
    id: u32,
    keys: SessionKeys,
    reply: [u8; REKEY_MESSAGE_BYTES],
    created: Instant,
}

/// Which key opened a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// The current keys.
    Current,
    /// Keys the server held pending, now promoted: a rekey completed at this end.
    Promoted,
    /// The previous keys (a datagram that was in flight across the switch).
    Previous,
}

/// A session's keys: the current ones, the previous opening key for what is in flight, and
/// (at the server) the rekeys agreed but not yet used by the client.
#[derive(Debug)]
pub struct KeyRing {
    current: SessionKeys,
    /// When the current keys were agreed.
    since: Instant,
    /// The previous keys' opening key, and when those keys were agreed.
    previous: Option<(Key, Instant)>,
    pending: Vec<Pending>,
    /// The id of the rekey that gave the current keys (a late copy of its RekeyInit is
    /// not answered again).
    current_id: Option<u32>,
    /// Datagrams sealed under the current keys.
    sealed: u64,
}

impl KeyRing {
    /// The ring of a session that opened with `keys` at `now`.
    pub fn new(keys: SessionKeys, now: Instant) -> KeyRing {
        KeyRing {
            current: keys,
            since: now,
            previous: None,
            pending: Vec::new(),
            current_id: None,
            sealed: 0,
        }
    }

    /// The current keys.
    pub fn current(&self) -> &SessionKeys {
        &self.current
    }

    /// When the current keys were agreed.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// How long ago the current keys were agreed.
    pub fn age(&self, now: Instant) -> Duration {
        now.saturating_since(self.since)
    }

    /// Datagrams sealed under the current keys.
    pub fn sealed(&self) -> u64 {
        self.sealed
    }

    /// Seals a datagram under the current keys ([`crypto::seal`]), counting it.
    pub fn seal(&mut self, header: &Header, buf: &mut Vec<u8>) -> Result<(), CryptoError> {
        crypto::seal(&self.current.seal, header, buf)?;
        self.sealed += 1;
        Ok(())
    }

    /// Switches to `keys` (agreed at `now`, by rekey `id`): the current keys' opening key
    /// stays for what is in flight.
    pub fn install(&mut self, now: Instant, id: Option<u32>, keys: SessionKeys) {
        let old = std::mem::replace(&mut self.current, keys);
        self.previous = Some((old.open.clone(), self.since));
        self.since = now;
        self.current_id = id;
        self.sealed = 0;
        self.pending.clear();
    }

    /// Drops the previous key once it is `reject_after` old, and pending keys as old.
    pub fn expire(&mut self, now: Instant, reject_after: Duration) {
        if self
            .previous
            .as_ref()
            .is_some_and(|(_, created)| now.saturating_since(*created) >= reject_after)
        {
            self.previous = None;
        }
        self.pending
            .retain(|p| now.saturating_since(p.created) < reject_after);
    }

    /// When [`KeyRing::expire`] next has something to drop.
    pub fn expires_at(&self, reject_after: Duration) -> Option<Instant> {
        let previous = self
            .previous
            .as_ref()
            .map(|(_, created)| *created + reject_after);
        let pending = self.pending.iter().map(|p| p.created + reject_after);
        previous.into_iter().chain(pending).min()
    }

    /// Whether a previous key is held.
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// Opens a datagram in place under whichever key seals it (the current keys, pending
    /// ones, which it promotes, or the previous opening key), after [`KeyRing::expire`]
    /// at `now`. The plain body is [`body`] of the datagram.
    pub fn open(
        &mut self,
        now: Instant,
        reject_after: Duration,
        datagram: &mut [u8],
    ) -> Result<(Header, Opened), CryptoError> {
        self.expire(now, reject_after);
        let error = match crypto::open(&self.current.open, datagram) {
            Ok((header, _)) => return Ok((header, Opened::Current)),
            Err(error @ CryptoError::BadTag) => error,
            Err(error) => return Err(error),
        };
        let promoted = self
            .pending
            .iter()
            .position(|p| crypto::open(&p.keys.open, datagram).is_ok());
        if let Some(at) = promoted {
            let pending = self.pending.swap_remove(at);
            self.install(now, Some(pending.id), pending.keys);
            let header = Header::decode(datagram).map_err(CryptoError::Wire)?;
            return Ok((header, Opened::Promoted));
        }
        if let Some((key, _)) = &self.previous {
            if let Ok((header, _)) = crypto::open(key, datagram) {
                return Ok((header, Opened::Previous));
            }
        }
        Err(error)
    }

    /// The server's answer to RekeyInit `id` at `now`: the RekeyReply's message to send,
    /// from the keys agreed for it (a copy of a RekeyInit answered is answered the same;
    /// one whose keys are current already needs no answer).
    pub fn answer(
        &mut self,
        now: Instant,
        id: u32,
        init: &[u8],
        entropy: &mut dyn Entropy,
    ) -> Option<[u8; REKEY_MESSAGE_BYTES]> {
        if self.current_id == Some(id) {
            return None;
        }
        if let Some(pending) = self.pending.iter().find(|p| p.id == id) {
            return Some(pending.reply);
        }
        let mut reply = [0; REKEY_MESSAGE_BYTES];
        let keys = respond(&self.current, init, entropy, &mut reply).ok()?;
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push(Pending {
            id,
            keys,
            reply,
            created: now,
        });
        Some(reply)
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): the previous key (0 or 1) and the
    /// keys agreed but not used yet.
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("keys.previous", usize::from(self.previous.is_some()));
        sizes.add("keys.pending", self.pending.len());
    }
}

/// The plain body of a datagram [`KeyRing::open`] opened.
pub fn body(datagram: &[u8]) -> &[u8] {
    &datagram[HEADER_BYTES..datagram.len() - TAG_BYTES]
}
