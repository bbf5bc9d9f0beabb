//! An application that works in blocks (seed 003: Lotus Notes moved 16 kB application
//! blocks, each waiting for the other end before the next, so it ran at one block per
//! round trip whatever TCP's window): a client that writes a block and waits for a
//! one-byte answer, and the responder that answers. The `blocks` workload of labs.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pathlab_os::tcp_socket::{self, TcpSocketOptions};
use pathlab_probe::tcp::BlocksReport;

/// Answers every block of `size` bytes on every connection `listener` accepts with one
/// byte, until `stop` is set (checked every 100 ms) and the connections close.
pub fn respond(listener: &TcpListener, size: usize, stop: &AtomicBool) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut connections = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                connections.push(std::thread::spawn(move || answer(stream, size)));
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => return Err(error),
        }
    }
    for connection in connections {
        let _ = connection.join();
    }
    Ok(())
}

fn answer(mut stream: TcpStream, size: usize) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut block = vec![0u8; size];
    while stream.read_exact(&mut block).is_ok() {
        if stream.write_all(&[1]).is_err() {
            break;
        }
    }
}

/// Writes blocks of `size` bytes to `to` for `duration`, each after the answer to the one
/// before, with `congestion` control (the kernel's default if `None`), and says how many
/// were answered and how long each took; the connection may take `connect_timeout`.
///
/// The congestion control shapes what the blocks show: cubic or reno send a block at once,
/// while BBR paces it at a multiple of the bandwidth it measured, which an application
/// that pauses each round trip keeps low (16 KiB blocks at 25 ms each way: paced at
/// 7.2 Mbit/s, a block took 67 ms against 51 with cubic).
pub fn run(
    to: SocketAddr,
    size: usize,
    duration: Duration,
    congestion: Option<&str>,
    connect_timeout: Duration,
) -> io::Result<BlocksReport> {
    let options = TcpSocketOptions {
        congestion: congestion.map(str::to_owned),
        ..TcpSocketOptions::default()
    };
    let mut stream = tcp_socket::connect_within(to, &options, connect_timeout)?;
    stream.set_nodelay(true)?;
    // A block that takes longer than the whole run to be answered ends it.
    stream.set_read_timeout(Some(duration.max(Duration::from_secs(1))))?;
    let block = vec![0x42u8; size];
    let mut times = Vec::new();
    let start = Instant::now();
    let mut answer = [0u8; 1];
    while start.elapsed() < duration {
        let sent = Instant::now();
        stream.write_all(&block)?;
        stream.read_exact(&mut answer)?;
        times.push(sent.elapsed().as_nanos() as i64);
    }
    let elapsed = start.elapsed();
    let blocks = times.len() as u64;
    Ok(BlocksReport {
        size: size as u32,
        blocks,
        duration_ns: elapsed.as_nanos() as u64,
        throughput_bps: (blocks * size as u64) as f64 * 8.0 / elapsed.as_secs_f64(),
        block_time: pathlab_probe::rtt::percentiles(times.into_iter()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_block_is_answered_once_and_counted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let responder = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || respond(&listener, 1000, &stop))
        };
        let report = run(
            address,
            1000,
            Duration::from_millis(200),
            Some("reno"),
            Duration::from_secs(5),
        )
        .unwrap();
        stop.store(true, Ordering::SeqCst);
        responder.join().unwrap().unwrap();
        assert!(report.blocks > 10, "{report:?}");
        let expected = (report.blocks * 1000) as f64 * 8.0 / (report.duration_ns as f64 * 1e-9);
        assert!((report.throughput_bps - expected).abs() < 1.0);
        assert!(
            report.block_time.min_ns > 0 && report.block_time.max_ns >= report.block_time.p50_ns
        );
    }
}
