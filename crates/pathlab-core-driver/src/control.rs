//! The control socket of a running emulator: `pathlab emulate set` and `stats` talk to it.
//!
//! One JSON request per connection, one JSON reply. The socket is a file under
//! [`pathlab_os::runtime::runtime_dir`], reachable from every network namespace, so an emulator
//! running inside a lab router is controlled from the host.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::emulator::{EmulatorHandle, EmulatorStats};
use pathlab_os::runtime;
use pathlab_os::sys;

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
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        if path.exists() {
            if UnixStream::connect(&path).is_ok() {
                return Err(ControlError::NameTaken(name.to_owned()));
            }
            std::fs::remove_file(&path).map_err(io_error)?;
        }
        let listener = UnixListener::bind(&path).map_err(io_error)?;
        listener.set_nonblocking(true).map_err(io_error)?;
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
                    let _ = answer(&stream, emulator);
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

fn answer(stream: &UnixStream, emulator: &EmulatorHandle) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let reply = match serde_json::from_str::<ControlRequest>(&line) {
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
    };
    let mut stream = stream;
    serde_json::to_writer(&mut stream, &reply)?;
    stream.write_all(b"\n")
}

/// Sends one request to the emulator called `name` and returns its reply.
pub fn request(name: &str, request: &ControlRequest) -> Result<ControlReply, ControlError> {
    let path = runtime::control_socket_path(name);
    let stream = UnixStream::connect(&path).map_err(|_| ControlError::NotRunning {
        name: name.to_owned(),
        path: path.clone(),
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
    writer.write_all(&bytes).map_err(io_error)?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(io_error)?;
    serde_json::from_str(&line).map_err(|_| ControlError::BadReply(line.trim().to_owned()))
}
