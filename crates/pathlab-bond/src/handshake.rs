//! The tunnel's handshake: the Noise framework's IKpsk2 pattern (WireGuard's), run by the
//! `snow` crate, with WireGuard's defences around it. Sans-IO: every function takes the
//! bytes, `now` and the randomness it needs; nothing here reads a clock or a socket.
//!
//! ```text
//! Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s, prologue "pathlab-bond v2"
//!   -> e, es, s, ss       Initiation (client to server, the same bytes on every line)
//!   <- e, ee, se, psk     Response   (server to client, on the line the Initiation came by)
//! ```
//!
//! The client knows the server's static public key; its own static key travels encrypted,
//! so a listener learns neither who connects nor anything to replay usefully. Ephemeral
//! keys on both sides give forward secrecy: a static key stolen later opens no recorded
//! session. The pre-shared key mixed in last (`psk2`) is derived from `--psk` when one is
//! given (all zeros otherwise), which also hedges against a future break of X25519.
//!
//! The data keys are Noise's split: the initiator's sending key seals what the client
//! sends, the other what the server sends. [`crate::crypto`] seals Data with them, its
//! nonce the clear header (`kind | line | session | seq`).
//!
//! Messages (a [`Header`](crate::wire::Header) of 12 bytes first, then):
//!
//! ```text
//! Initiation  kind 1 | line 0 | session = sender index | seq 0   (153 bytes)
//!             noise (109: e 32, s 32+16, payload 13+16) | mac1 16 | mac2 16
//!             payload: timestamp 12 (unix seconds u64, nanoseconds u32) | lines u8
//! Response    kind 2 | line 0 | session = the Initiation's sender index | seq 0  (96 bytes)
//!             noise (52: e 32, payload 4+16) | mac1 16 | mac2 16 (zeros)
//!             payload: session id u32 (non-zero)
//! CookieReply kind 4 | line 0 | session = the Initiation's sender index | seq 0  (68 bytes)
//!             nonce 24 | cookie 16 + tag 16 (XChaCha20-Poly1305, key HASH("cookie--" | server
//!             public key), associated data the Initiation's mac1)
//! ```
//!
//! Before any Diffie-Hellman the receiver checks `mac1 = MAC(HASH("mac1----" | receiver's
//! public key), message up to mac1)`, so junk and messages for another server cost one
//! BLAKE2s. Under load (more handshakes a second than [`ResponderConfig`] allows) the
//! server also demands `mac2 = MAC(cookie, message up to mac2)`, where the cookie is
//! `MAC(secret, source address and port)` under a secret it replaces every two minutes;
//! without it, the sender gets a CookieReply (68 bytes, smaller than the 153 that caused
//! it: no amplification) and must come again with the cookie, proving it receives at its
//! source address. MAC is keyed BLAKE2s with 16 bytes of output and HASH is BLAKE2s-256,
//! as in WireGuard.
//!
//! Replays: the timestamp must be greater than any the server accepted from that peer
//! (the server keeps the greatest per peer); a replayed Initiation changes nothing. After
//! a server restart forgot the timestamps, a replayed Initiation gets a session that never
//! confirms (no Data can come under keys only the real client has) and expires.

use blake2::digest::consts::U16;
use blake2::digest::FixedOutput;
use blake2::{Blake2s256, Blake2sMac, Digest as _};
use chacha20poly1305::aead::{AeadInPlace as _, KeyInit as _};
use chacha20poly1305::XChaCha20Poly1305;
use pathlab_core::{Duration, Instant};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

use zeroize::{ZeroizeOnDrop, Zeroizing};

use crate::crypto::{Psk, SessionKeys};
use crate::entropy::{Entropy, SeedStream};
use crate::wire::{Header, Kind, HEADER_BYTES};

/// The Noise protocol name.
pub const PATTERN: &str = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/// The prologue both ends mix in: a different protocol version never completes a handshake.
const PROLOGUE: &[u8] = b"pathlab-bond v2";
/// Bytes of an X25519 key (public or private) and of a pre-shared key.
pub const KEY_BYTES: usize = 32;
/// Bytes of a mac1 or mac2, and of a cookie.
pub const MAC_BYTES: usize = 16;
/// Bytes of an Initiation's timestamp: unix seconds (u64) and nanoseconds (u32), big-endian,
/// so that comparing the bytes compares the instants.
pub const TIMESTAMP_BYTES: usize = 12;
/// Bytes of an AEAD tag inside a Noise message.
const NOISE_TAG_BYTES: usize = 16;
/// Bytes of the Initiation's plain payload: timestamp, lines.
const INITIATION_PAYLOAD_BYTES: usize = TIMESTAMP_BYTES + 1;
/// Bytes of the Noise part of an Initiation.
pub const INITIATION_NOISE_BYTES: usize =
    KEY_BYTES + (KEY_BYTES + NOISE_TAG_BYTES) + (INITIATION_PAYLOAD_BYTES + NOISE_TAG_BYTES);
