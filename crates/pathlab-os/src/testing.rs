//! What namespace tests share, the crates' own and the end-to-end tests in `tests/`: the
//! privileged-test gate.

/// The namespace tests build interfaces on a 2-core machine: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the test may run (with the serializing guard): CAP_NET_ADMIN is needed; without
/// it the test panics in CI and is skipped elsewhere.
pub fn privileged(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if crate::require_net_admin("the namespace tests").is_ok() {
        return Some(
            ONE_AT_A_TIME
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: CI=true but this process lacks CAP_NET_ADMIN; CI must run the tests as root"
    );
    skipped(test, "needs CAP_NET_ADMIN (run the tests as root; CI does)");
    None
}

/// Says that `test` skipped and why: straight to stderr, past the test harness's capture,
/// so it is seen; and appended to the file `PATHLAB_SKIP_LOG` names, if any, which
/// `scripts/test` counts at the end of the run.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("PATHLAB_SKIP_LOG") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// A TCP socket of `address`'s family.
fn tcp_socket(address: std::net::SocketAddr) -> std::io::Result<std::os::fd::OwnedFd> {
    let domain = if address.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    crate::sys::socket(domain, libc::SOCK_STREAM, 0)
}

/// A TCP connection to `server` from the local address `source` (a loopback address of
/// 127/8, say, to look like many clients).
pub fn tcp_connect_from(
    source: std::net::IpAddr,
    server: std::net::SocketAddr,
) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::AsFd as _;
    let socket = tcp_socket(server)?;
    crate::sys::bind(socket.as_fd(), std::net::SocketAddr::new(source, 0))?;
    crate::sys::connect(socket.as_fd(), server)?;
    Ok(std::net::TcpStream::from(socket))
}

/// A TCP listener on `address` whose connections get a receive buffer of `receive` bytes
/// (as SO_RCVBUF: the kernel doubles it), set before the handshake so the window scale
/// follows it.
pub fn tcp_listen_with_receive_buffer(
    address: std::net::SocketAddr,
    receive: Option<usize>,
) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsFd as _;
    let socket = tcp_socket(address)?;
    crate::sys::setsockopt(socket.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, &1)?;
    if let Some(bytes) = receive {
        crate::sys::grow_receive_buffer(socket.as_fd(), bytes)?;
    }
    crate::sys::bind(socket.as_fd(), address)?;
    crate::sys::listen(socket.as_fd(), 8)?;
    Ok(std::net::TcpListener::from(socket))
}

/// A TCP connection to `server` with a send buffer of `send` bytes (as SO_SNDBUF) and the
/// congestion control `congestion`, where given, set before it connects.
pub fn tcp_connect_with(
    server: std::net::SocketAddr,
    send: Option<usize>,
    congestion: Option<&str>,
) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::AsFd as _;
    let socket = tcp_socket(server)?;
    if let Some(bytes) = send {
        crate::sys::grow_send_buffer(socket.as_fd(), bytes)?;
    }
    if let Some(algorithm) = congestion {
        crate::sys::set_congestion_control(socket.as_fd(), algorithm)?;
    }
    crate::sys::connect(socket.as_fd(), server)?;
    Ok(std::net::TcpStream::from(socket))
}

pub use crate::sys::{raise_open_files_limit, send_signal};
