//! Issue 30, the emulator's control surfaces: its HTTP API (`emulate --control`) and its
//! Unix control socket, tried by a client that holds the token but wants more (files
//! outside what it was given), one without the token on the same machine, a web page in
//! the user's browser, and a local user at the socket.
//!
//! Each runs `pathlab emulate` in r of an h1 - r - h2 line (the control address is r's
//! 127.0.0.1) and needs CAP_NET_ADMIN. None judges timing (a bound of seconds on an answer
//! is a hang's, not a speed's), so they hold the tests' lock shared and may run beside
//! each other: each line is fresh namespaces, each emulator and directory is named
//! `api-TEST` with this process's id.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use pathlab_http::ClientResponse;
use serde_json::{json, Value};

use crate::util;
use crate::util::emulated::{privileged_shared, Lab, PATHLAB};
use crate::util::output::OutputLog;
use crate::util::TempDir;

const TOKEN: &str = "hostile-api-token-0123456789";

/// What a file outside every directory the emulator was given holds: no answer may show it.
const SECRET_LINE: &str = "THE FIRST LINE OF A KEY FILE";

/// What the long-line test sends on the control socket without a newline: 64 MiB.
const LONG_LINE_BYTES: usize = 64 << 20;

/// An emulator with `--control` on r's loopback, and the files around it: `DIR/token`,
/// `DIR/traces/` (`--trace-dir`), `DIR/records/` (`--record-dir`), `DIR/outside/secret`.
struct ApiLab {
    lab: Lab,
    addr: String,
    log: OutputLog,
    dir: TempDir,
}