/// Bytes of a whole Initiation datagram.
pub const INITIATION_BYTES: usize = HEADER_BYTES + INITIATION_NOISE_BYTES + 2 * MAC_BYTES;
/// Bytes of the Response's plain payload: the session id.
const RESPONSE_PAYLOAD_BYTES: usize = 4;
/// Bytes of the Noise part of a Response.
pub const RESPONSE_NOISE_BYTES: usize = KEY_BYTES + RESPONSE_PAYLOAD_BYTES + NOISE_TAG_BYTES;
/// Bytes of a whole Response datagram.
pub const RESPONSE_BYTES: usize = HEADER_BYTES + RESPONSE_NOISE_BYTES + 2 * MAC_BYTES;
/// Bytes of an XChaCha20-Poly1305 nonce.
const XNONCE_BYTES: usize = 24;
/// Bytes of a whole CookieReply datagram.
pub const COOKIE_REPLY_BYTES: usize = HEADER_BYTES + XNONCE_BYTES + MAC_BYTES + NOISE_TAG_BYTES;
/// How long a cookie secret serves before the server draws a new one (and a client's
/// cookie is used for at most this less a margin).
pub const COOKIE_SECRET_LIFETIME: Duration = Duration::from_secs(120);

// No answer before authentication is larger than what caused it.
const _: () = {
    assert!(RESPONSE_BYTES < INITIATION_BYTES);
    assert!(COOKIE_REPLY_BYTES < INITIATION_BYTES);
};

/// Why a key file, a key or a handshake message is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// A key is not 64 hex digits.
    #[error("a key is 64 hex digits (32 bytes, as `pathlab bond key` writes), found {found}")]
    BadKeyText {
        /// What was found, described (never the secret itself).
        found: String,
    },
    /// A message has the wrong length for its kind.
    #[error("a {kind} has {expected} bytes, this one {len}")]
    Length {
        /// Which message.
        kind: &'static str,
        /// Its length.
        len: usize,
        /// The length it must have.
        expected: usize,
    },
    /// The message's mac1 is wrong: it was not meant for this end's key, or was altered.
    #[error("mac1 does not match: not for this key, or altered")]
    BadMac1,
    /// Noise refused the message (wrong keys or pre-shared key, or altered).
    #[error("the handshake failed: wrong keys, another pre-shared key, or an altered message")]
    Noise,
    /// The message decrypted but its payload is not valid.
    #[error("the handshake's payload is invalid: {0}")]
    Payload(&'static str),
}

/// A private X25519 key (a file of 64 hex digits, its owner's only), zeroed when dropped.
#[derive(Clone)]
pub struct SecretKey(Zeroizing<[u8; KEY_BYTES]>);

impl ZeroizeOnDrop for SecretKey {}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey(public {})", self.public_key())
    }
}

/// A public X25519 key (64 hex digits on the command line).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub [u8; KEY_BYTES]);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&pathlab_core::format::hex(&self.0))
    }
}

/// 64 hex digits as 32 bytes.
fn key_from_hex(text: &str) -> Result<Zeroizing<[u8; KEY_BYTES]>, HandshakeError> {
    pathlab_core::format::from_hex(text)
        .map(Zeroizing::new)
        .ok_or_else(|| HandshakeError::BadKeyText {
            found: if text.len() == 2 * KEY_BYTES {
                "64 characters that are not all hex digits".to_owned()
            } else {
                format!("{} characters", text.chars().count())
            },
        })
}

impl SecretKey {
    /// A fresh random key.
    pub fn generate(entropy: &mut dyn Entropy) -> SecretKey {
        let mut bytes = Zeroizing::new([0; KEY_BYTES]);
        entropy.fill(&mut *bytes);
        SecretKey(bytes)
    }

    /// The key in a key file: 64 hex digits, surrounding whitespace ignored.
    pub fn from_file_contents(contents: &[u8]) -> Result<SecretKey, HandshakeError> {
        let text = std::str::from_utf8(contents)
            .map_err(|_| HandshakeError::BadKeyText {
                found: "bytes that are not text".to_owned(),
            })?
            .trim();
        Ok(SecretKey(key_from_hex(text)?))
    }

