//! The server's end of the dialogue.

use std::collections::VecDeque;
use std::net::IpAddr;

use pathlab_core::Instant;

use super::{
    check_limits, peer_text, test_deadline, Channel, Rejections, Running, SessionError,
    HANDSHAKE_TIMEOUT,
};
use crate::auth::{ControlAuth, Key, Role, NONCE_LEN};
use crate::control::{self, Limits, Message, Refusal, TestRequest};

/// What a server offers and requires.
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    /// The limits every test must respect (announced in the welcome).
    pub limits: Limits,
    /// The pre-shared key, if tests must be authenticated.
    pub key: Option<Key>,
    /// Software and version, announced in the welcome.
    pub software: String,
    /// The congestion controls a TCP test may name: the host's allowed list (a server
    /// running as root could otherwise make the kernel load any module a client names).
    pub congestion_allowed: Vec<String>,
}

/// What the server's driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// A request within the limits: the driver checks what only it knows (tests running),
    /// opens the test's socket, and calls [`ServerSession::accept`] or
    /// [`ServerSession::refuse`].
    Request(TestRequest),
    /// A message for the running test (the sender's `Sent`, the client's `Done`, a path
    /// MTU step).
    Message(Message),
    /// The dialogue is over: a line for the log, or why it failed. The driver closes the
    /// connection once [`ServerSession::poll_transmit`] is empty.
    Ended(Result<String, SessionError>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitRequest,
    Deciding,
    Running,
    Ended,
}

/// The server's end of one control connection.
#[derive(Debug)]
pub struct ServerSession {
    policy: ServerPolicy,
    peer: IpAddr,
    nonce: [u8; NONCE_LEN],
    channel: Channel,
    state: State,
    deadline: Option<Instant>,
    events: VecDeque<ServerEvent>,
    pending: Option<(TestRequest, u16)>,
    running: Option<Running>,
    refused: Option<(TestRequest, Refusal)>,
    /// What this session refused.
    pub rejections: Rejections,
}

impl ServerSession {
    /// A connection from `peer` accepted at `now`; `nonce` is 16 random bytes.
    pub fn new(
        now: Instant,
        policy: ServerPolicy,
        peer: IpAddr,
        nonce: [u8; NONCE_LEN],
    ) -> ServerSession {
        let mut channel = Channel::default();
        channel.reader.limit(control::MAX_HANDSHAKE_FRAME);
        ServerSession {
            policy,
            peer,
            nonce,
            channel,
            state: State::AwaitHello,
            deadline: Some(now + HANDSHAKE_TIMEOUT),
            events: VecDeque::new(),
            pending: None,
            running: None,
            refused: None,
            rejections: Rejections::default(),
        }
    }

