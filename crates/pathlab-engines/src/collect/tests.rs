//! The collector against nodes that do not prove themselves, trickle, or lie.

use super::*;

#[test]
fn addresses_are_a_pattern_or_one_pair_per_node() {
    let nodes = ["h1".to_owned(), "r1".to_owned()];
    assert_eq!(
        addresses("clab-{lab}-{node}:8080", "lab", &nodes).unwrap(),
        ["clab-lab-h1:8080", "clab-lab-r1:8080"]
    );
    assert_eq!(
        addresses("r1=r.test:80,h1=h.test:80", "lab", &nodes).unwrap(),
        ["h.test:80", "r.test:80"]
    );
    for (pattern, error) in [
        ("h1=a:1,r1", "'r1' is not NODE=HOST:PORT"),
        (
            "h1=a:1,h2=b:1",
            "the lab has no node 'h2' (its nodes: h1, r1)",
        ),
        ("h1=a:1", "no address for node 'r1'"),
    ] {
        assert_eq!(
            addresses(pattern, "lab", &nodes).unwrap_err().to_string(),
            error,
            "{pattern}"
        );
    }
}

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use pathlab_os::testing::ScratchDir;

use crate::export::credentials::{cert_file, key_file, token_file};
use crate::export::save::{self, Engine, ExportConfig};
use crate::node::wire::NodeResult;

/// The bufferbloat recipe's first run (h1, r1, h2) exported for containerlab into `dir`.
fn export(dir: &ScratchDir) -> PlannedRun {
    let run = pathlab_lab::sweep::ExperimentSource::read("bufferbloat")
        .unwrap()
        .point(true, Some(1))
        .unwrap();
    save::write(&ExportConfig {
        engine: Engine::Containerlab,
        run: run.clone(),
        seed: 1,
        image: crate::export::DEFAULT_IMAGE.to_owned(),
        out: dir.root().to_owned(),
    })
    .expect("exports");
    run
}

/// The TLS server config of `node` from the export in `dir`.
fn node_tls(dir: &ScratchDir, node: &str) -> Arc<rustls::ServerConfig> {
    pathlab_http::tls::server_config(
        &std::fs::read(dir.path(&cert_file(node))).unwrap(),
        &std::fs::read(dir.path(&key_file(node))).unwrap(),
        node,
    )
    .unwrap()
}

fn token(dir: &ScratchDir, node: &str) -> String {
    pathlab_http::read_token(&dir.path(&token_file(node))).unwrap()
}

/// A collection of the export in `dir`, every node at `addresses` (one per node), each
/// phase given `wait`.
fn collection(
    dir: &ScratchDir,
    run: PlannedRun,
    addresses: Vec<String>,
    wait: Duration,
) -> CollectConfig {
    let names = run.experiment.node_names();
    let configs = crate::export::Export::of(&run, 1, crate::export::DEFAULT_IMAGE.to_owned())
        .node_configs("test")
        .unwrap();
    CollectConfig {
        run,
        configs,
        addresses,
        access: Some(access_from_export(dir.root(), &names).unwrap()),
        wait,
        lead: DEFAULT_LEAD,
        out: dir.path("collected"),
        command_line: Vec::new(),
    }
}

/// A stand-in at a node's address: accepts connections (until the test ends) and plays
/// `behaviour` on each, in TLS with `tls` if given; what it read is kept, in the clear.
struct FakeNode {
    addr: String,
    read: Arc<Mutex<Vec<u8>>>,
}

impl FakeNode {
    fn start(
        tls: Option<Arc<rustls::ServerConfig>>,
        behaviour: fn(&mut dyn ReadWrite, usize),
    ) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let read = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&read);
        std::thread::spawn(move || {
            for (k, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { return };
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut recorder = Recorder {
                    stream,
                    read: Arc::clone(&kept),
                };
                match &tls {
                    None => behaviour(&mut recorder.stream_recorded(), k),
                    Some(config) => {
                        let connection = rustls::ServerConnection::new(Arc::clone(config)).unwrap();
                        let mut tls = rustls::StreamOwned::new(connection, recorder.stream);
                        let mut plain = PlainRecorder {
                            inner: &mut tls,
                            read: &kept,
                        };
                        behaviour(&mut plain, k);
                    }
                }
            }
        });
        FakeNode { addr, read }
    }

    fn read(&self) -> Vec<u8> {
        self.read.lock().unwrap().clone()
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

struct Recorder {
    stream: TcpStream,
    read: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    fn stream_recorded(&mut self) -> PlainRecorder<'_, TcpStream> {
        PlainRecorder {
            inner: &mut self.stream,
            read: &self.read,
        }
    }
}