    /// The key as a key file holds it (64 hex digits).
    pub fn to_hex(&self) -> String {
        pathlab_core::format::hex(&self.0[..])
    }

    /// Its public key.
    pub fn public_key(&self) -> PublicKey {
        let mut dh = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .expect("snow's default resolver has X25519");
        dh.set(&*self.0);
        let mut public = [0; KEY_BYTES];
        public.copy_from_slice(dh.pubkey());
        PublicKey(public)
    }

    /// A key derived from a pre-shared key (the simple mode's server key).
    fn from_psk(psk: &Psk, label: &[u8]) -> SecretKey {
        SecretKey(psk.derive(label))
    }
}

impl PublicKey {
    /// The key in 64 hex digits.
    pub fn from_hex(text: &str) -> Result<PublicKey, HandshakeError> {
        Ok(PublicKey(*key_from_hex(text.trim())?))
    }
}

/// The Noise pre-shared key (`psk2`): derived from `--psk`, or zeros without one.
fn psk2_of(psk: Option<&Psk>) -> Zeroizing<[u8; KEY_BYTES]> {
    psk.map_or_else(
        || Zeroizing::new([0; KEY_BYTES]),
        |psk| psk.derive(b"noise psk2"),
    )
}

/// What a client needs to open sessions.
#[derive(Debug, Clone)]
pub struct ClientKeys {
    /// Its static key.
    pub secret: SecretKey,
    /// The server's static public key.
    pub server: PublicKey,
    /// The Noise pre-shared key.
    psk2: Zeroizing<[u8; KEY_BYTES]>,
}

impl ClientKeys {
    /// The simple mode, one pre-shared key at both ends: the server's key derives from it,
    /// the client's is fresh (`secret`, random), and the pre-shared key is mixed in.
    pub fn from_psk(psk: &Psk, secret: SecretKey) -> ClientKeys {
        ClientKeys {
            secret,
            server: ServerKeys::from_psk(psk).secret.public_key(),
            psk2: psk2_of(Some(psk)),
        }
    }

    /// Static keys at both ends, and a pre-shared key mixed in if given.
    pub fn new(secret: SecretKey, server: PublicKey, psk: Option<&Psk>) -> ClientKeys {
        ClientKeys {
            secret,
            server,
            psk2: psk2_of(psk),
        }
    }
}

/// What a server needs to answer handshakes.
#[derive(Debug, Clone)]
pub struct ServerKeys {
    /// Its static key.
    pub secret: SecretKey,
    /// The Noise pre-shared key.
    psk2: Zeroizing<[u8; KEY_BYTES]>,
}

impl ServerKeys {
    /// The simple mode: the server's key derives from the pre-shared key.
    pub fn from_psk(psk: &Psk) -> ServerKeys {
        ServerKeys {
            secret: SecretKey::from_psk(psk, b"server static key"),
            psk2: psk2_of(Some(psk)),
        }
    }

    /// A static key, and a pre-shared key mixed in if given.
    pub fn new(secret: SecretKey, psk: Option<&Psk>) -> ServerKeys {
        ServerKeys {
            secret,
            psk2: psk2_of(psk),
        }
    }
}

impl Random for SeedStream {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        Entropy::fill(self, dest);
        Ok(())
    }
}

/// snow's default primitives, with randomness from a seed (a [`SeedStream`]: simulations
/// replay exactly and the driver's draws come from the OS).
struct SeededResolver {
    seed: Zeroizing<[u8; 32]>,
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeedStream::new(*self.seed)))
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// A builder of the Noise `pattern` whose randomness comes from `entropy`.
pub(crate) fn builder(pattern: &str, entropy: &mut dyn Entropy) -> snow::Builder<'static> {
    let mut seed = Zeroizing::new([0; 32]);
    entropy.fill(&mut *seed);
    let params: NoiseParams = pattern.parse().expect("a valid Noise pattern");
    snow::Builder::with_resolver(params, Box::new(SeededResolver { seed }))
}

/// HASH(label | key): the key of a mac1 or of the cookie encryption.
fn labelled_key(label: [u8; 8], key: &PublicKey) -> [u8; 32] {
    Blake2s256::new()
        .chain_update(label)
        .chain_update(key.0)
        .finalize()
        .into()
}

/// MAC(key, bytes): keyed BLAKE2s, 16 bytes.
fn mac(key: &[u8], bytes: &[u8]) -> [u8; MAC_BYTES] {
    let mut mac = <Blake2sMac<U16> as blake2::digest::KeyInit>::new_from_slice(key)
        .expect("key of 1-32 bytes");
    blake2::digest::Update::update(&mut mac, bytes);
    mac.finalize_fixed().into()
}