impl ApiLab {
    /// With `given`: a token file and both directories; without: none of them (the token is
    /// made at start and printed).
    fn start(test: &str, given: bool) -> ApiLab {
        let dir = TempDir::new(&format!("hostile-{test}"));
        for sub in ["traces", "records", "outside"] {
            std::fs::create_dir(dir.path(sub)).unwrap();
        }
        std::fs::write(dir.path("outside/secret"), format!("{SECRET_LINE}\n")).unwrap();
        util::write_secret(&dir.path("token"), TOKEN);
        let shown = |sub: &str| dir.path(sub).display().to_string();
        let mut args = vec!["--control".to_owned(), "127.0.0.1:0".to_owned()];
        if given {
            for (flag, sub) in [
                ("--control-token", "token"),
                ("--trace-dir", "traces"),
                ("--record-dir", "records"),
            ] {
                args.push(flag.to_owned());
                args.push(shown(sub));
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut lab = Lab::start_with(&format!("api-{test}"), "delay 1ms", &args, true, false);
        let log = OutputLog::follow(lab.emulator.as_mut().unwrap());
        let addr = log.http_address();
        ApiLab {
            lab,
            addr,
            log,
            dir,
        }
    }

    /// One request from inside r, with `token` if given.
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> ClientResponse {
        let body = body.map(|b| b.to_string().into_bytes());
        self.lab
            .line
            .r
            .run(|| pathlab_http::request(&self.addr, method, path, token, body.as_deref()))
            .unwrap()
            .expect("the control address answers")
    }

    /// `PUT /api/v1/spec` of `forward`, with the token.
    fn put_spec(&self, forward: &str) -> ClientResponse {
        self.put_spec_with(Some(TOKEN), forward)
    }

    /// `PUT /api/v1/spec` of `forward`, with `token` if any.
    fn put_spec_with(&self, token: Option<&str>, forward: &str) -> ClientResponse {
        let body = json!({ "forward": forward });
        self.call("PUT", "/api/v1/spec", token, Some(body))
    }

    /// `POST /api/v1/recording` of `body`, with the token.
    fn record(&self, body: Value) -> ClientResponse {
        self.record_with(Some(TOKEN), body)
    }

    /// `POST /api/v1/recording` of `body`, with `token` if any.
    fn record_with(&self, token: Option<&str>, body: Value) -> ClientResponse {
        self.call("POST", "/api/v1/recording", token, Some(body))
    }

    /// The spec in force from h1 to h2.
    fn forward_spec(&self) -> String {
        self.lab.stats().directions[0].spec.clone()
    }
}

fn text(reply: &ClientResponse) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

#[test]
fn a_spec_over_http_names_only_a_file_of_the_trace_dir() {
    let Some(_guard) = privileged_shared("hostile_api_trace_dir") else {
        return;
    };
    let api = ApiLab::start("trace-dir", true);
    std::fs::write(api.dir.path("traces/ok.trace"), "1\n2\n3\n").unwrap();
    std::fs::write(api.dir.path("outside/other.trace"), "1\n2\n3\n").unwrap();
    let outside = api.dir.path("outside/other.trace").display().to_string();
    let inside = api.dir.path("traces/ok.trace").display().to_string();
    // Before the fix each was read (the last two as good traces, and applied).
    for path in [
        outside.as_str(),
        "/etc/passwd",
        "../outside/other.trace",
        "..",
        inside.as_str(),
    ] {
        let refused = api.put_spec(&format!("trace {path}"));
        assert_eq!(refused.status, 403, "trace {path}: {}", text(&refused));
        assert!(
            text(&refused).contains("plain file name"),
            "{}",
            text(&refused)
        );
    }
    assert_eq!(api.forward_spec(), "delay 1ms", "nothing changed");
    let taken = api.put_spec("trace ok.trace");
    assert_eq!(taken.status, 200, "{}", text(&taken));
    assert_eq!(api.forward_spec(), "trace ok.trace");
}

#[test]
fn no_answer_shows_a_line_of_a_file() {
    let Some(_guard) = privileged_shared("hostile_api_no_contents") else {
        return;
    };
    let api = ApiLab::start("no-contents", true);
    std::fs::write(api.dir.path("traces/key"), format!("{SECRET_LINE}\n")).unwrap();
    std::fs::write(api.dir.path("traces/late"), "1\n9000000\n5\n").unwrap();
    let outside = api.dir.path("outside/secret").display().to_string();
    for (spec, status) in [
        ("trace key".to_owned(), 400),
        ("trace late".to_owned(), 400),
        (format!("trace {outside}"), 403),
    ] {
        let refused = api.put_spec(&spec);
        let body = text(&refused);
        assert_eq!(refused.status, status, "{spec}: {body}");
        for quoted in ["FIRST LINE", "9000000"] {
            assert!(
                !body.contains(quoted),
                "{spec}: the answer quotes the file: {body}"
            );
        }
    }
    // Still saying where and what: the line, and what is wrong with it.
    let body = text(&api.put_spec("trace key"));
    assert!(
        body.contains("line 1") && body.contains("whole number"),
        "{body}"
    );
}

#[test]
fn a_fifo_or_a_device_in_the_trace_dir_is_refused_at_once() {
    let Some(_guard) = privileged_shared("hostile_api_fifo") else {
        return;
    };
    let mut api = ApiLab::start("fifo", true);
    let made = std::process::Command::new("mkfifo")
        .arg(api.dir.path("traces/fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", api.dir.path("traces/zero")).unwrap();
    for (name, what) in [("fifo", "FIFO"), ("zero", "symbolic link")] {
        let started = Instant::now();
        // Before the fix the FIFO's open waited for a writer that never comes: no answer,
        // and then no shutdown either.
        let refused = api.put_spec(&format!("trace {name}"));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{name}: answered after {:?}",
            started.elapsed()
        );
        assert_eq!(refused.status, 400, "{name}: {}", text(&refused));
        assert!(text(&refused).contains(what), "{}", text(&refused));
    }
    // And the emulator still stops at once.
    let child = api.lab.emulator.take().unwrap();
    let started = Instant::now();
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_recording_is_a_new_name_inside_the_record_dir_never_a_path() {
    let Some(_guard) = privileged_shared("hostile_api_recording_path") else {
        return;
    };
    let api = ApiLab::start("recording-path", true);
    let target = api.dir.path("outside/made-by-api.jsonl");
    // The old body: a path anywhere, created as root.
    let old = api.record(json!({ "path": target }));
    assert_eq!(old.status, 400, "{}", text(&old));
    for name in [
        target.display().to_string(),
        "../outside/made-by-api.jsonl".to_owned(),
        "..".to_owned(),
        "a\nb".to_owned(),
    ] {
        let refused = api.record(json!({ "name": name }));
        assert_eq!(refused.status, 403, "{name:?}: {}", text(&refused));
    }
    assert!(!target.exists(), "nothing was created outside --record-dir");
    let started = api.record(json!({ "name": "run.jsonl" }));
    assert_eq!(started.status, 200, "{}", text(&started));
    let made = api.dir.path("records/run.jsonl");
    assert_eq!(
        json!(made),
        serde_json::from_slice::<Value>(&started.body).unwrap()["recording"]
    );
    let mode = std::fs::metadata(&made).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the owner's only: {mode:o}");
    assert_eq!(
        api.call("DELETE", "/api/v1/recording", Some(TOKEN), None)
            .status,
        200
    );
}

#[test]
fn a_link_at_the_recording_name_is_not_followed_and_nothing_is_removed() {
    let Some(_guard) = privileged_shared("hostile_api_recording_link") else {
        return;
    };
    let api = ApiLab::start("recording-link", true);
    let victim = api.dir.path("outside/victim");
    std::fs::write(&victim, "KEEP\n").unwrap();
    let trap = api.dir.path("records/trap.jsonl");
    std::os::unix::fs::symlink(&victim, &trap).unwrap();
    // A link already there: never opened, never written through.
    let refused = api.record(json!({ "name": "trap.jsonl" }));
    assert_eq!(refused.status, 400, "{}", text(&refused));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "KEEP\n");
    assert!(trap.symlink_metadata().unwrap().file_type().is_symlink());
    // The failure path (a recording under way) creates nothing and removes nothing. Before
    // the fix it removed the path it had just created, looked up again: a link swapped in
    // meanwhile made it remove any file.
    assert_eq!(api.record(json!({ "name": "first.jsonl" })).status, 200);
    let busy = api.record(json!({ "name": "second.jsonl" }));
    assert_eq!(busy.status, 409, "{}", text(&busy));
    assert_eq!(
        api.call("DELETE", "/api/v1/recording", Some(TOKEN), None)
            .status,
        200
    );
    let mut left: Vec<String> = std::fs::read_dir(api.dir.path("records"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["first.jsonl", "trap.jsonl"]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "KEEP\n");
}

#[test]
fn a_change_needs_the_token_even_on_loopback_and_a_read_does_not() {
    let Some(_guard) = privileged_shared("hostile_api_token_on_loopback") else {
        return;
    };
    let api = ApiLab::start("token-on-loopback", false);
    // No --control-token: one is made and printed at start, with the page that takes it.
    let token = api.log.wait_for("the printed token", |line| {
        line.split_once("control token")
            .and_then(|(_, rest)| rest.rsplit_once(": "))
            .map(|(_, token)| token.trim().to_owned())
    });
    assert!(token.len() >= 32, "{token}");
    let page = format!("http://{}/#token={token}", api.addr);
    assert!(api.log.lines().iter().any(|l| l.contains(&page)));
    // Before the fix, loopback needed no token for anything.
    let change = api.put_spec_with(None, "delay 9ms");
    assert_eq!(change.status, 401, "{}", text(&change));
    let wrong = api.put_spec_with(Some(TOKEN), "delay 9ms");
    assert_eq!(wrong.status, 401, "another token");
    assert_eq!(
        api.call("DELETE", "/api/v1/recording", None, None).status,
        401
    );
    assert_eq!(api.forward_spec(), "delay 1ms");
    for read in ["/api/v1/stats", "/api/v1/spec", "/metrics", "/"] {
        assert_eq!(api.call("GET", read, None, None).status, 200, "{read}");
    }
    let change = api.put_spec_with(Some(&token), "delay 9ms");
    assert_eq!(change.status, 200, "{}", text(&change));
    assert_eq!(api.forward_spec(), "delay 9ms");
    // Without --trace-dir and --record-dir, no file at all, even with the token.
    let trace = api.put_spec_with(Some(&token), "trace /etc/passwd");
    assert_eq!(trace.status, 403, "{}", text(&trace));
    assert!(text(&trace).contains("--trace-dir"));
    let record = api.record_with(Some(&token), json!({ "name": "x.jsonl" }));
    assert_eq!(record.status, 403, "{}", text(&record));
    assert!(text(&record).contains("--record-dir"));
}

#[test]
fn the_page_and_the_api_may_not_be_framed_by_another_site() {
    let Some(_guard) = privileged_shared("hostile_api_frames") else {
        return;
    };
    let api = ApiLab::start("frames", true);
    for (method, path, token) in [
        ("GET", "/", None),
        ("GET", "/api/v1/stats", None),
        ("GET", "/api/v1/about", Some(TOKEN)),
        ("PUT", "/api/v1/spec", None),
    ] {
        let reply = api.call(method, path, token, None);
        assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(
            reply.header("content-security-policy"),
            Some("frame-ancestors 'none'"),
            "{path}"
        );
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
}

#[test]
fn one_address_cannot_take_every_connection() {
    let Some(_guard) = privileged_shared("hostile_api_connections") else {
        return;
    };
    let api = ApiLab::start("connections", true);
    let addr = api.addr.clone();
    api.lab
        .line
        .r
        .run(|| {
            // Connections that never send a request each hold a slot (for 5 s).
            let idle: Vec<std::net::TcpStream> = (0
                ..pathlab_http::server::MAX_CONNECTIONS_PER_SOURCE)
                .map(|_| std::net::TcpStream::connect(&addr).unwrap())
                .collect();
            let deadline = Instant::now() + Duration::from_secs(3);
            let refused = loop {
                let reply = pathlab_http::request(&addr, "GET", "/api/v1/stats", None, None);
                match reply {
                    Ok(reply) if reply.status == 503 => break reply,
                    other => assert!(
                        Instant::now() < deadline,
                        "still served past the bound: {:?}",
                        other.map(|r| r.status)
                    ),
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(
                text(&refused).contains("from your address"),
                "{}",
                text(&refused)
            );
            drop(idle);
            let deadline = Instant::now() + Duration::from_secs(3);
            while pathlab_http::request(&addr, "GET", "/api/v1/stats", None, None)
                .map(|r| r.status)
                .ok()
                != Some(200)
            {
                assert!(Instant::now() < deadline, "served again once they closed");
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .unwrap();
}

#[test]
fn the_control_socket_is_its_owners_only() {
    let Some(_guard) = privileged_shared("hostile_api_socket_owner") else {
        return;
    };
    let lab = Lab::start_with("api-socket-owner", "delay 1ms", &[], true, false);
    let socket = pathlab_os::runtime::control_socket_path(&lab.name);
    // Before the fix the mode was the umask's (0755 under 022).
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    // Opened to everyone by someone else's mistake: another user is still closed. (The
    // runtime directories are 0755: anyone may reach the socket's name.)
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let stranger = {
        use std::os::unix::process::CommandExt as _;
        std::process::Command::new(PATHLAB)
            .args(["emulate", "stats", "--name", &lab.name])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(!stranger.status.success(), "nobody read the stats");
    assert!(said.contains("closed the connection"), "{said}");
    assert!(stranger.stdout.is_empty());
    // Root still is served.
    assert_eq!(lab.stats().directions[0].spec, "delay 1ms");
}

#[test]
fn a_long_line_on_the_control_socket_is_refused_and_held_nowhere() {
    let Some(_guard) = privileged_shared("hostile_api_socket_line") else {
        return;
    };
    let lab = Lab::start_with("api-socket-line", "delay 1ms", &[], true, false);
    let socket = pathlab_os::runtime::control_socket_path(&lab.name);
    let stream = UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // 64 MiB without a newline. Before the fix the emulator read it all into one line.
    let writer = {
        let mut stream = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 16];
            let mut sent = 0;
            while sent < LONG_LINE_BYTES {
                match stream.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            sent
        })
    };
    let started = Instant::now();
    let mut reply = Vec::new();
    let _ = (&stream).read_to_end(&mut reply);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let sent = writer.join().unwrap();
    assert!(
        sent < LONG_LINE_BYTES / 4,
        "the emulator took {sent} bytes of one line"
    );
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.is_empty() || reply.contains("longer than"), "{reply}");
    // A peer that never ends its line is let go too, and the emulator goes on.
    let silent = UnixStream::connect(&socket).unwrap();
    (&silent).write_all(b"{\"stats\"").unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut reply = String::new();
    let _ = (&silent).read_to_string(&mut reply);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(reply.contains("did not arrive"), "{reply}");
    assert_eq!(lab.stats().directions[0].spec, "delay 1ms");
}
