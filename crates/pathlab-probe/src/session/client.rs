//! The client's end of the dialogue.

use std::collections::VecDeque;
use std::net::IpAddr;

use pathlab_core::Instant;

use super::server::message_name;
use super::{
    peer_text, test_deadline, Channel, Rejections, Running, SessionError, ANSWER_TIMEOUT,
    TEST_GRACE,
};
use crate::auth::{Key, Role, NONCE_LEN};
use crate::control::{self, ControlError, Limits, Message, TestRequest};

/// What the client's driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// The server's welcome arrived (and, with a key, proved the server has the same).
    Connected {
        /// The server's limits.
        limits: Limits,
        /// The server's software and version.
        software: String,
    },
    /// The server accepted the request: [`ClientSession::running`] has the session.
    Accepted,
    /// A message of the running test.
    Message(Message),
    /// The dialogue failed (a refusal, the server's error, a timeout, a closed connection).
    Failed(SessionError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitWelcome,
    Ready,
    AwaitAnswer,
    Running,
    Ended,
}

/// The client's end of one control connection.
#[derive(Debug)]
pub struct ClientSession {
    key: Option<Key>,
    server: IpAddr,
    nonce: [u8; NONCE_LEN],
    channel: Channel,
    state: State,
    deadline: Option<Instant>,
    events: VecDeque<ClientEvent>,
    pending: Option<(TestRequest, u16)>,
    running: Option<Running>,
    /// What this session refused.
    pub rejections: Rejections,
}

impl ClientSession {
    /// Opens the dialogue with the server at `server` at `now`: queues the hello.
    /// `nonce` is 16 random bytes.
    pub fn new(
        now: Instant,
        key: Option<Key>,
        server: IpAddr,
        nonce: [u8; NONCE_LEN],
        software: String,
    ) -> ClientSession {
        let mut channel = Channel::default();
        channel.send(&Message::Hello {
            software,
            nonce: control::nonce_to_hex(&nonce),
            authenticated: key.is_some(),
        });
        ClientSession {
            key,
            server,
            nonce,
            channel,
            state: State::AwaitWelcome,
            deadline: Some(now + ANSWER_TIMEOUT),
            events: VecDeque::new(),
            pending: None,
            running: None,
            rejections: Rejections::default(),
        }
    }

    /// Asks for `test` at `now`; `client_port` is where probes to the client go.
    ///
    /// # Panics
    /// Unless the welcome has arrived and no test was asked for yet.
    pub fn request(&mut self, now: Instant, test: TestRequest, client_port: u16) {
        assert_eq!(self.state, State::Ready, "one request, after the welcome");
        self.channel.send(&Message::Request {
            test: test.clone(),
            client_port,
        });
        self.pending = Some((test, client_port));
        self.state = State::AwaitAnswer;
        self.deadline = Some(now + ANSWER_TIMEOUT);
    }

    /// Bytes of the control connection arrived at `now`.
    pub fn handle_control(&mut self, now: Instant, bytes: &[u8]) {
        if self.state == State::Ended {
            return;
        }
        if self.state == State::Running && !bytes.is_empty() {
            // A server whose results are still coming is answering: the grace runs from
            // its last byte (2.25 million records took 10 s through a bonded tunnel).
            self.deadline = self.deadline.map(|at| at.max(now + TEST_GRACE));
        }
        self.channel.reader.push(bytes);
        while self.state != State::Ended {
            match self.channel.reader.next_frame() {
                Ok(Some(frame)) => self.handle_frame(now, &frame),
                Ok(None) => break,
                Err(error) => self.fail(error.into()),
            }
        }
    }

    fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        if self.state == State::AwaitWelcome {
            return self.handle_welcome(frame);
        }
        let message = match self.channel.decode(frame, &mut self.rejections) {
            Ok(message) => message,
            Err(error) => return self.fail(error),
        };
        match (self.state, message) {
            (_, Message::Error { message }) => self.fail(SessionError::Remote {
                from: Role::Server,
                message: peer_text(&message),
            }),
            (
                State::AwaitAnswer,
                Message::Accept {
                    session,
                    server_port,
                },
            ) => {
                let (test, client_port) = self.pending.take().expect("a request was sent");
                self.deadline = Some(test_deadline(now, &test));
                self.running = Some(Running::new(
                    session,
                    test,
                    client_port,
                    server_port,
                    self.server,
                    self.channel.auth.as_ref(),
                ));
                self.state = State::Running;
                self.events.push_back(ClientEvent::Accepted);
            }
            (State::AwaitAnswer, Message::Refuse { refusal }) => {
                self.fail(SessionError::Refused(refusal));
            }
            (State::Running, message) => self.events.push_back(ClientEvent::Message(message)),
            (_, other) => self.fail(SessionError::Protocol(format!(
                "unexpected {} from the server",
                message_name(&other)
            ))),
        }
    }

    fn handle_welcome(&mut self, frame: &[u8]) {
        match control::decode_welcome(frame, self.key.as_ref(), self.nonce) {
            Ok((
                Message::Welcome {
                    limits, software, ..
                },
                auth,
            )) => {
                self.channel.auth = auth;
                self.state = State::Ready;
                self.deadline = None;
                self.events
                    .push_back(ClientEvent::Connected { limits, software });
            }
            Ok((Message::Error { message }, _)) => {
                self.fail(SessionError::Auth(peer_text(&message)));
            }
            // A refusal before the welcome: the server's bounds on connections.
            Ok((Message::Refuse { refusal }, _)) => self.fail(SessionError::Refused(refusal)),
            Ok((other, _)) => self.fail(SessionError::Protocol(format!(
                "expected a welcome, got {}",
                message_name(&other)
            ))),
            Err(ControlError::BadTag) => {
                self.rejections.control += 1;
                self.fail(SessionError::Auth(
                    "the server's welcome failed authentication: the keys differ; give both \
                     sides the same --psk file"
                        .into(),
                ));
            }
            Err(error) => self.fail(error.into()),
        }
    }

    /// The server closed its end of the control connection at `now`.
    pub fn handle_close(&mut self, now: Instant) {
        let _ = now;
        let what = match self.state {
            State::Ended | State::Ready => return self.end(),
            State::AwaitWelcome => "the server's welcome",
            State::AwaitAnswer => "the server's answer",
            State::Running => "the end of the test",
        };
        self.fail(SessionError::Closed(what));
    }

    /// Checks the deadline: a server that says nothing in time (frozen, gone, or behind a
    /// path that lost everything) ends the dialogue.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            let what = match self.state {
                State::AwaitWelcome => "the server's welcome",
                State::AwaitAnswer => "the server's answer",
                _ => "the server's results",
            };
            self.fail(SessionError::Timeout(what));
        }
    }

    /// Sends a message of the running test.
    pub fn send(&mut self, message: &Message) {
        if self.state != State::Ended {
            self.channel.send(message);
        }
    }

    /// The test is over: nothing more is expected.
    pub fn finish(&mut self) {
        self.end();
    }

    fn fail(&mut self, error: SessionError) {
        if self.state != State::Ended {
            self.end();
            self.events.push_back(ClientEvent::Failed(error));
        }
    }

    fn end(&mut self) {
        self.state = State::Ended;
        self.deadline = None;
    }

    /// The running test, once accepted.
    pub fn running(&self) -> Option<&Running> {
        self.running.as_ref()
    }

    /// The running test and the rejection counters, to check what the data plane brings.
    pub fn running_mut(&mut self) -> Option<(&mut Running, &mut Rejections)> {
        self.running.as_mut().map(|r| (r, &mut self.rejections))
    }

    /// Whether the dialogue is authenticated.
    pub fn authenticated(&self) -> bool {
        self.channel.auth.is_some()
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
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// When [`ClientSession::handle_timeout`] must next be called.
    pub fn poll_at(&self) -> Option<Instant> {
        self.deadline
    }
}
