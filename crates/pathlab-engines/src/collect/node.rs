//! One node as `lab collect` talks to it: in TLS, the node proving its name with a
//! certificate of the lab's CA before the collector sends its token or anything else
//! ([`NodeAccess`]); each request within its phase's deadline ([`Stage`]); a 503 with
//! `Retry-After` (every slot of the node taken) tried again, a bounded number of times
//! within that deadline.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use pathlab_http::{Call, ClientError, ClientResponse, TlsClient};

use super::CollectError;
use crate::export::credentials::{token_file, CA_CERT_FILE};
use crate::export::node::NodeConfig;
use crate::node::wire::{self, NodeStatus};

/// How many times a request refused with 503 and `Retry-After` is sent again.
pub const MAX_RETRIES: u32 = 5;
/// The longest `Retry-After` honoured as said; a longer one is cut to this.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// What proves a node to the collector (its certificate, of the lab's CA, for its name)
/// and the collector to the node (the node's own token).
#[derive(Clone)]
pub struct NodeAccess {
    /// The node's bearer token.
    pub token: String,
    /// The lab's CA, and the node's name to prove.
    pub tls: TlsClient,
}

impl std::fmt::Debug for NodeAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAccess")
            .field("name", &self.tls.name())
            .finish_non_exhaustive()
    }
}

/// Why an export's directory gives no access to the nodes.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct AccessError {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Each of `nodes`' access from the directory `pathlab lab export` wrote: the lab CA's
/// certificate ([`CA_CERT_FILE`]) and each node's token (`NODE.token`, its owner's only).
pub fn access_from_export(dir: &Path, nodes: &[String]) -> Result<Vec<NodeAccess>, AccessError> {
    let ca_path = dir.join(CA_CERT_FILE);
    let refused = |path: &Path, problem: String| AccessError {
        path: path.display().to_string(),
        problem,
    };
    let ca = pathlab_os::files::read_regular(&ca_path, 64 * 1024)
        .map_err(|e| refused(&ca_path, e.to_string()))?;
    let trust = TlsClient::new(&ca, "pathlab", &ca_path.display().to_string())
        .map_err(|e| refused(&ca_path, e.to_string()))?;
    nodes
        .iter()
        .map(|node| {
            let path = dir.join(token_file(node));
            let token =
                pathlab_http::read_token(&path).map_err(|e| refused(&path, e.to_string()))?;
            let tls = trust
                .for_name(node)
                .map_err(|e| refused(&path, e.to_string()))?;
            Ok(NodeAccess { token, tls })
        })
        .collect()
}

/// A phase of the collection and its deadline: no request of the phase outlives it,
/// whatever the node does.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    /// Its name, for an error.
    pub name: &'static str,
    /// When it ends.
    pub deadline: Instant,
    /// How long it was given.
    pub given: Duration,
}

impl Stage {
    /// The phase `name`, from now for `given`.
    pub fn new(name: &'static str, given: Duration) -> Stage {
        Stage {
            name,
            deadline: Instant::now() + given,
            given,
        }
    }
}

/// One node as the collector sees it.
pub(super) struct Node<'a> {
    pub(super) config: &'a NodeConfig,
    pub(super) sha256: String,
    pub(super) address: &'a str,
    pub(super) access: Option<&'a NodeAccess>,
}

impl Node<'_> {
    pub(super) fn error(&self, message: &dyn std::fmt::Display) -> CollectError {
        CollectError::Node {
            node: self.config.node.clone(),
            address: self.address.to_owned(),
            message: message.to_string(),
        }
    }

    /// The error of a failed request in `stage`: a deadline says which phase's.
    pub(super) fn failed(&self, stage: &Stage, error: &ClientError) -> CollectError {
        match error {
            ClientError::Deadline { .. } => self.error(&format!(
                "gave up: it had not answered whole when the {} phase's {} s were over",
                stage.name,
                stage.given.as_secs_f64()
            )),
            other => self.error(other),
        }
    }

    /// Sends `method path` (with `body`) within `stage`, the answer's body in memory (at
    /// most `most` bytes) or, for a 200, into `sink`; a 503 with `Retry-After` is sent
    /// again after that wait, at most [`MAX_RETRIES`] times and within the phase.
    pub(super) fn call(
        &self,
        stage: &Stage,
        (method, path, body): (&str, &str, Option<&[u8]>),
        most: u64,
        mut sink: Option<&mut dyn Write>,
    ) -> Result<ClientResponse, ClientError> {
        let call = Call {
            addr: self.address,
            tls: self.access.map(|a| &a.tls),
            method,
            path,
            token: self.access.map(|a| a.token.as_str()),
            body,
            deadline: Some(stage.deadline),
        };
        let mut tries = 0;
        loop {
            let response = match sink.as_deref_mut() {
                Some(sink) => call.send_to(most, sink)?,
                None => call.send(usize::try_from(most).unwrap_or(usize::MAX))?,
            };
            let wait = retry_after(&response);
            match wait {
                Some(wait) if tries < MAX_RETRIES && Instant::now() + wait < stage.deadline => {
                    tries += 1;
                    std::thread::sleep(wait);
                }
                _ => return Ok(response),
            }
        }
    }

    /// A GET within `stage`.
    pub(super) fn get(
        &self,
        stage: &Stage,
        path: &str,
        most: usize,
    ) -> Result<(u16, Vec<u8>), CollectError> {
        let response = self
            .call(stage, ("GET", path, None), most as u64, None)
            .map_err(|e| self.failed(stage, &e))?;
        Ok((response.status, response.body))
    }

    /// The node's status; `Ok(Err(why))` while it does not answer (its pod is starting),
    /// an error when it answers wrongly (another node or config, a refused token) or does
    /// not prove who it is, or the phase is over: no use waiting for it.
    pub(super) fn status(&self, stage: &Stage) -> Result<Result<NodeStatus, String>, CollectError> {
        let response = match self.call(
            stage,
            ("GET", wire::STATUS_PATH, None),
            wire::MAX_STATUS_BYTES as u64,
            None,
        ) {
            Ok(response) => response,
            Err(error @ (ClientError::NotProven { .. } | ClientError::Deadline { .. })) => {
                return Err(self.failed(stage, &error))
            }
            Err(error) => return Ok(Err(self.error(&error).to_string())),
        };
        match response.status {
            200 => NodeStatus::parse(&response.body, self.config, &self.sha256)
                .map(Ok)
                .map_err(|e| self.error(&e)),
            code @ (401 | 403) => Err(self.error(&format!(
                "refused the token ({code}): {}",
                text(&response.body)
            ))),
            code => Ok(Err(self
                .error(&format!("status {code}: {}", text(&response.body)))
                .to_string())),
        }
    }
}

/// How long a 503 asks to wait (`Retry-After` in seconds, at most [`MAX_RETRY_WAIT`]);
/// `None` for any other answer.
fn retry_after(response: &ClientResponse) -> Option<Duration> {
    if response.status != 503 {
        return None;
    }
    let seconds: u64 = response.header("retry-after")?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_WAIT))
}

/// A body's first 200 characters, for an error message.
pub(super) fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}
