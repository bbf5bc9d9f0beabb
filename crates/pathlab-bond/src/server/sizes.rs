//! A [`Server`]'s entries, for [`crate::sizes`].

use super::Server;
use crate::sizes::StateSizes;

impl Server {
    /// The entries of every growable table, map and queue the server holds
    /// ([`crate::sizes`]): its own (keys known, sessions and their Initiations, learnt
    /// routes, datagrams waiting, the polling order, handshake sources, replay floors,
    /// each session's line addresses) and its sessions' ([`crate::Bond::state_sizes`],
    /// added together under their names). The listed peers and their prefixes are the
    /// configuration's.
    pub fn state_sizes(&self) -> StateSizes {
        let mut sizes = StateSizes::new();
        sizes.add("server.peers", self.peers.len());
        sizes.add("server.sessions", self.sessions.len());
        sizes.add("server.by_initiation", self.by_initiation.len());
        sizes.add("server.routes", self.routes.len());
        sizes.add("server.outbox", self.outbox.len());
        sizes.add("server.poll_order", self.poll_order.len());
        sizes.add("server.handshake_sources", self.limiter.len());
        self.floors.state_sizes(&mut sizes);
        for session in self.sessions.values() {
            sizes.add("server.session_remotes", session.remotes.len());
            for (name, len) in session.bond.state_sizes().iter() {
                sizes.add(name, len);
            }
        }
        sizes
    }
}