/// Compares in time that does not depend on where the bytes differ.
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where the macs lie in a message of `len` bytes: mac1 at `len - 32`, mac2 at `len - 16`.
fn mac_offsets(len: usize) -> (usize, usize) {
    (len - 2 * MAC_BYTES, len - MAC_BYTES)
}

/// Writes mac1 (and mac2 if a cookie is given, else zeros) at the end of `message`.
fn put_macs(message: &mut [u8], mac1_key: &[u8; 32], cookie: Option<&[u8; MAC_BYTES]>) {
    let (at1, at2) = mac_offsets(message.len());
    let mac1 = mac(mac1_key, &message[..at1]);
    message[at1..at2].copy_from_slice(&mac1);
    let mac2 = cookie.map_or([0; MAC_BYTES], |cookie| mac(cookie, &message[..at2]));
    message[at2..].copy_from_slice(&mac2);
}

/// The message's mac1 is the one `mac1_key` gives.
fn mac1_ok(message: &[u8], mac1_key: &[u8; 32]) -> bool {
    let (at1, at2) = mac_offsets(message.len());
    equal(&mac(mac1_key, &message[..at1]), &message[at1..at2])
}

/// A timestamp from unix nanoseconds.
pub fn timestamp(unix_ns: u64) -> [u8; TIMESTAMP_BYTES] {
    let mut bytes = [0; TIMESTAMP_BYTES];
    bytes[..8].copy_from_slice(&(unix_ns / 1_000_000_000).to_be_bytes());
    bytes[8..].copy_from_slice(&((unix_ns % 1_000_000_000) as u32).to_be_bytes());
    bytes
}

fn handshake_header(kind: Kind, index: u32) -> Header {
    Header {
        kind,
        line: 0,
        session: index,
        seq: 0,
    }
}

fn check_len(kind: &'static str, message: &[u8], expected: usize) -> Result<(), HandshakeError> {
    if message.len() == expected {
        Ok(())
    } else {
        Err(HandshakeError::Length {
            kind,
            len: message.len(),
            expected,
        })
    }
}

/// A client's handshake under way: its Initiation was sent, the Response is awaited.
pub struct Initiation {
    state: snow::HandshakeState,
    /// The sender index the Response must echo.
    pub index: u32,
    /// The Initiation's mac1: a CookieReply's associated data.
    mac1: [u8; MAC_BYTES],
    /// The client's public key: the Response's mac1 key derives from it.
    mac1_key: [u8; 32],
}

impl std::fmt::Debug for Initiation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Initiation")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Initiation {
    /// Starts a handshake: writes the Initiation (sender `index`, the client's `unix_ns`
    /// clock, `lines` lines, `cookie` if the server asked for one) into `out`, cleared first.
    pub fn start(
        keys: &ClientKeys,
        index: u32,
        unix_ns: u64,
        lines: u8,
        cookie: Option<&[u8; MAC_BYTES]>,
        entropy: &mut dyn Entropy,
        out: &mut Vec<u8>,
    ) -> Initiation {
        let mut state = builder(PATTERN, entropy)
            .local_private_key(&*keys.secret.0)
            .and_then(|b| b.remote_public_key(&keys.server.0))
            .and_then(|b| b.psk(2, &keys.psk2))
            .and_then(|b| b.prologue(PROLOGUE))
            .and_then(snow::Builder::build_initiator)
            .expect("keys of the pattern's sizes");
        let mut payload = [0; INITIATION_PAYLOAD_BYTES];
        payload[..TIMESTAMP_BYTES].copy_from_slice(&timestamp(unix_ns));
        payload[TIMESTAMP_BYTES] = lines;
        out.clear();
        handshake_header(Kind::Hello, index).encode(out);
        out.resize(INITIATION_BYTES, 0);
        let written = state
            .write_message(&payload, &mut out[HEADER_BYTES..])
            .expect("room for the first message");
        debug_assert_eq!(written, INITIATION_NOISE_BYTES);
        put_macs(out, &labelled_key(*b"mac1----", &keys.server), cookie);
        let (at1, at2) = mac_offsets(out.len());
        Initiation {
            state,
            index,
            mac1: out[at1..at2].try_into().expect("16 bytes"),
            mac1_key: labelled_key(*b"mac1----", &keys.secret.public_key()),
        }
    }

    /// Ends the handshake with the server's Response: the session id and its keys.
    pub fn finish(mut self, response: &[u8]) -> Result<(u32, SessionKeys), HandshakeError> {
        check_len("Response", response, RESPONSE_BYTES)?;
        if !mac1_ok(response, &self.mac1_key) {
            return Err(HandshakeError::BadMac1);
        }
        let mut payload = [0; RESPONSE_NOISE_BYTES];
        let len = self
            .state
            .read_message(
                &response[HEADER_BYTES..HEADER_BYTES + RESPONSE_NOISE_BYTES],
                &mut payload,
            )
            .map_err(|_| HandshakeError::Noise)?;
        if len != RESPONSE_PAYLOAD_BYTES {
            return Err(HandshakeError::Payload("the session id must be 4 bytes"));
        }
        let session = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
        if session == 0 {
            return Err(HandshakeError::Payload("session 0 is never given"));
        }
        Ok((
            session,
            SessionKeys::from_split_wiping(self.state.dangerously_get_raw_split(), true),
        ))
    }

    /// The cookie in a CookieReply to this Initiation.
    pub fn open_cookie(
        &self,
        server: &PublicKey,
        reply: &[u8],
    ) -> Result<[u8; MAC_BYTES], HandshakeError> {
        open_cookie(server, &self.mac1, reply)
    }
}

