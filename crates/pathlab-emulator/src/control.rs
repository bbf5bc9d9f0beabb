//! The control socket of a running emulator: `pathlab emulate set` and `stats` talk to it.
//!
//! One JSON request per connection, one JSON reply. The socket is a file under
//! [`pathlab_os::runtime::runtime_dir`], reachable from every network namespace, so an emulator
//! running inside a lab router is controlled from the host.
//!
//! Only root and the user the emulator runs as may use it: the socket is made `0600`
//! whatever the umask, and each peer's credentials (`SO_PEERCRED`, the kernel's word) are
//! checked before anything is read, since the emulator reads the trace files such a peer
//! names. A request is one line of at most [`MAX_REQUEST_LINE`] bytes, sent within
//! [`REQUEST_TIME`]: a peer that sends more, or never ends its line, is refused and
//! closed, so it neither grows the emulator's memory nor holds its loop (which also waits
//! for Ctrl-C).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::emulator::{EmulatorHandle, EmulatorStats};
use pathlab_os::sys;
use pathlab_os::{local_socket, runtime};

/// The longest request line taken: a request is two specs, each a few dozen bytes.
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// How long a peer has to send its whole request line; the emulator's loop waits on it.
pub const REQUEST_TIME: Duration = Duration::from_secs(2);

/// A request on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlRequest {
    /// Replace specs (text as the user typed it, trace paths absolute).
    Set {
        /// Spec of direction 0, if it changes.
        forward: Option<String>,
        /// Spec of direction 1, if it changes.
        reverse: Option<String>,
    },
    /// The counters.
    Stats,
}

/// The reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlReply {
    /// Done.
    Ok,
    /// The counters.
    Stats(EmulatorStats),
    /// It did not work, and why.
    Error(String),
}

/// Why the control socket could not be set up or reached.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another live emulator has this name.
    #[error("an emulator named '{0}' is already running; choose another with --name")]
    NameTaken(String),
    /// No emulator answers under this name.
    #[error("no emulator named '{name}' is running (no answer on {path})")]
    NotRunning {
        /// The name.
        name: String,
        /// Its socket path.
        path: PathBuf,
    },
    /// The socket is there but this user may not use it.
    #[error(
        "{path}: permission denied; only root and the user running the emulator may control it"
    )]
    NotAllowed {
        /// Its socket path.
        path: PathBuf,
    },
    /// The emulator closed the connection without a reply: this user is not one it takes.
    #[error(
        "the emulator closed the connection without answering; only root and the user running \
         it may control it"
    )]
    Closed,
    /// The emulator answered something that is not a reply.
    #[error("the emulator's answer is not a control reply: {0}")]
    BadReply(String),
    /// A system call failed.
    #[error("control socket {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// A bound control socket; the file is removed when this is dropped.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds the control socket of emulator `name`, replacing a stale one.
    pub fn bind(name: &str) -> Result<ControlServer, ControlError> {
        let path = runtime::control_socket_path(name);
        let io_error = |source| ControlError::Io {
            path: path.clone(),
            source,
        };
        let Some(listener) = local_socket::bind_private(&path).map_err(io_error)? else {
            return Err(ControlError::NameTaken(name.to_owned()));
        };
        Ok(ControlServer { listener, path })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves requests for `emulator` until a termination signal arrives on `signals` (a
    /// [`sys::signalfd_termination`] descriptor), `until` returns true (checked every
    /// 50 ms), or the emulator stops by itself. Returns the signal, if one ended it.
    pub fn serve(
        &self,
        emulator: &EmulatorHandle,
        signals: std::os::fd::BorrowedFd<'_>,
        mut until: impl FnMut() -> bool,
    ) -> Option<i32> {
        loop {
            let fds = [self.listener.as_fd(), signals];
            let mut ready = [false; 2];
            let _ =
                sys::poll_readable(&fds, Some(std::time::Duration::from_millis(50)), &mut ready);
            if ready[1] {
                if let Some(signal) = sys::signalfd_read(signals) {
                    return Some(signal);
                }
            }
            if ready[0] {
                while let Ok((stream, _)) = self.listener.accept() {
                    // Others are closed unread (and cannot connect to a 0600 socket
                    // anyway, unless someone changed its mode).
                    if local_socket::trusted_peer(&stream) {
                        let _ = answer(&stream, emulator);
                    }
                }
            }
            if emulator.is_finished() || until() {
                return None;
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a request line was not read.
#[derive(Debug, thiserror::Error)]
enum LineError {
    /// Longer than [`MAX_REQUEST_LINE`] without its newline.
    #[error("the request is longer than {MAX_REQUEST_LINE} bytes")]
    TooLong,
    /// Not all there within [`REQUEST_TIME`].
    #[error("the request did not arrive within {} s", REQUEST_TIME.as_secs())]
    TooSlow,
    /// The connection failed, or closed before a newline.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads one line (without its newline) of at most `max` bytes from `stream`, all of it
/// before `deadline`. Never holds more than `max` bytes, whatever the peer sends.
fn read_request_line(
    mut stream: &UnixStream,
    max: usize,
    deadline: Instant,
) -> Result<Vec<u8>, LineError> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LineError::TooSlow);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(LineError::TooSlow)
            }
            Err(e) => return Err(e.into()),
        };
        let got = &chunk[..n];
        if let Some(end) = got.iter().position(|&b| b == b'\n') {
            if line.len() + end > max {
                return Err(LineError::TooLong);
            }
            line.extend_from_slice(&got[..end]);
            return Ok(line);
        }
        if line.len() + n > max {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(got);
    }
}

fn answer(stream: &UnixStream, emulator: &EmulatorHandle) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(REQUEST_TIME))?;
    let reply = match read_request_line(stream, MAX_REQUEST_LINE, Instant::now() + REQUEST_TIME) {
        Ok(line) => reply_to(&line, emulator),
        Err(LineError::Io(error)) => return Err(error),
        Err(refused) => ControlReply::Error(refused.to_string()),
    };
    let mut stream = stream;
    let mut bytes = serde_json::to_vec(&reply).map_err(io::Error::other)?;
    bytes.push(b'\n');
    stream.write_all(&bytes)
}

