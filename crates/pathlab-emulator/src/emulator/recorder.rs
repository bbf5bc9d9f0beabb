//! The threads that write recordings: a few for the whole process, whatever the number of
//! emulators (a thread per recording was a thread per link: 1,005 threads in a lab of
//! 1,000 links).
//!
//! A recording is a file and the [`RecordSender`]s its directions hold. Each batch of
//! lines they send is written and flushed in order; once the last sender is dropped the
//! file is flushed and closed and [`Finished::wait`] returns how writing it went, as
//! joining a thread of its own did.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use pathlab_os::files::{Dir, Made};
use pathlab_results::recording::{self, RecordingHeader, RecordingLine};

/// Writer threads at most (fewer on a machine with fewer cores): JSON lines cost a few
/// hundred nanoseconds each, so one thread keeps up with millions of packets a second.
const MAX_THREADS: usize = 4;

/// Each recording's write buffer: flushed after every batch, so it need not hold more than
/// one (a batch is what a direction finished since it last shipped, every 10 ms or so).
const BUFFER_BYTES: usize = 64 * 1024;

/// Where a recording's lines go.
#[derive(Debug)]
pub enum Record {
    /// An open file, kept open to the end (`emulate --record`).
    File(File),
    /// A file made anew in an output directory (`lab`, `node`: see
    /// [`pathlab_os::files::Dir::replace`]), opened to append each batch and closed again:
    /// a lab of 10,000 links would otherwise hold 10,000 files open for the whole run. Each
    /// reopening finds the file it made or nothing.
    Reopened {
        /// The directory, opened once.
        dir: Arc<Dir>,
        /// The file's name in it.
        name: String,
    },
}

impl From<File> for Record {
    fn from(file: File) -> Record {
        Record::File(file)
    }
}

/// A recording as its thread holds it.
enum Sink {
    Open(BufWriter<File>),
    Reopened(Arc<Dir>, Made),
}

impl Sink {
    /// Writes a batch of lines and flushes them.
    fn write(&mut self, batch: &[RecordingLine]) -> io::Result<()> {
        let write_to = |writer: &mut BufWriter<File>| {
            batch
                .iter()
                .try_for_each(|line| recording::write_line(&mut *writer, line))
                .and_then(|()| writer.flush())
        };
        match self {
            Sink::Open(writer) => write_to(writer),
            Sink::Reopened(dir, made) => {
                let file = dir.reopen(made).map_err(io::Error::other)?;
                write_to(&mut BufWriter::with_capacity(BUFFER_BYTES, file))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Open(writer) => writer.flush(),
            Sink::Reopened(..) => Ok(()),
        }
    }
}

enum Message {
    Open {
        id: u64,
        sink: Sink,
    },
    Lines {
        id: u64,
        batch: Vec<RecordingLine>,
    },
    Close {
        id: u64,
        done: mpsc::Sender<io::Result<()>>,
    },
}

/// Where a direction sends its finished records; clones share one recording.
#[derive(Clone)]
pub(super) struct RecordSender {
    id: u64,
    to: mpsc::Sender<Message>,
    _close: Arc<CloseOnDrop>,
}

impl RecordSender {
    /// Queues `batch` to be written after what this recording's senders sent before.
    pub(super) fn send(&self, batch: Vec<RecordingLine>) -> Result<(), ()> {
        self.to
            .send(Message::Lines { id: self.id, batch })
            .map_err(drop)
    }
}

/// Closes the recording when the last of its senders is gone.
struct CloseOnDrop {
    id: u64,
    to: mpsc::Sender<Message>,
    done: Mutex<Option<mpsc::Sender<io::Result<()>>>>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Some(done) = super::take_locked(&self.done) {
            let _ = self.to.send(Message::Close { id: self.id, done });
        }
    }
}

/// How writing a recording ended, once its last sender is gone.
pub(super) struct Finished(mpsc::Receiver<io::Result<()>>);

impl Finished {
    /// Waits for every line to be written and the file flushed.
    pub(super) fn wait(self) -> io::Result<()> {
        self.0
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the recording's writer ended")))
    }
}