/// Decrypts the cookie of a CookieReply to the Initiation whose mac1 was `mac1`.
fn open_cookie(
    server: &PublicKey,
    mac1: &[u8; MAC_BYTES],
    reply: &[u8],
) -> Result<[u8; MAC_BYTES], HandshakeError> {
    check_len("CookieReply", reply, COOKIE_REPLY_BYTES)?;
    let cipher = XChaCha20Poly1305::new(&labelled_key(*b"cookie--", server).into());
    let nonce = &reply[HEADER_BYTES..HEADER_BYTES + XNONCE_BYTES];
    let mut cookie = [0; MAC_BYTES];
    cookie.copy_from_slice(&reply[HEADER_BYTES + XNONCE_BYTES..][..MAC_BYTES]);
    let tag = &reply[HEADER_BYTES + XNONCE_BYTES + MAC_BYTES..];
    cipher
        .decrypt_in_place_detached(nonce.into(), mac1, &mut cookie, tag.into())
        .map_err(|_| HandshakeError::Noise)?;
    Ok(cookie)
}

/// An Initiation the server decrypted: who sent it and what it asks.
pub struct Incoming {
    state: snow::HandshakeState,
    /// The client's static public key.
    pub peer: PublicKey,
    /// Its timestamp (compare as bytes).
    pub timestamp: [u8; TIMESTAMP_BYTES],
    /// How many lines the client has (at least 1).
    pub lines: u8,
    /// The sender index to echo.
    pub index: u32,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer)
            .field("lines", &self.lines)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Incoming {
    /// Accepts: writes the Response giving `session` into `out` (cleared first) and returns
    /// the session's keys.
    pub fn respond(mut self, session: u32, out: &mut Vec<u8>) -> SessionKeys {
        out.clear();
        handshake_header(Kind::Welcome, self.index).encode(out);
        out.resize(RESPONSE_BYTES, 0);
        let written = self
            .state
            .write_message(&session.to_be_bytes(), &mut out[HEADER_BYTES..])
            .expect("room for the second message");
        debug_assert_eq!(written, RESPONSE_NOISE_BYTES);
        put_macs(out, &labelled_key(*b"mac1----", &self.peer), None);
        SessionKeys::from_split_wiping(self.state.dangerously_get_raw_split(), false)
    }
}

/// The server's side of handshakes: its key, the mac checks and the cookies.
pub struct Responder {
    keys: ServerKeys,
    public: PublicKey,
    mac1_key: [u8; 32],
    cookie_key: [u8; 32],
    cookie_secret: Zeroizing<[u8; 32]>,
    /// When the cookie secret was drawn (`None`: not yet).
    secret_since: Option<Instant>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// A responder with the server's keys.
    pub fn new(keys: ServerKeys) -> Responder {
        let public = keys.secret.public_key();
        Responder {
            mac1_key: labelled_key(*b"mac1----", &public),
            cookie_key: labelled_key(*b"cookie--", &public),
            cookie_secret: Zeroizing::new([0; 32]),
            secret_since: None,
            public,
            keys,
        }
    }

