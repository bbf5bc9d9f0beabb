//! A [`Bond`]'s entries, for [`crate::sizes`].

use super::{Bond, State};
use crate::sizes::StateSizes;

impl Bond {
    /// The entries of every growable table, map, queue and buffer this end holds
    /// ([`crate::sizes`]): its lines', reorder buffer's, fair queue's, header compression's
    /// (both ways) and key ring's, the packets ready for the TUN side, the rekey frames
    /// waiting for a datagram (one slot per line), the header acknowledgements being
    /// framed, and a client's handshake and rekey attempts (at most two each). The
    /// buffers reused for one packet at a time (`coded`) are bounded by the largest.
    pub fn state_sizes(&self) -> StateSizes {
        let mut sizes = StateSizes::new();
        sizes.add("bond.lines", self.lines.len());
        for line in &self.lines {
            line.state_sizes(&mut sizes);
        }
        self.reorder.state_sizes(&mut sizes);
        self.fair.state_sizes(&mut sizes);
        self.compressor.state_sizes(&mut sizes);
        self.decompressor.state_sizes(&mut sizes);
        if let State::Open { keys, .. } = &self.state {
            keys.state_sizes(&mut sizes);
        }
        sizes.add("bond.delivered", self.delivered.len());
        sizes.add("bond.control_out", self.control_out.len());
        sizes.add("bond.acks", self.acks.len());
        if let Some(client) = &self.client {
            let handshake = client.handshake.as_ref().map_or(0, |h| h.attempts.len());
            sizes.add("client.handshake_attempts", handshake);
            let rekey = client
                .rekeying
                .as_ref()
                .map_or(0, super::rekeying::Rekeying::attempts);
            sizes.add("client.rekey_attempts", rekey);
        }
        sizes
    }
}
