//! A server on the loopback interface for the unit tests of the client commands' runs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pathlab_probe::control::Limits;

use crate::{Server, ServerConfig, ServerTarget};

/// A server answering on 127.0.0.1 in a thread of its own, stopped when dropped.
pub(crate) struct Running {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Binds a server with generous limits and no key on a free port, and runs it.
    pub(crate) fn start() -> Running {
        let limits = Limits {
            max_rate_bps: 1_000_000_000,
            max_duration_ns: 60_000_000_000,
            max_tests: 16,
            max_test_memory: 64 << 20,
        };
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let server = Server::bind(ServerConfig::new(listen, limits, None)).expect("bind");
        let address = server.local_addr().expect("local address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || server.run(|| stopped.load(Ordering::SeqCst)));
        Running {
            address,
            stop,
            thread: Some(thread),
        }
    }

    /// The server, for a client command's configuration.
    pub(crate) fn target(&self) -> ServerTarget {
        ServerTarget::new(self.address.to_string(), None)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A loopback address where no server listens (a port bound, then let go): connecting to
/// it is refused at once.
pub(crate) fn nobody() -> ServerTarget {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("local address");
    drop(listener);
    ServerTarget::new(address.to_string(), None)
}