/// Writes `header` to the recording's file and hands it to a writer thread for the lines
/// that follow.
pub(super) fn start(
    record: Record,
    header: &RecordingHeader,
) -> io::Result<(RecordSender, Finished)> {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let write_header = |file: File| -> io::Result<BufWriter<File>> {
        let mut writer = BufWriter::with_capacity(BUFFER_BYTES, file);
        recording::write_header(&mut writer, header)?;
        writer.flush()?;
        Ok(writer)
    };
    let sink = match record {
        Record::File(file) => Sink::Open(write_header(file)?),
        Record::Reopened { dir, name } => {
            let (file, made) = dir.make(&name).map_err(io::Error::other)?;
            write_header(file)?;
            Sink::Reopened(dir, made)
        }
    };
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let threads = threads()?;
    let to = threads[(id % threads.len() as u64) as usize].clone();
    to.send(Message::Open { id, sink })
        .map_err(|_| io::Error::other("the recording's writer ended"))?;
    let (done, finished) = mpsc::channel();
    let sender = RecordSender {
        id,
        to: to.clone(),
        _close: Arc::new(CloseOnDrop {
            id,
            to,
            done: Mutex::new(Some(done)),
        }),
    };
    Ok((sender, Finished(finished)))
}

/// The writer threads, started on first use; they live as long as the process.
fn threads() -> io::Result<&'static [mpsc::Sender<Message>]> {
    static THREADS: OnceLock<Vec<mpsc::Sender<Message>>> = OnceLock::new();
    if let Some(threads) = THREADS.get() {
        return Ok(threads);
    }
    let count = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_THREADS);
    let mut senders = Vec::with_capacity(count);
    for _ in 0..count {
        let (sender, receiver) = mpsc::channel();
        std::thread::Builder::new()
            .name("pathlab-recorder".into())
            .spawn(move || write_all(&receiver))?;
        senders.push(sender);
    }
    // Two callers at once: one set of threads wins, the other's end with their channels.
    Ok(THREADS.get_or_init(|| senders))
}

/// One writer thread: the recordings it holds, each with the first error it met (its later
/// lines are dropped, the error reported when it closes).
fn write_all(receiver: &mpsc::Receiver<Message>) {
    let mut open: HashMap<u64, (Sink, Option<io::Error>)> = HashMap::new();
    for message in receiver {
        match message {
            Message::Open { id, sink } => {
                open.insert(id, (sink, None));
            }
            Message::Lines { id, batch } => {
                let Some((sink, failed)) = open.get_mut(&id) else {
                    continue;
                };
                if failed.is_some() {
                    continue;
                }
                if let Err(error) = sink.write(&batch) {
                    *failed = Some(error);
                }
            }
            Message::Close { id, done } => {
                let result = match open.remove(&id) {
                    Some((_, Some(error))) => Err(error),
                    Some((mut sink, None)) => sink.flush(),
                    None => Ok(()),
                };
                let _ = done.send(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RecordingHeader {
        RecordingHeader {
            magic: recording::RECORDING_MAGIC.into(),
            version: recording::RECORDING_VERSION,
            pathlab_version: "test".into(),
            command: vec!["test".into()],
            clock_zero_unix_ns: 0,
            directions: Vec::new(),
            queue_sample_interval_ns: 10_000_000,
        }
    }

    /// Many recordings at once on the few threads: each file gets its own lines, in the
    /// order its senders sent them, and is complete when `wait` returns; those reopened
    /// for each batch as well as those kept open.
    #[test]
    fn many_recordings_share_the_threads_and_each_gets_its_own_lines_in_order() {
        let scratch = pathlab_os::testing::ScratchDir::new("recorder-threads");
        let out = Arc::new(Dir::output(scratch.root()).unwrap());
        let mut open = Vec::new();
        for k in 0..50u64 {
            let name = format!("r{k}.jsonl");
            let path = scratch.path(&name);
            let record = if k % 2 == 0 {
                Record::File(File::create(&path).unwrap())
            } else {
                Record::Reopened {
                    dir: Arc::clone(&out),
                    name,
                }
            };
            let (sender, finished) = start(record, &header()).unwrap();
            open.push((path, sender, finished));
        }
        for round in 0..20u64 {
            for (k, (_, sender, _)) in open.iter().enumerate() {
                let copy = sender.clone();
                copy.send(vec![RecordingLine::Spec {
                    at: pathlab_core::Instant::from_nanos(round * 1000 + k as u64),
                    dir: 0,
                    spec: format!("delay {k}ms"),
                }])
                .unwrap();
            }
        }
        for (path, sender, finished) in open {
            drop(sender);
            finished.wait().unwrap();
            let read =
                recording::read_recording(io::BufReader::new(File::open(&path).unwrap())).unwrap();
            let at: Vec<u64> = read
                .lines
                .iter()
                .map(|line| match line {
                    RecordingLine::Spec { at, .. } => at.as_nanos(),
                    other => panic!("{other:?}"),
                })
                .collect();
            let k = at[0];
            assert_eq!(
                at,
                (0..20).map(|round| round * 1000 + k).collect::<Vec<_>>()
            );
        }
    }
}