    /// The server's public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// Whether `message` is an Initiation of the right length with a valid mac1: checked
    /// before anything costly.
    pub fn check_mac1(&self, message: &[u8]) -> Result<(), HandshakeError> {
        check_len("Initiation", message, INITIATION_BYTES)?;
        if mac1_ok(message, &self.mac1_key) {
            Ok(())
        } else {
            Err(HandshakeError::BadMac1)
        }
    }

    /// The cookie of source `from` at `now`, drawing a new secret when the old one is two
    /// minutes old.
    fn cookie(&mut self, now: Instant, from: &[u8], entropy: &mut dyn Entropy) -> [u8; 16] {
        let stale = self
            .secret_since
            .is_none_or(|since| now.saturating_since(since) >= COOKIE_SECRET_LIFETIME);
        if stale {
            entropy.fill(&mut *self.cookie_secret);
            self.secret_since = Some(now);
        }
        mac(&*self.cookie_secret, from)
    }

    /// Whether an Initiation (whose mac1 was checked) carries the mac2 of `from`'s current
    /// cookie.
    pub fn check_mac2(
        &mut self,
        now: Instant,
        from: &[u8],
        message: &[u8],
        entropy: &mut dyn Entropy,
    ) -> bool {
        let cookie = self.cookie(now, from, entropy);
        let (_, at2) = mac_offsets(message.len());
        equal(&mac(&cookie, &message[..at2]), &message[at2..])
    }

    /// Writes the CookieReply to an Initiation from `from` into `out` (cleared first).
    pub fn cookie_reply(
        &mut self,
        now: Instant,
        from: &[u8],
        message: &[u8],
        entropy: &mut dyn Entropy,
        out: &mut Vec<u8>,
    ) {
        let mut cookie = self.cookie(now, from, entropy);
        let (at1, at2) = mac_offsets(message.len());
        let index = Header::decode(message).map_or(0, |h| h.session);
        let mut nonce = [0; XNONCE_BYTES];
        entropy.fill(&mut nonce);
        let cipher = XChaCha20Poly1305::new(&self.cookie_key.into());
        let tag = cipher
            .encrypt_in_place_detached((&nonce).into(), &message[at1..at2], &mut cookie)
            .expect("16 bytes seal");
        out.clear();
        handshake_header(Kind::Cookie, index).encode(out);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&cookie);
        out.extend_from_slice(&tag);
    }

    /// Decrypts an Initiation (two Diffie-Hellman operations: check mac1 first).
    pub fn read_initiation(
        &self,
        message: &[u8],
        entropy: &mut dyn Entropy,
    ) -> Result<Incoming, HandshakeError> {
        check_len("Initiation", message, INITIATION_BYTES)?;
        let header = Header::decode(message).map_err(|_| HandshakeError::Noise)?;
        let mut state = builder(PATTERN, entropy)
            .local_private_key(&*self.keys.secret.0)
            .and_then(|b| b.psk(2, &self.keys.psk2))
            .and_then(|b| b.prologue(PROLOGUE))
            .and_then(snow::Builder::build_responder)
            .expect("keys of the pattern's sizes");
        let mut payload = [0; INITIATION_NOISE_BYTES];
        let len = state
            .read_message(
                &message[HEADER_BYTES..HEADER_BYTES + INITIATION_NOISE_BYTES],
                &mut payload,
            )
            .map_err(|_| HandshakeError::Noise)?;
        if len != INITIATION_PAYLOAD_BYTES {
            return Err(HandshakeError::Payload(
                "an Initiation's payload is 13 bytes",
            ));
        }
        let lines = payload[TIMESTAMP_BYTES];
        if lines == 0 {
            return Err(HandshakeError::Payload(
                "a client announces at least 1 line",
            ));
        }
        let mut peer = [0; KEY_BYTES];
        peer.copy_from_slice(state.get_remote_static().ok_or(HandshakeError::Noise)?);
        Ok(Incoming {
            state,
            peer: PublicKey(peer),
            timestamp: payload[..TIMESTAMP_BYTES].try_into().expect("12 bytes"),
            lines,
            index: header.session,
        })
    }
}

/// A digest of an Initiation's Noise part: copies of one Initiation (on every line, or a
/// retransmission) have the same, and get the same Response without a second handshake.
pub fn initiation_digest(message: &[u8]) -> [u8; 32] {
    Blake2s256::digest(&message[HEADER_BYTES.min(message.len())..]).into()
}