    /// Bytes of the control connection arrived at `now`.
    pub fn handle_control(&mut self, now: Instant, bytes: &[u8]) {
        if self.state == State::Ended {
            return;
        }
        self.channel.reader.push(bytes);
        while self.state != State::Ended {
            match self.channel.reader.next_frame() {
                Ok(Some(frame)) => self.handle_frame(now, &frame),
                Ok(None) => break,
                Err(error) => self.end(Err(error.into())),
            }
        }
    }

    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        let _ = now;
        if self.state == State::AwaitHello {
            return self.handle_hello(frame);
        }
        // Nothing is answered to a message that fails authentication: the client learnt
        // from the welcome's tag whether the keys agree.
        let message = match self.channel.decode(frame, &mut self.rejections) {
            Ok(message) => message,
            Err(error) => return self.end(Err(error)),
        };
        match (self.state, message) {
            (_, Message::Error { message }) => self.end(Err(SessionError::Remote {
                from: Role::Client,
                message: peer_text(&message),
            })),
            (State::AwaitRequest, Message::Request { test, client_port }) => {
                match check_limits(&test, &self.policy.limits)
                    .and_then(|()| self.check_congestion(&test))
                {
                    Ok(()) => {
                        self.state = State::Deciding;
                        self.deadline = None;
                        self.pending = Some((test.clone(), client_port));
                        self.events.push_back(ServerEvent::Request(test));
                    }
                    Err(refusal) => {
                        let line = format!("refused {test}: {refusal}");
                        self.channel.send(&Message::Refuse {
                            refusal: refusal.clone(),
                        });
                        self.refused = Some((test, refusal));
                        self.end(Ok(line));
                    }
                }
            }
            (State::Running, message) => self.events.push_back(ServerEvent::Message(message)),
            (_, other) => self.end(Err(SessionError::Protocol(format!(
                "unexpected {} before the test started",
                message_name(&other)
            )))),
        }
    }

    fn handle_hello(&mut self, frame: &[u8]) {
        let (nonce, authenticated) = match control::decode(frame, None) {
            Ok(Message::Hello {
                nonce,
                authenticated,
                ..
            }) => (nonce, authenticated),
            Ok(other) => {
                return self.end(Err(SessionError::Protocol(format!(
                    "the client started with {} instead of hello",
                    message_name(&other)
                ))))
            }
            Err(error) => return self.end(Err(error.into())),
        };
        let Some(client_nonce) = control::nonce_from_hex(&nonce) else {
            return self.end(Err(SessionError::Protocol("bad nonce".into())));
        };
        if authenticated != self.policy.key.is_some() {
            let message = if self.policy.key.is_some() {
                "this server requires a pre-shared key (--psk)"
            } else {
                "this server has no pre-shared key; run without --psk"
            };
            // The answer to the hello, untagged: the client has no key to check a tag.
            self.channel.send(&Message::Error {
                message: message.into(),
            });
            return self.end(Err(SessionError::Auth(message.into())));
        }
        self.channel.auth = self
            .policy
            .key
            .clone()
            .map(|key| ControlAuth::new(key, client_nonce, self.nonce, Role::Server));
        self.channel.send(&Message::Welcome {
            software: self.policy.software.clone(),
            nonce: control::nonce_to_hex(&self.nonce),
            limits: self.policy.limits,
        });
        self.state = State::AwaitRequest;
    }

    fn check_congestion(&self, test: &TestRequest) -> Result<(), Refusal> {
        let TestRequest::Tcp {
            congestion: Some(name),
            ..
        } = test
        else {
            return Ok(());
        };
        if self.policy.congestion_allowed.iter().any(|a| a == name) {
            return Ok(());
        }
        Err(Refusal::bad_request(format!(
            "congestion control '{}' is not allowed on this server (it allows: {})",
            super::peer_text(name),
            self.policy.congestion_allowed.join(" ")
        )))
    }

    /// The client closed its end of the control connection at `now`.
    pub fn handle_close(&mut self, now: Instant) {
        let _ = now;
        let outcome = match self.state {
            State::Ended => return,
            State::AwaitHello => Err(SessionError::Closed("the client's hello")),
            // A client that only checked the server is there (capacity and tune do, before
            // their steps) leaves without a test.
            State::AwaitRequest => Ok("left without asking for a test".to_owned()),
            State::Deciding | State::Running => Err(SessionError::Closed("the end of the test")),
        };
        self.end(outcome);
    }

    /// Checks the deadline: a client that says nothing in time is dropped.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            let what = match self.state {
                State::AwaitHello => "the client's hello",
                State::AwaitRequest => "the test request",
                _ => "the end of the test",
            };
            self.end(Err(SessionError::Timeout(what)));
        }
    }

    /// Starts the requested test at `now` as `session` (a CSPRNG's number) on `server_port`.
    ///
    /// # Panics
    /// If no request awaits a decision.
    pub fn accept(&mut self, now: Instant, session: u64, server_port: u16) {
        let (test, client_port) = self.pending.take().expect("a request awaits a decision");
        assert_eq!(self.state, State::Deciding);
        self.channel.send(&Message::Accept {
            session,
            server_port,
        });
        self.deadline = Some(test_deadline(now, &test));
        // Authenticated (or, without a key, accepted within the limits): the test's own
        // messages may be as large as the protocol allows (a TCP test's report).
        self.channel.reader.limit(control::MAX_FRAME);
        self.running = Some(Running::new(
            session,
            test,
            client_port,
            server_port,
            self.peer,
            self.channel.auth.as_ref(),
        ));
        self.state = State::Running;
    }

    /// Refuses the requested test (the driver's limits: `--max-tests`).
    pub fn refuse(&mut self, refusal: Refusal) {
        let test = self.pending.take().map(|(test, _)| test);
        let line = format!(
            "refused {}: {refusal}",
            test.as_ref().map(ToString::to_string).unwrap_or_default()
        );
        self.channel.send(&Message::Refuse {
            refusal: refusal.clone(),
        });
        self.refused = test.map(|test| (test, refusal));
        self.end(Ok(line));
    }

    /// The request this session refused and why (by its limits or by the driver's
    /// [`ServerSession::refuse`]), for the server's counters.
    pub fn refused(&self) -> Option<&(TestRequest, Refusal)> {
        self.refused.as_ref()
    }

    /// Sends a message of the running test.
    pub fn send(&mut self, message: &Message) {
        if self.state != State::Ended {
            self.channel.send(message);
        }
    }

    /// The driver's test ended as `line` says (for the log).
    pub fn finish(&mut self, line: String) {
        self.end(Ok(line));
    }

    /// Ends the dialogue telling the client why (the server shuts down, a socket failed).
    pub fn abort(&mut self, why: &str) {
        if self.state == State::Ended {
            return;
        }
        self.channel.send(&Message::Error {
            message: why.to_owned(),
        });
        self.end(Err(SessionError::Remote {
            from: Role::Server,
            message: why.to_owned(),
        }));
    }

    fn end(&mut self, outcome: Result<String, SessionError>) {
        if self.state != State::Ended {
            self.state = State::Ended;
            self.deadline = None;
            self.events.push_back(ServerEvent::Ended(outcome));
        }
    }

    /// The request awaiting the driver's decision ([`ServerEvent::Request`]).
    pub fn pending_request(&self) -> Option<&TestRequest> {
        self.pending.as_ref().map(|(test, _)| test)
    }

    /// The running test, once accepted.
    pub fn running(&self) -> Option<&Running> {
        self.running.as_ref()
    }

    /// The running test and the rejection counters, to check what the data plane brings.
    pub fn running_mut(&mut self) -> Option<(&mut Running, &mut Rejections)> {
        self.running.as_mut().map(|r| (r, &mut self.rejections))
    }

    /// Whether the session is still in its handshake (no test accepted yet).
    pub fn in_handshake(&self) -> bool {
        matches!(
            self.state,
            State::AwaitHello | State::AwaitRequest | State::Deciding
        )
    }

    /// Whether the dialogue is over.
    pub fn is_ended(&self) -> bool {
        self.state == State::Ended
    }

    /// Bytes to send on the control connection.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.channel.take_output()
    }

    /// The next thing the driver must act on.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// When [`ServerSession::handle_timeout`] must next be called.
    pub fn poll_at(&self) -> Option<Instant> {
        self.deadline
    }
}

/// A message's name for errors (not its contents: they may be large or hostile).
pub(super) fn message_name(message: &Message) -> &'static str {
    match message {
        Message::Hello { .. } => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Request { .. } => "request",
        Message::Accept { .. } => "accept",
        Message::Refuse { .. } => "refuse",
        Message::Sent { .. } => "sent",
        Message::Received { .. } => "received",
        Message::Done { .. } => "done",
        Message::TcpReport { .. } => "tcp-report",
        Message::MtuProbe { .. } => "mtu-probe",
        Message::MtuSent { .. } => "mtu-sent",
        Message::MtuArrived { .. } => "mtu-arrived",
        Message::Error { .. } => "error",
    }
}
