//! The server a measurement client command talks to: its address and the key to
//! authenticate with, as the command line gave them (the key already read from its file).

use pathlab_probe::auth::Key;

use crate::{Client, MeasureError, CONNECT_TIMEOUT};

/// A pathlab server to measure against: every client command's configuration holds one,
/// and each test of a run opens a fresh control connection to it.
#[derive(Debug, Clone)]
pub struct ServerTarget {
    /// The server: a name or an address, with or without `:port`.
    pub host: String,
    /// The pre-shared key to authenticate with; none when the server requires none.
    pub key: Option<Key>,
}

impl ServerTarget {
    /// The server at `host`, reached with `key`.
    pub fn new(host: impl Into<String>, key: Option<Key>) -> ServerTarget {
        ServerTarget {
            host: host.into(),
            key,
        }
    }

    /// Opens a control connection, giving up after [`CONNECT_TIMEOUT`].
    pub fn connect(&self) -> Result<Client, MeasureError> {
        Client::connect(&self.host, self.key.clone(), CONNECT_TIMEOUT)
    }
}
