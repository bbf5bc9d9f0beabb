//! Headless Chromium for the tests that look at a page as a person does: finding it, and
//! driving it through the DevTools protocol over its WebSocket (a page that must be
//! clicked, not only rendered).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The Chromium binary, if one is installed (`.ci/run` installs Debian's).
pub fn find_chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The arguments every headless run takes.
pub const HEADLESS: [&str; 5] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
];

/// A Chromium driven over the DevTools protocol, one page attached. Killed when dropped.
pub struct Browser {
    child: Child,
    socket: TcpStream,
    session: String,
    next_id: u64,
}

impl Browser {
    /// Starts `command` (a Chromium, possibly inside a namespace) headless with a
    /// debugging port, connects, and opens `url` in a new page. The connection is made
    /// from the calling thread, which must be in the browser's network namespace.
    pub fn open(mut command: Command, profile: &std::path::Path, url: &str) -> Browser {
        command
            .args(HEADLESS)
            .arg("--remote-debugging-port=0")
            .arg("--remote-debugging-address=127.0.0.1")
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("chromium starts");
        let stderr = child.stderr.take().expect("piped");
        let (found, lines) = std::sync::mpsc::channel();
        // Reads Chromium's stderr to the end (a full pipe would stop it), passing the
        // DevTools address on.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = found.send(line[at..].trim().to_owned());
                }
            }
        });
        let ws = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium says where DevTools listens within 30 s");
        let rest = ws.strip_prefix("ws://").expect("a ws:// address");
        let (host, path) = rest.split_at(rest.find('/').expect("a path"));
        let mut socket = TcpStream::connect(host).expect("connects to DevTools");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let handshake = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: cGF0aGxhYi10ZXN0LWtleQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        socket.write_all(handshake.as_bytes()).expect("handshake");
        let mut head = Vec::new();
        let mut byte = [0u8];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).expect("handshake answer");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "DevTools refused the WebSocket: {}",
            String::from_utf8_lossy(&head)
        );
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 0,
        };
        let target = browser.call("Target.createTarget", &json!({ "url": url }));
        let target_id = target["targetId"].as_str().expect("a target").to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            &json!({ "targetId": target_id, "flatten": true }),
        );
        attached["sessionId"]
            .as_str()
            .expect("a session")
            .clone_into(&mut browser.session);
        browser
    }

    /// Calls `method` (on the page once attached) and returns its result.
    pub fn call(&mut self, method: &str, params: &Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.send(message.to_string().as_bytes());
        loop {
            let reply: Value = serde_json::from_slice(&self.receive()).expect("DevTools JSON");
            if reply["id"] == json!(id) {
                assert!(
                    reply.get("error").is_none(),
                    "{method} failed: {}",
                    reply["error"]
                );
                return reply["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value; a
    /// script exception fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            &json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression} threw: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` every 100 ms until `done` holds for its value (`within`
    /// at most), and returns that value.
    pub fn wait_for(
        &mut self,
        expression: &str,
        within: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let value = self.eval(expression);
            if done(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{expression} is still {value} after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send(&mut self, payload: &[u8]) {
        let mut frame = vec![0x81u8];
        let mask = [0x37u8, 0xfa, 0x21, 0x3d];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8), // masked, length inline
            n if n < 65536 => {
                frame.push(0xFE); // masked, 16-bit length
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0xFF); // masked, 64-bit length
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.socket.write_all(&frame).expect("sends to DevTools");
    }

    /// The next whole text message (fragments joined).
    fn receive(&mut self) -> Vec<u8> {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.socket
                .read_exact(&mut head)
                .expect("reads from DevTools");
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let length = match head[1] & 0x7f {
                0x7E => {
                    let mut n = [0u8; 2];
                    self.socket.read_exact(&mut n).expect("length");
                    u16::from_be_bytes(n) as usize
                }
                0x7F => {
                    let mut n = [0u8; 8];
                    self.socket.read_exact(&mut n).expect("length");
                    u64::from_be_bytes(n) as usize
                }
                n => n as usize,
            };
            let mut payload = vec![0u8; length];
            self.socket.read_exact(&mut payload).expect("payload");
            match opcode {
                0x8 => panic!("DevTools closed the connection"),
                0x9 | 0xA => continue,
                _ => message.extend_from_slice(&payload),
            }
            if fin {
                return message;
            }
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
