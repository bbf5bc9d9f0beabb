//! Where the protocol's randomness comes from: a trait the driver implements with the OS's
//! CSPRNG and the simulations with a seeded generator.

use blake2::{Blake2s256, Digest as _};
use zeroize::{ZeroizeOnDrop, Zeroizing};

/// Randomness the tunnel needs (keys, nonces, session ids): the driver gives the OS's
/// CSPRNG, tests a seeded generator.
pub trait Entropy: std::fmt::Debug + Send {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
}

/// A random id, neither 0 nor one `taken` says is in use (an attempt's, so that an answer
/// names one attempt).
pub fn fresh_id(entropy: &mut dyn Entropy, taken: impl Fn(u32) -> bool) -> u32 {
    loop {
        let mut bytes = [0; 4];
        entropy.fill(&mut bytes);
        let id = u32::from_be_bytes(bytes);
        if id != 0 && !taken(id) {
            return id;
        }
    }
}

/// Seeded, not cryptographic: for simulations and tests only.
#[derive(Debug)]
pub struct SeededEntropy(pub pathlab_core::rng::Rng);

impl Entropy for SeededEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// A seed drawn once from an [`Entropy`] and expanded with BLAKE2s in counter mode: the
/// randomness of one handshake (snow's), or of a server session's rekeys, drawn up front
/// from the driver's OS randomness (or a simulation's seed). The seed is zeroed when
/// dropped.
#[derive(Debug)]
pub struct SeedStream {
    seed: Zeroizing<[u8; 32]>,
    counter: u64,
}

impl ZeroizeOnDrop for SeedStream {}

impl SeedStream {
    /// The stream of `seed`.
    pub fn new(seed: [u8; 32]) -> SeedStream {
        SeedStream {
            seed: Zeroizing::new(seed),
            counter: 0,
        }
    }

    /// A stream seeded with 32 bytes of `entropy`.
    pub fn draw(entropy: &mut dyn Entropy) -> SeedStream {
        let mut stream = SeedStream::new([0; 32]);
        entropy.fill(&mut *stream.seed);
        stream
    }
}

impl Entropy for SeedStream {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(32) {
            let block = Zeroizing::new(<[u8; 32]>::from(
                Blake2s256::new()
                    .chain_update(*self.seed)
                    .chain_update(self.counter.to_be_bytes())
                    .finalize(),
            ));
            self.counter += 1;
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
    }
}
