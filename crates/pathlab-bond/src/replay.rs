//! Replay floors that outlive the server's table of peers (the simple mode's bound).
//!
//! The server refuses an Initiation whose timestamp is not newer than the greatest it
//! accepted from that key. In the simple mode (`--psk`) any key may connect, so the server
//! keeps what it learnt of a bounded number of keys and forgets the least recently used;
//! without more, forgetting a key forgot its greatest timestamp, and a captured Initiation
//! of that key opened a session again (evicting a real client's unconfirmed one).
//! [`ReplayFloors`] keeps, for every key the table forgot, a *floor*: a timestamp at least
//! as great as any the server accepted from it. An Initiation of a forgotten key must be
//! newer than its floor.
//!
//! Why the bound is sound, in bounded memory: the floors are kept in two layers.
//!
//! - **Exact**: the last [`EXACT_FLOORS`] keys forgotten, each with its own greatest
//!   timestamp.
//! - **Folded**: a key pushed out of the exact layer folds its timestamp into one of
//!   [`FOLDED_SLOTS`] slots (chosen by a keyed hash of the key, the hash key drawn from the
//!   server's entropy) by taking the maximum. A slot's value is therefore at least every
//!   timestamp ever folded into it, this key's among them.
//!
//! A key's floor is its exact value if it has one, else its slot's: never less than any
//! timestamp the server accepted from it, whatever was forgotten. So no Initiation the
//! server accepted (and no older one of the same key) is accepted again while the server
//! runs, however many other keys went through the table since: what an attacker who
//! captured Initiations can replay is only one the server never received (it is then
//! new to the server, as a late datagram would be), or anything after a restart (the
//! floors live in memory; such a session never confirms, having no keys behind it, and
//! expires after the unconfirmed timeout).
//!
//! What it costs: a folded slot may hold another key's later timestamp, so a forgotten key
//! that comes back (only the same client's process keeps its key: the simple mode's
//! clients draw a fresh key per run) with a clock behind that other key's last handshake is
//! refused until its clock passes it. With clocks about right that never happens (the
//! other key's timestamp is in the past), and only keys pushed out of the exact layer
//! (more than [`EXACT_FLOORS`] keys forgotten since) share slots.

use std::collections::{HashMap, VecDeque};

use blake2::{Blake2s256, Digest as _};

use crate::handshake::{PublicKey, TIMESTAMP_BYTES};

/// An Initiation's timestamp as its bytes compare (unix seconds, nanoseconds; big-endian).
pub type Timestamp = [u8; TIMESTAMP_BYTES];

/// Keys forgotten whose floors are kept exactly (about 100 bytes each).
pub const EXACT_FLOORS: usize = 8_192;
/// Slots that hold the folded floors of keys forgotten before those (12 bytes each).
pub const FOLDED_SLOTS: usize = 8_192;

/// The floors of the keys a server forgot (module doc: why they bound every replay).
#[derive(Debug, Clone)]
pub struct ReplayFloors {
    exact: HashMap<PublicKey, Timestamp>,
    /// The exact layer's keys, oldest first (each once: a key remembered again keeps its
    /// place and takes the greater timestamp).
    order: VecDeque<PublicKey>,
    folded: Vec<Timestamp>,
    hash_key: [u8; 32],
}

impl ReplayFloors {
    /// No floors; `hash_key` keys the choice of slots (random, so that no one can aim keys
    /// at another's slot).
    pub fn new(hash_key: [u8; 32]) -> ReplayFloors {
        ReplayFloors {
            exact: HashMap::new(),
            order: VecDeque::new(),
            folded: vec![[0; TIMESTAMP_BYTES]; FOLDED_SLOTS],
            hash_key,
        }
    }

    /// The floor of `key`: every Initiation of it the server accepted before forgetting it
    /// has a timestamp not greater than this (zeros for a key never forgotten, unless its
    /// slot holds another's).
    pub fn floor(&self, key: &PublicKey) -> Timestamp {
        match self.exact.get(key) {
            Some(floor) => *floor,
            None => self.folded[self.slot(key)],
        }
    }

    /// Remembers that the server forgot `key`, whose greatest accepted timestamp was
    /// `greatest`.
    pub fn remember(&mut self, key: PublicKey, greatest: Timestamp) {
        if let Some(floor) = self.exact.get_mut(&key) {
            *floor = (*floor).max(greatest);
            return;
        }
        if self.order.len() >= EXACT_FLOORS {
            if let Some(oldest) = self.order.pop_front() {
                if let Some(floor) = self.exact.remove(&oldest) {
                    let slot = self.slot(&oldest);
                    self.folded[slot] = self.folded[slot].max(floor);
                }
            }
        }
        self.exact.insert(key, greatest);
        self.order.push_back(key);
    }

    /// Keys whose floors are kept exactly (at most [`EXACT_FLOORS`]).
    pub fn exact_len(&self) -> usize {
        self.exact.len()
    }

    fn slot(&self, key: &PublicKey) -> usize {
        let digest = Blake2s256::new()
            .chain_update(self.hash_key)
            .chain_update(key.0)
            .finalize();
        let first: [u8; 8] = digest[..8].try_into().expect("32 bytes");
        (u64::from_be_bytes(first) % FOLDED_SLOTS as u64) as usize
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): the keys whose floors are kept
    /// exactly and their order (at most [`EXACT_FLOORS`]; the folded slots are a fixed
    /// array).
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("server.replay_exact", self.exact.len());
        sizes.add("server.replay_order", self.order.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::timestamp;
    use pathlab_core::rng::Rng;

    fn key(rng: &mut Rng) -> PublicKey {
        let mut bytes = [0; 32];
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_be_bytes());
        }
        PublicKey(bytes)
    }

    /// A million keys forgotten: the memory stays at its bound, and every key's floor is at
    /// least what the server had accepted from it (checked for all of them, folded or not).
    #[test]
    fn a_million_forgotten_keys_keep_every_floor_within_a_bounded_table() {
        let mut rng = Rng::seed_from(40);
        let mut floors = ReplayFloors::new([7; 32]);
        let mut forgotten = Vec::new();
        for n in 0..1_000_000u64 {
            let k = key(&mut rng);
            let greatest = timestamp(1_700_000_000_000_000_000 + rng.below(1 << 40) + n);
            floors.remember(k, greatest);
            forgotten.push((k, greatest));
            assert!(floors.exact_len() <= EXACT_FLOORS);
        }
        assert_eq!(floors.exact_len(), EXACT_FLOORS);
        assert_eq!(floors.order.len(), EXACT_FLOORS);
        assert_eq!(floors.folded.len(), FOLDED_SLOTS);
        for (k, greatest) in &forgotten {
            assert!(floors.floor(k) >= *greatest, "a forgotten key's floor fell");
        }
        // A key never seen: its slot's floor, a past timestamp, below any fresh clock.
        let fresh = key(&mut rng);
        assert!(floors.floor(&fresh) < timestamp(1_800_000_000_000_000_000));
    }

    #[test]
    fn a_key_remembered_again_keeps_the_greater_floor_and_one_place() {
        let mut floors = ReplayFloors::new([1; 32]);
        let k = PublicKey([3; 32]);
        floors.remember(k, timestamp(20));
        floors.remember(k, timestamp(10));
        assert_eq!(floors.floor(&k), timestamp(20));
        floors.remember(k, timestamp(30));
        assert_eq!(floors.floor(&k), timestamp(30));
        assert_eq!((floors.exact_len(), floors.order.len()), (1, 1));
        assert_eq!(floors.floor(&PublicKey([4; 32])), [0; TIMESTAMP_BYTES]);
    }
}
