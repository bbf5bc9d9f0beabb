//! TCP sockets set up before they connect or listen: buffer sizes, MSS and congestion
//! control, which the handshake fixes (the window scale follows the receive buffer, the
//! MSS is announced in it) or which must precede the first byte.
//!
//! The one set of these helpers: the measurement streams (`pathlab-probe-driver`) and the
//! fixtures of the tests and benchmarks ([`crate::testing`], [`crate::topology`]) all
//! open their sockets here. The option calls themselves are [`crate::sys`]'s.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use crate::sys;

/// How hard a socket asks for its buffer sizes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BufferLimit {
    /// As any program does (`SO_SNDBUF`, `SO_RCVBUF`): the kernel caps the request at
    /// `net.core.wmem_max` and `rmem_max`. What a measurement asks for, so that it gets
    /// what the host's settings give a program.
    #[default]
    Capped,
    /// Past those maxima with CAP_NET_ADMIN (`SO_SNDBUFFORCE`, `SO_RCVBUFFORCE`), else as
    /// much as they allow: for fixtures that need a window whatever the host's sysctls.
    Forced,
}

/// The options of a TCP socket, set before it connects or listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpSocketOptions {
    /// The send buffer asked for, bytes (the kernel doubles it for its bookkeeping).
    pub send_buffer_bytes: Option<usize>,
    /// The receive buffer asked for, bytes: on a listener, set before it listens, so the
    /// window scale of its connections follows it.
    pub receive_buffer_bytes: Option<usize>,
    /// How hard the buffers are asked for.
    pub buffer_limit: BufferLimit,
    /// The maximum segment size (`TCP_MAXSEG`), bytes: Linux takes 88 to 32767.
    pub mss_bytes: Option<u32>,
    /// The congestion control (`TCP_CONGESTION`): `cubic`, `reno`, `bbr`.
    pub congestion: Option<String>,
}

impl TcpSocketOptions {
    /// Sets the options given on `fd`, buffers first; a refused MSS or congestion control
    /// is an error that names the value.
    pub fn apply(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        if let Some(bytes) = self.send_buffer_bytes {
            match self.buffer_limit {
                BufferLimit::Capped => sys::set_send_buffer(fd, bytes)?,
                BufferLimit::Forced => sys::grow_send_buffer(fd, bytes).map(drop)?,
            }
        }
        if let Some(bytes) = self.receive_buffer_bytes {
            match self.buffer_limit {
                BufferLimit::Capped => sys::set_receive_buffer(fd, bytes)?,
                BufferLimit::Forced => sys::grow_receive_buffer(fd, bytes).map(drop)?,
            }
        }
        if let Some(mss) = self.mss_bytes {
            sys::set_max_segment(fd, mss).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("MSS {mss}: {e} (Linux takes 88 to 32767 bytes)"),
                )
            })?;
        }
        if let Some(algorithm) = &self.congestion {
            sys::set_congestion_control(fd, algorithm).map_err(|e| {
                io::Error::new(e.kind(), format!("congestion control '{algorithm}': {e}"))
            })?;
        }
        Ok(())
    }
}

/// An unconnected TCP socket of `address`'s family with `options` set.
pub fn open(address: SocketAddr, options: &TcpSocketOptions) -> io::Result<OwnedFd> {
    let socket = sys::tcp_socket(address.is_ipv6())?;
    options.apply(socket.as_fd())?;
    Ok(socket)
}

/// Connections a listener holds waiting for `accept` (std's `TcpListener::bind` takes
/// as many): a TCP test's parallel streams all connect at once.
const LISTEN_BACKLOG: i32 = 128;

/// A TCP listener on `address` (which may be a port in TIME_WAIT) with `options` set
/// before it binds.
pub fn listen(address: SocketAddr, options: &TcpSocketOptions) -> io::Result<TcpListener> {
    let socket = open(address, options)?;
    sys::set_reuse_address(socket.as_fd())?;
    sys::bind(socket.as_fd(), address)?;
    sys::listen(socket.as_fd(), LISTEN_BACKLOG)?;
    Ok(TcpListener::from(socket))
}