/// Keeps what is read through it.
struct PlainRecorder<'a, S: Read + Write> {
    inner: &'a mut S,
    read: &'a Mutex<Vec<u8>>,
}

impl<S: Read + Write> Read for PlainRecorder<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl<S: Read + Write> Write for PlainRecorder<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Runs a collection of the export in `dir` whose h1 is `fake` (and the other nodes
/// nowhere), each phase given `wait`: it must fail naming h1 at its address; what it said
/// and how long it took.
fn collect_failing_at_h1(
    dir: &ScratchDir,
    run: PlannedRun,
    fake: &FakeNode,
    wait: Duration,
) -> (String, Duration) {
    let addresses = vec![
        fake.addr.clone(),
        "127.0.0.1:9".into(),
        "127.0.0.1:9".into(),
    ];
    let config = collection(dir, run, addresses, wait);
    let started = Instant::now();
    let error = super::run(&config, &AtomicBool::new(false), &mut |_| {}).unwrap_err();
    let said = error.to_string();
    assert!(
        said.starts_with(&format!("node h1 at {}: ", fake.addr)),
        "{said}"
    );
    (said, started.elapsed())
}

/// Reads a request head (or what comes within 5 s), then answers 200 with an empty JSON.
fn answer_ok(stream: &mut dyn ReadWrite, _: usize) {
    read_head(stream);
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    let _ = stream.flush();
}

fn read_head(stream: &mut dyn ReadWrite) {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1024];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(n) if n > 0 => seen.extend_from_slice(&byte[..n]),
            _ => return,
        }
    }
}

/// N2 (issue 39): one token drove every node. Now node A's token does not drive node B,
/// and node A's certificate does not pass for node B's.
#[test]
fn a_nodes_token_and_certificate_do_not_pass_for_another_nodes() {
    let dir = ScratchDir::new("collect-own-token");
    let run = export(&dir);
    let names = run.experiment.node_names();
    let access = access_from_export(dir.root(), &names).unwrap();
    let (h1, r1) = (&access[0], &access[1]);
    assert_ne!(h1.token, r1.token);
    let server =
        pathlab_http::HttpServer::bind("127.0.0.1:0".parse().unwrap(), Some(token(&dir, "r1")))
            .unwrap()
            .tls(node_tls(&dir, "r1"));
    let addr = server.local_addr().to_string();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            server.serve(&stop, &|_| pathlab_http::Response::json(200, &"driven"));
        });
        let call = |tls: &pathlab_http::TlsClient, token: &str| {
            pathlab_http::Call {
                addr: &addr,
                tls: Some(tls),
                method: "POST",
                path: wire::START_PATH,
                token: Some(token),
                body: Some(b"{}"),
                deadline: Some(Instant::now() + Duration::from_secs(10)),
            }
            .send(4096)
        };
        let with_h1s = call(&r1.tls, &h1.token).unwrap();
        assert_eq!(with_h1s.status, 401, "r1 refuses h1's token");
        assert_eq!(
            call(&r1.tls, &r1.token).unwrap().status,
            200,
            "r1 takes its own"
        );
        // r1's certificate does not prove h1: whoever holds r1's files cannot pose as h1.
        let posing = call(&h1.tls, &h1.token).unwrap_err();
        assert!(
            matches!(posing, pathlab_http::ClientError::NotProven { .. }),
            "{posing}"
        );
        stop.store(true, Ordering::Release);
    });
}

/// N2 (issue 39): collect sent the lab's token in the clear to whatever answered at a
/// node's address. Now it stops before sending anything to a node that does not prove
/// its name with a certificate of the lab's CA, and says which node and why.
#[test]
fn collect_refuses_a_node_that_cannot_prove_itself_before_sending_its_token() {
    let dir = ScratchDir::new("collect-unproven");
    let run = export(&dir);
    let other = ScratchDir::new("collect-unproven-other-ca");
    export(&other);
    let h1_token = token(&dir, "h1");
    for (what, fake) in [
        ("plain HTTP", FakeNode::start(None, answer_ok)),
        (
            "another CA's certificate for h1",
            FakeNode::start(Some(node_tls(&other, "h1")), answer_ok),
        ),
        (
            "the lab's certificate of r1",
            FakeNode::start(Some(node_tls(&dir, "r1")), answer_ok),
        ),
    ] {
        let (said, took) = collect_failing_at_h1(&dir, run.clone(), &fake, Duration::from_secs(20));
        assert!(said.contains("did not prove it is 'h1'"), "{what}: {said}");
        assert!(
            took < Duration::from_secs(10),
            "{what}: at once, not at the deadline"
        );
        let read = fake.read();
        assert!(
            !read
                .windows(h1_token.len())
                .any(|w| w == h1_token.as_bytes()),
            "{what}: the token was sent"
        );
        assert!(
            !read.windows(6).any(|w| w == b"Bearer"),
            "{what}: a request was sent"
        );
    }
}

