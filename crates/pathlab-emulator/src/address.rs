//! The control address of `pathlab emulate --control` and `pathlab lab --control`: the
//! HTTP API, the live page and `/metrics` on one TCP address, with the token every change
//! needs.
//!
//! Binding it is the same policy for every command that serves it: the token comes from a
//! file or is made at start (then printed by the caller, as notebook servers do), an
//! address beyond loopback needs a token from a file (one printed on a remote box's
//! terminal is easily lost or logged), the page is public and reads from loopback are open.
//! This module binds; what is served is [`crate::api`]'s.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use pathlab_http::{HttpServer, HttpServerError};
use pathlab_os::files::{Dir, FileError};

/// What the control address is to be: where, with which token, and which trace files its
/// specs may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlAddressConfig {
    /// The address to listen on (port 0: one the kernel picks).
    pub addr: SocketAddr,
    /// The file holding the bearer token; without it a token is made at start, which only
    /// a loopback address may do.
    pub token_file: Option<PathBuf>,
    /// The directory whose trace files a spec sent to the address may name, by file name;
    /// without it such specs name no trace.
    pub trace_dir: Option<PathBuf>,
}

/// A bound control address: its server, the token it requires, and the trace directory.
#[derive(Debug)]
pub struct ControlAddress {
    /// The server, with the token; reads from loopback open, and the page public.
    pub server: HttpServer,
    /// The token, when it was made at start (for the caller to print); `None` when it came
    /// from a file.
    pub made_token: Option<String>,
    /// The trace directory, opened.
    pub traces: Option<Dir>,
}

/// Why a control address cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ControlAddressError {
    /// The token file will not do, the address is beyond loopback without a token file, or
    /// the address cannot be bound.
    #[error(transparent)]
    Http(HttpServerError),
    /// The trace directory cannot be opened.
    #[error("{0}")]
    TraceDir(FileError),
    /// No token could be made: the kernel gave no random bytes.
    #[error("making a control token from the kernel's random bytes")]
    NewToken(#[source] io::Error),
}

impl ControlAddressError {
    /// Whether the user's input was wrong (a token file or trace directory that will not
    /// do, a token missing beyond loopback), not the machine (a port in use, no random
    /// bytes): the command line says so with exit status 2.
    pub fn is_usage(&self) -> bool {
        match self {
            ControlAddressError::Http(HttpServerError::Bind { .. })
            | ControlAddressError::NewToken(_) => false,
            ControlAddressError::Http(_) | ControlAddressError::TraceDir(_) => true,
        }
    }
}

impl ControlAddress {
    /// Reads the token file, opens the trace directory and binds the address, in that
    /// order (so a token file that will not do is said before anything listens).
    pub fn bind(config: &ControlAddressConfig) -> Result<ControlAddress, ControlAddressError> {
        let given = config
            .token_file
            .as_deref()
            .map(pathlab_http::read_token)
            .transpose()
            .map_err(ControlAddressError::Http)?;
        let traces = Dir::open_optional(config.trace_dir.as_deref())
            .map_err(ControlAddressError::TraceDir)?;
        let (token, made_token) = match given {
            Some(token) => (token, None),
            None if !pathlab_http::server::is_loopback(config.addr.ip()) => {
                return Err(ControlAddressError::Http(HttpServerError::NeedsToken(
                    config.addr,
                )));
            }
            None => {
                let token = pathlab_http::new_token().map_err(ControlAddressError::NewToken)?;
                (token.clone(), Some(token))
            }
        };
        let server = HttpServer::bind(config.addr, Some(token))
            .map_err(ControlAddressError::Http)?
            .public(&["/"])
            .reads_open_on_loopback();
        Ok(ControlAddress {
            server,
            made_token,
            traces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(addr: &str) -> ControlAddressConfig {
        ControlAddressConfig {
            addr: addr.parse().unwrap(),
            token_file: None,
            trace_dir: None,
        }
    }

    #[test]
    fn loopback_without_a_token_file_makes_one() {
        let bound = ControlAddress::bind(&config("127.0.0.1:0")).unwrap();
        let token = bound.made_token.expect("a token made at start");
        assert!(token.len() >= pathlab_http::server::MIN_TOKEN, "{token}");
        assert_ne!(bound.server.local_addr().port(), 0);
        assert!(bound.traces.is_none());
    }

    #[test]
    fn beyond_loopback_a_token_file_is_required_before_anything_listens() {
        // A documentation address: nothing is bound, the refusal comes first.
        let error = ControlAddress::bind(&config("192.0.2.1:0")).unwrap_err();
        assert!(matches!(
            error,
            ControlAddressError::Http(HttpServerError::NeedsToken(_))
        ));
        assert!(error.is_usage());
    }

    #[test]
    fn a_missing_trace_directory_is_the_users_error() {
        let mut config = config("127.0.0.1:0");
        config.trace_dir = Some("/nonexistent/pathlab-traces".into());
        let error = ControlAddress::bind(&config).unwrap_err();
        assert!(matches!(error, ControlAddressError::TraceDir(_)));
        assert!(error.is_usage());
    }
}
