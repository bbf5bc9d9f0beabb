//! Where the protocol's randomness comes from: a trait the driver implements with the OS's
//! CSPRNG and the simulations with a seeded generator.

/// Randomness the tunnel needs (keys, nonces, session ids): the driver gives the OS's
/// CSPRNG, tests a seeded generator.
pub trait Entropy: std::fmt::Debug + Send {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
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