/// Proves h1, reads the request, then sends a 200 head promising 100000 bytes and one byte
/// every 300 ms (for 30 s at most).
fn trickle(stream: &mut dyn ReadWrite, _: usize) {
    read_head(stream);
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
    for _ in 0..100 {
        if stream
            .write_all(b" ")
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// N5 (issue 39): collect had only a 10 s timeout per read, so a node that trickled a
/// byte every few seconds held it forever. Now the phase's deadline ends it, naming the
/// node.
#[test]
fn a_trickling_node_is_given_up_on_at_the_phase_deadline() {
    let dir = ScratchDir::new("collect-trickle");
    let run = export(&dir);
    let fake = FakeNode::start(Some(node_tls(&dir, "h1")), trickle);
    let wait = Duration::from_secs(2);
    let (said, took) = collect_failing_at_h1(&dir, run, &fake, wait);
    assert!(said.contains("the ready phase's 2 s were over"), "{said}");
    assert!(
        took >= wait && took < wait + Duration::from_secs(2),
        "{took:?}"
    );
}

/// Answers 503 with `Retry-After: 1` to its first two connections, then 200.
fn busy_twice(stream: &mut dyn ReadWrite, k: usize) {
    read_head(stream);
    let answer: &[u8] = if k < 2 {
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}"
    } else {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    };
    let _ = stream.write_all(answer);
    let _ = stream.flush();
}

fn always_busy(stream: &mut dyn ReadWrite, _: usize) {
    busy_twice(stream, 0);
}

/// N6 (issue 39): collect took a node's 503 (every slot taken) as fatal. Now it waits as
/// `Retry-After` says and asks again, a bounded number of times within the phase.
#[test]
fn a_busy_nodes_retry_after_is_honoured_a_bounded_number_of_times() {
    let dir = ScratchDir::new("collect-retry-after");
    let run = export(&dir);
    let config = collection(&dir, run, vec![String::new(); 3], Duration::from_secs(30));
    let access = config.access.as_ref().unwrap();
    for (behaviour, status, least, most) in [
        (busy_twice as fn(&mut dyn ReadWrite, usize), 200, 2, 5),
        (always_busy, 503, MAX_RETRIES as u64, MAX_RETRIES as u64 + 3),
    ] {
        let fake = FakeNode::start(Some(node_tls(&dir, "h1")), behaviour);
        let node = Node {
            config: &config.configs[0],
            sha256: String::new(),
            address: &fake.addr,
            access: Some(&access[0]),
        };
        let stage = Stage::new("test", Duration::from_secs(30));
        let started = Instant::now();
        let response = node
            .call(&stage, ("GET", wire::STATUS_PATH, None), 4096, None)
            .unwrap();
        let took = started.elapsed();
        assert_eq!(response.status, status);
        assert!(
            took >= Duration::from_secs(least) && took < Duration::from_secs(most),
            "{status}: {took:?}"
        );
    }
}

/// N5 (issue 39): a node's start time was not checked, and a start near u64::MAX
/// overflowed in merging the run. A start far from the ordered instant is refused; merging
/// extreme times saturates.
#[test]
fn a_start_time_out_of_range_is_refused_and_merging_never_overflows() {
    let result = NodeResult {
        node: "h1".into(),
        kernel: String::new(),
        started_unix_ns: u64::MAX - 5,
        duration_ns: crate::export::node::MAX_TIME_NS,
        interrupted: false,
        scheduling: None,
        workloads: Vec::new(),
        links: Vec::new(),
        underlay: Vec::new(),
    };
    let ordered = 1_800_000_000_000_000_000;
    let error = result.check_start(ordered).unwrap_err().to_string();
    assert!(
        error.contains("from the instant it was ordered to start"),
        "{error}"
    );
    let mut near = result.clone();
    near.started_unix_ns = ordered + 2_000_000_000;
    near.check_start(ordered).unwrap();
    near.started_unix_ns = ordered - wire::MAX_START_SKEW_NS - 1;
    assert!(near.check_start(ordered).is_err());
    let text = pathlab_lab::recipes::recipe("bufferbloat").unwrap();
    let point = pathlab_lab::spec::expand(text, true).unwrap().remove(0);
    let experiment = Experiment::parse(&point.text).unwrap().quick();
    let results: Vec<NodeResult> = experiment
        .nodes
        .iter()
        .map(|n| NodeResult {
            node: n.name.clone(),
            ..result.clone()
        })
        .collect();
    let run = merge(&experiment, &point, &results);
    assert_eq!(run.started_unix_ns, u64::MAX - 5);
}
