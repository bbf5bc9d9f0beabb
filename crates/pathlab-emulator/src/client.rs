//! Asking a running emulator to change its specs or for its counters (`pathlab emulate
//! set` and `stats`): on this machine through its control socket ([`crate::control`]), on
//! another through its control address ([`crate::api`]), the same two requests either way.

use pathlab_http::ClientResponse;

use crate::api::Specs;
use crate::control::{self, ControlError, ControlReply, ControlRequest};
use crate::emulator::EmulatorStats;

/// Which emulator to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The emulator of this name on this machine, through its control socket.
    Local(String),
    /// The emulator at a control address on another machine.
    Remote {
        /// Its control address, `HOST:PORT`.
        addr: String,
        /// The bearer token its changes (and its reads from another machine) need.
        token: Option<String>,
    },
}

/// Why a request to an emulator failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The control socket: no emulator of that name, or one this user may not use.
    #[error(transparent)]
    Socket(#[from] ControlError),
    /// The control address cannot be reached or answered no HTTP.
    #[error(transparent)]
    Http(#[from] pathlab_http::ClientError),
    /// The control address refused the request for want of the right token.
    #[error(
        "the emulator at {addr} {}",
        if *token_given { "refused the token of --token" } else { "needs its token: --token FILE" }
    )]
    Unauthorized {
        /// The control address.
        addr: String,
        /// Whether a token was sent.
        token_given: bool,
    },
    /// The emulator at a control address refused the spec.
    #[error("the emulator at {addr} refused the spec: {message}")]
    RemoteRefused {
        /// The control address.
        addr: String,
        /// Its reason.
        message: String,
    },
    /// The emulator on this machine refused the spec.
    #[error("the emulator refused the spec: {0}")]
    Refused(String),
    /// The control address answered with an unexpected status.
    #[error("{} answered {status}: {message}", emulator_at(addr.as_deref()))]
    Status {
        /// The control address, when the message names it.
        addr: Option<String>,
        /// The HTTP status.
        status: u16,
        /// The error it gave.
        message: String,
    },
    /// The emulator on this machine could not give its stats.
    #[error("{0}")]
    Failed(String),
    /// The emulator answered something that does not answer the request.
    #[error("the emulator answered {0}")]
    Unexpected(&'static str),
    /// The stats are not in the form this version reads.
    #[error("the emulator's stats are not what this pathlab reads")]
    BadStats(#[source] serde_json::Error),
}

fn emulator_at(addr: Option<&str>) -> String {
    match addr {
        Some(addr) => format!("the emulator at {addr}"),
        None => "the emulator".to_owned(),
    }
}

impl RequestError {
    /// Whether the user's input was wrong (no emulator of that name, an address that does
    /// not answer, a token missing or refused), not the emulator: the command line says so
    /// with exit status 2.
    pub fn is_usage(&self) -> bool {
        match self {
            RequestError::Socket(error) => matches!(error, ControlError::NotRunning { .. }),
            RequestError::Http(_) | RequestError::Unauthorized { .. } => true,
            RequestError::RemoteRefused { .. }
            | RequestError::Refused(_)
            | RequestError::Status { .. }
            | RequestError::Failed(_)
            | RequestError::Unexpected(_)
            | RequestError::BadStats(_) => false,
        }
    }
}

/// Replaces the specs of `target`'s directions given (spec text as the user typed it, in
/// canonical form); `None` leaves a direction as it is.
pub fn set(target: &Target, specs: Specs) -> Result<(), RequestError> {
    match target {
        Target::Remote { addr, token } => {
            let body = serde_json::to_vec(&specs).expect("two optional strings serialize");
            let reply = remote_request(addr, token.as_deref(), "PUT", "/api/v1/spec", Some(&body))?;
            match reply.status {
                200 => Ok(()),
                400 => Err(RequestError::RemoteRefused {
                    addr: addr.clone(),
                    message: reply_error(&reply),
                }),
                status => Err(RequestError::Status {
                    addr: Some(addr.clone()),
                    status,
                    message: reply_error(&reply),
                }),
            }
        }
        Target::Local(name) => {
            let request = ControlRequest::Set {
                forward: specs.forward,
                reverse: specs.reverse,
            };
            match control::request(name, &request)? {
                ControlReply::Ok => Ok(()),
                ControlReply::Error(error) => Err(RequestError::Refused(error)),
                ControlReply::Stats(_) => {
                    Err(RequestError::Unexpected("with stats to a set request"))
                }
            }
        }
    }
}

/// The counters of `target`.
pub fn stats(target: &Target) -> Result<EmulatorStats, RequestError> {
    match target {
        Target::Remote { addr, token } => {
            let reply = remote_request(addr, token.as_deref(), "GET", "/api/v1/stats", None)?;
            if reply.status != 200 {
                return Err(RequestError::Status {
                    addr: None,
                    status: reply.status,
                    message: reply_error(&reply),
                });
            }
            serde_json::from_slice(&reply.body).map_err(RequestError::BadStats)
        }
        Target::Local(name) => match control::request(name, &ControlRequest::Stats)? {
            ControlReply::Stats(stats) => Ok(stats),
            ControlReply::Error(error) => Err(RequestError::Failed(error)),
            ControlReply::Ok => Err(RequestError::Unexpected("'ok' to a stats request")),
        },
    }
}

/// Sends one request to a control address, with the token if given; a refused token is
/// said as such.
fn remote_request(
    addr: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<ClientResponse, RequestError> {
    let reply = pathlab_http::request(addr, method, path, token, body)?;
    if reply.status == 401 {
        return Err(RequestError::Unauthorized {
            addr: addr.to_owned(),
            token_given: token.is_some(),
        });
    }
    Ok(reply)
}

/// The message of an error reply (`{"error": ...}`), or its body as text.
fn reply_error(reply: &ClientResponse) -> String {
    serde_json::from_slice::<serde_json::Value>(&reply.body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&reply.body).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> ClientResponse {
        ClientResponse {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_error_reply_gives_its_message_or_its_text() {
        assert_eq!(
            reply_error(&reply(400, r#"{"error": "no such preset 'x'"}"#)),
            "no such preset 'x'"
        );
        assert_eq!(reply_error(&reply(502, " bad gateway\n")), "bad gateway");
    }

    #[test]
    fn messages_name_the_emulator_as_before() {
        let status = |addr: Option<&str>| RequestError::Status {
            addr: addr.map(str::to_owned),
            status: 500,
            message: "boom".into(),
        };
        assert_eq!(
            status(Some("10.0.0.1:8080")).to_string(),
            "the emulator at 10.0.0.1:8080 answered 500: boom"
        );
        assert_eq!(status(None).to_string(), "the emulator answered 500: boom");
        let unauthorized = |token_given| RequestError::Unauthorized {
            addr: "h:1".into(),
            token_given,
        };
        assert_eq!(
            unauthorized(false).to_string(),
            "the emulator at h:1 needs its token: --token FILE"
        );
        assert_eq!(
            unauthorized(true).to_string(),
            "the emulator at h:1 refused the token of --token"
        );
        assert!(unauthorized(true).is_usage());
        assert!(!status(None).is_usage());
    }

    #[test]
    fn no_emulator_of_that_name_is_the_users_error() {
        let name = format!("no-such-emulator-{}", std::process::id());
        let error = stats(&Target::Local(name)).unwrap_err();
        assert!(
            matches!(error, RequestError::Socket(ControlError::NotRunning { .. })),
            "{error}"
        );
        assert!(error.is_usage());
    }
}