/// Bytes of an address as the cookie binds it: IP and port.
pub fn address_bytes(address: std::net::SocketAddr) -> Vec<u8> {
    let mut bytes = match address.ip() {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    bytes.extend_from_slice(&address.port().to_be_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto;
    use crate::entropy::SeededEntropy;
    use pathlab_core::rng::Rng;

    fn entropy(seed: u64) -> SeededEntropy {
        SeededEntropy(Rng::seed_from(seed))
    }

    fn psk() -> Psk {
        Psk::from_file_contents(b"q0Yv3C1nX7d6m2Jx9oU4b8Ws5Lk0Tg1Rz2Ea3Hf4Ip8=\n").unwrap()
    }

    fn pair(seed: u64) -> (ClientKeys, Responder) {
        let mut e = entropy(seed);
        let server = SecretKey::generate(&mut e);
        let client = SecretKey::generate(&mut e);
        (
            ClientKeys::new(client, server.public_key(), None),
            Responder::new(ServerKeys::new(server, None)),
        )
    }

    /// Seals with one end's keys and opens with the other's.
    fn talk(from: &SessionKeys, to: &SessionKeys) -> bool {
        let header = Header {
            kind: Kind::Data,
            line: 0,
            session: 9,
            seq: 1,
        };
        let mut buf = vec![0; HEADER_BYTES];
        buf.extend_from_slice(b"inner packet");
        crypto::seal(&from.seal, &header, &mut buf).unwrap();
        crypto::open(&to.open, &mut buf).is_ok_and(|(_, body)| body == b"inner packet")
    }

    /// Compiles only if the type wipes its secret when dropped.
    fn wipes_on_drop<T: ZeroizeOnDrop>() {}

    #[test]
    fn static_keys_and_seeds_are_zeroed_when_dropped() {
        wipes_on_drop::<SecretKey>();
        wipes_on_drop::<SeedStream>();
        // snow's handshake state is not wiped by snow (0.10 has no zeroize): what it
        // holds is dropped as it is; the keys it splits into are wiped (`from_split_wiping`).
        let mut key = SecretKey::generate(&mut SeededEntropy(Rng::seed_from(3)));
        assert_ne!(*key.0, [0; KEY_BYTES]);
        zeroize::Zeroize::zeroize(&mut key.0);
        assert_eq!(*key.0, [0; KEY_BYTES]);
    }

    #[test]
    fn a_handshake_gives_both_ends_matching_keys_and_the_documented_sizes() {
        let (client, mut responder) = pair(1);
        let mut e = entropy(2);
        let mut message = Vec::new();
        let initiation = Initiation::start(
            &client,
            77,
            1_700_000_000_123_456_789,
            3,
            None,
            &mut e,
            &mut message,
        );
        assert_eq!(message.len(), 153);
        responder.check_mac1(&message).unwrap();
        let incoming = responder.read_initiation(&message, &mut e).unwrap();
        assert_eq!(incoming.peer, client.secret.public_key());
        assert_eq!(incoming.lines, 3);
        assert_eq!(incoming.index, 77);
        assert_eq!(incoming.timestamp, timestamp(1_700_000_000_123_456_789));
        let mut response = Vec::new();
        let server_keys = incoming.respond(0xabcd, &mut response);
        assert_eq!(response.len(), 96);
        assert_eq!(Header::decode(&response).unwrap().session, 77);
        let (session, client_keys) = initiation.finish(&response).unwrap();
        assert_eq!(session, 0xabcd);
        assert!(talk(&client_keys, &server_keys));
        assert!(talk(&server_keys, &client_keys));
        // One direction's key never opens the other's datagrams (a reflection).
        assert!(!talk(&client_keys, &client_keys));
        // mac2 is checked only under load; without a cookie it is zeros.
        assert!(!responder.check_mac2(Instant::ZERO, &[1, 2], &message, &mut e));
    }

    #[test]
    fn another_server_key_or_psk_fails_before_or_at_the_first_message() {
        let (client, _) = pair(1);
        let (_, other) = pair(5);
        let mut e = entropy(3);
        let mut message = Vec::new();
        let _ = Initiation::start(&client, 1, 1, 1, None, &mut e, &mut message);
        // A server with another key: mac1 (keyed by its public key) refuses it, no DH.
        assert_eq!(other.check_mac1(&message), Err(HandshakeError::BadMac1));
        // The right key but another pre-shared key: psk2 is mixed in by the second message,
        // so the client refuses the Response (and the server's session never confirms).
        let mut e2 = entropy(1);
        let server = SecretKey::generate(&mut e2);
        let with_psk = Responder::new(ServerKeys::new(server, Some(&psk())));
        let initiation = Initiation::start(&client, 1, 1, 1, None, &mut e, &mut message);
        with_psk.check_mac1(&message).unwrap();
        let incoming = with_psk.read_initiation(&message, &mut e).unwrap();
        let mut response = Vec::new();
        let _ = incoming.respond(3, &mut response);
        assert_eq!(
            initiation.finish(&response).unwrap_err(),
            HandshakeError::Noise
        );
    }

    #[test]
    fn every_altered_byte_of_an_initiation_or_response_is_refused() {
        let (client, responder) = pair(1);
        let mut e = entropy(4);
        let mut message = Vec::new();
        Initiation::start(&client, 1, 1, 1, None, &mut e, &mut message);
        // Every byte up to mac2 is covered by mac1 (mac2 is judged only under load).
        for i in 0..INITIATION_BYTES - MAC_BYTES {
            let mut altered = message.clone();
            altered[i] ^= 0x01;
            assert!(responder.check_mac1(&altered).is_err(), "byte {i}");
        }
        let mut response = Vec::new();
        let incoming = responder.read_initiation(&message, &mut e).unwrap();
        let _ = incoming.respond(5, &mut response);
        for i in HEADER_BYTES..RESPONSE_BYTES - MAC_BYTES {
            let mut e = entropy(4);
            let mut again = Vec::new();
            let initiation = Initiation::start(&client, 1, 1, 1, None, &mut e, &mut again);
            let incoming = responder.read_initiation(&again, &mut e).unwrap();
            let mut response = Vec::new();
            let _ = incoming.respond(5, &mut response);
            response[i] ^= 0x80;
            assert!(initiation.finish(&response).is_err(), "byte {i}");
        }
    }

    #[test]
    fn a_cookie_reply_is_smaller_than_its_cause_and_its_cookie_makes_mac2() {
        let (client, mut responder) = pair(1);
        let mut e = entropy(6);
        let from = address_bytes("198.18.0.9:4000".parse().unwrap());
        let mut message = Vec::new();
        let initiation = Initiation::start(&client, 1, 1, 1, None, &mut e, &mut message);
        let mut reply = Vec::new();
        responder.cookie_reply(ms(0), &from, &message, &mut e, &mut reply);
        assert_eq!(reply.len(), COOKIE_REPLY_BYTES);
        assert!(reply.len() < message.len());
        let cookie = initiation.open_cookie(&client.server, &reply).unwrap();
        Initiation::start(&client, 2, 2, 1, Some(&cookie), &mut e, &mut message);
        responder.check_mac1(&message).unwrap();
        assert!(responder.check_mac2(ms(1_000), &from, &message, &mut e));
        // Bound to the source address and port.
        let elsewhere = address_bytes("198.18.0.9:4001".parse().unwrap());
        assert!(!responder.check_mac2(ms(1_000), &elsewhere, &message, &mut e));
        // The secret changes every two minutes: an old cookie stops working.
        assert!(!responder.check_mac2(ms(121_000), &from, &message, &mut e));
        // A reply to another Initiation (another mac1) does not open.
        let mut other = Vec::new();
        let second = Initiation::start(&client, 3, 3, 1, None, &mut e, &mut other);
        assert!(second.open_cookie(&client.server, &reply).is_err());
    }

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    #[test]
    fn timestamps_compare_as_bytes_as_instants_do() {
        let instants = [
            0,
            999_999_999,
            1_000_000_000,
            1_700_000_000_000_000_001,
            u64::MAX,
        ];
        for pair in instants.windows(2) {
            assert!(timestamp(pair[0]) < timestamp(pair[1]));
        }
    }

    #[test]
    fn keys_read_from_hex_files_and_the_simple_mode_agrees_on_the_server_key() {
        let mut e = entropy(8);
        let secret = SecretKey::generate(&mut e);
        let text = format!("{}\n", secret.to_hex());
        let read = SecretKey::from_file_contents(text.as_bytes()).unwrap();
        assert_eq!(read.public_key(), secret.public_key());
        assert!(SecretKey::from_file_contents(b"abc").is_err());
        assert!(SecretKey::from_file_contents(&[b'g'; 64]).is_err());
        let public = secret.public_key();
        assert_eq!(PublicKey::from_hex(&public.to_string()).unwrap(), public);
        // Both ends of the simple mode derive the same server key from the PSK.
        let client = ClientKeys::from_psk(&psk(), SecretKey::generate(&mut e));
        let server = Responder::new(ServerKeys::from_psk(&psk()));
        assert_eq!(client.server, server.public_key());
        let mut message = Vec::new();
        Initiation::start(&client, 1, 1, 1, None, &mut e, &mut message);
        server.read_initiation(&message, &mut e).unwrap();
    }
}