/// The reply to one request line.
fn reply_to(line: &[u8], emulator: &EmulatorHandle) -> ControlReply {
    match serde_json::from_slice::<ControlRequest>(line) {
        Ok(ControlRequest::Stats) => emulator.stats().map_or_else(
            || ControlReply::Error("the emulator has stopped".into()),
            ControlReply::Stats,
        ),
        Ok(ControlRequest::Set { forward, reverse }) => {
            let parse = |text: Option<String>| text.map(|t| crate::load_spec(&t)).transpose();
            match (parse(forward), parse(reverse)) {
                (Ok(forward), Ok(reverse)) => {
                    match crate::api::apply(emulator, forward, reverse, "pathlab emulate set") {
                        Ok(()) => ControlReply::Ok,
                        Err(error) => ControlReply::Error(error),
                    }
                }
                (Err(error), _) | (_, Err(error)) => ControlReply::Error(error.to_string()),
            }
        }
        Err(error) => ControlReply::Error(format!("not a control request: {error}")),
    }
}

/// Sends one request to the emulator called `name` and returns its reply.
pub fn request(name: &str, request: &ControlRequest) -> Result<ControlReply, ControlError> {
    let path = runtime::control_socket_path(name);
    let stream = UnixStream::connect(&path).map_err(|error| {
        if error.kind() == io::ErrorKind::PermissionDenied {
            ControlError::NotAllowed { path: path.clone() }
        } else {
            ControlError::NotRunning {
                name: name.to_owned(),
                path: path.clone(),
            }
        }
    })?;
    let io_error = |source| ControlError::Io {
        path: path.clone(),
        source,
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(io_error)?;
    let mut writer = &stream;
    let mut bytes = serde_json::to_vec(request).expect("requests serialize");
    bytes.push(b'\n');
    // An emulator that refuses this peer closes at once: the write may already fail.
    let closed = |error: io::Error| match error.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ControlError::Closed,
        _ => io_error(error),
    };
    writer.write_all(&bytes).map_err(closed)?;
    let mut line = String::new();
    if BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(closed)?
        == 0
    {
        return Err(ControlError::Closed);
    }
    serde_json::from_str(&line).map_err(|_| ControlError::BadReply(line.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_from(sent: &[u8], max: usize) -> Result<Vec<u8>, LineError> {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (&theirs).write_all(sent).unwrap();
        read_request_line(&ours, max, Instant::now() + Duration::from_millis(300))
    }

    #[test]
    fn a_request_line_is_bounded_in_length_and_time() {
        assert_eq!(
            read_from(b"{\"stats\"}\nrest", 100).unwrap(),
            b"{\"stats\"}"
        );
        assert_eq!(
            read_from(&[b'x'; 100], 100)
                .map_err(|e| e.to_string())
                .err(),
            Some(LineError::TooSlow.to_string())
        );
        let mut long = vec![b'x'; 101];
        long.push(b'\n');
        assert!(matches!(read_from(&long, 100), Err(LineError::TooLong)));
        // Without a newline, more than the bound is refused as soon as it is there.
        assert!(matches!(
            read_from(&[b'x'; 5000], 100),
            Err(LineError::TooLong)
        ));
        let started = Instant::now();
        assert!(matches!(read_from(b"{", 100), Err(LineError::TooSlow)));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