/// A blocking TCP connection to `server`, from local address `source` if given (a
/// loopback address of 127/8, say, to look like another client), with `options` set
/// before the handshake.
pub fn connect(
    server: SocketAddr,
    source: Option<IpAddr>,
    options: &TcpSocketOptions,
) -> io::Result<TcpStream> {
    let socket = open(server, options)?;
    if let Some(source) = source {
        sys::bind(socket.as_fd(), SocketAddr::new(source, 0))?;
    }
    sys::connect(socket.as_fd(), server)?;
    Ok(TcpStream::from(socket))
}

/// A blocking TCP connection to `server` with `options` set before the handshake, or
/// an error that says so when no answer comes within `timeout`.
///
/// A congestion control must be set here, not on the connected stream: the kernel starts
/// the one it has at the handshake, and one that paces (BBR) turns pacing on for the
/// socket's life, whatever it is changed to after.
pub fn connect_within(
    server: SocketAddr,
    options: &TcpSocketOptions,
    timeout: std::time::Duration,
) -> io::Result<TcpStream> {
    let socket = open(server, options)?;
    sys::set_nonblocking(socket.as_fd())?;
    match sys::connect(socket.as_fd(), server) {
        Ok(()) => {}
        Err(error) if error.raw_os_error() == Some(libc::EINPROGRESS) => {
            if !sys::poll_writable(socket.as_fd(), timeout)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no answer to the connection within {:.0} s",
                        timeout.as_secs_f64()
                    ),
                ));
            }
            match sys::take_socket_error(socket.as_fd())? {
                0 => {}
                code => return Err(io::Error::from_raw_os_error(code)),
            }
        }
        Err(error) => return Err(error),
    }
    let stream = TcpStream::from(socket);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Where Linux lists the congestion controls an unprivileged socket may choose, and those
/// registered (built in or loaded).
const ALLOWED_CONGESTION: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const AVAILABLE_CONGESTION: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The congestion controls this process may let a peer choose: the host's allowed list
/// (`tcp_allowed_congestion_control`), and with CAP_NET_ADMIN those already registered
/// (`tcp_available_congestion_control`), never another name: with the capability, naming
/// an unregistered one makes the kernel load its module. Empty if neither can be read.
pub fn allowed_congestion_controls() -> Vec<String> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_or_else(
            |_| Vec::new(),
            |text| text.split_whitespace().map(str::to_owned).collect(),
        )
    };
    let mut names: Vec<String> = read(ALLOWED_CONGESTION);
    if sys::has_cap_net_admin() {
        for name in read(AVAILABLE_CONGESTION) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_and_a_connection_take_their_options_over_loopback() {
        let receiver = TcpSocketOptions {
            receive_buffer_bytes: Some(64 * 1024),
            mss_bytes: Some(1000),
            ..TcpSocketOptions::default()
        };
        let listener = listen("127.0.0.1:0".parse().unwrap(), &receiver).unwrap();
        let sender = TcpSocketOptions {
            send_buffer_bytes: Some(64 * 1024),
            congestion: Some("reno".into()),
            ..TcpSocketOptions::default()
        };
        let stream = connect(
            listener.local_addr().unwrap(),
            Some("127.0.0.1".parse().unwrap()),
            &sender,
        )
        .unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, stream.local_addr().unwrap());
        // The kernel doubles a buffer request for its bookkeeping (64 KiB is under any
        // rmem_max: the default is 208 KiB).
        let (_, receive_bytes) = sys::buffer_sizes(accepted.as_fd()).unwrap();
        assert!(receive_bytes >= 2 * 64 * 1024, "{receive_bytes}");
    }

    #[test]
    fn a_refused_mss_or_congestion_control_names_the_value() {
        let address: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let tiny = TcpSocketOptions {
            mss_bytes: Some(1),
            ..TcpSocketOptions::default()
        };
        let error = open(address, &tiny).unwrap_err().to_string();
        assert!(error.starts_with("MSS 1: "), "{error}");
        let unknown = TcpSocketOptions {
            congestion: Some("no-such-algorithm".into()),
            ..TcpSocketOptions::default()
        };
        let error = open(address, &unknown).unwrap_err().to_string();
        assert!(
            error.starts_with("congestion control 'no-such-algorithm': "),
            "{error}"
        );
    }
}
