//! One module per subcommand: its arguments and what it runs.

pub mod analyze;
pub mod args;
pub mod bloat;
pub mod bond;
pub mod capacity;
pub mod client;
pub mod emulate;
pub mod inspect;
pub mod lab;
pub mod metrics;
pub mod node;
pub mod owd;
pub mod report;
pub mod rfc6349;
pub mod rtt;
pub mod server;
pub mod shell;
pub mod sim;
pub mod spec;
pub mod tcp;
pub mod tune;
pub mod twin;

/// Reads a key file (`--psk`): its owner's only, as [`pathlab_os::files::read_secret`]
/// requires; any problem is a usage error.
pub fn read_key_file(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    pathlab_os::files::read_secret(path)
        .map_err(|error| crate::usage(anyhow::anyhow!("key file: {error}")))
}

/// Reads a bearer token file (`--token`), if one is named: its owner's only, at least 16
/// printable characters, as [`pathlab_http::read_token`] requires; any problem is a usage
/// error.
pub fn read_token_file(path: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    path.map(pathlab_http::read_token)
        .transpose()
        .map_err(crate::usage)
}

/// Parses a time on the command line (`-t`, `-i`, `--sample`, `--max-duration`): `10s`,
/// `250ms`, `1.5s`; a bare number is seconds, as in iperf3 and ping. (Inside a SPEC a
/// bare number is microseconds, as tc reads it; on the command line that would turn `-t 5`
/// into a 5 us test.) Zero is refused: every one of these times must pass.
pub fn parse_time(text: &str) -> Result<pathlab_core::Duration, String> {
    let time = pathlab_core::spec::parse_time_secs(text).map_err(|e| e.to_string())?;
    if time.is_zero() {
        return Err(format!("'{text}' is no time at all; give one above zero"));
    }
    Ok(time)
}

/// Parses a rate on the command line as a spec writes it (`20mbit`, `1gbit`); the command
/// bounds it.
pub fn parse_rate(text: &str) -> Result<pathlab_core::units::BitsPerSec, String> {
    pathlab_core::spec::parse_rate(text).map_err(|e| e.to_string())
}

/// A flag set when SIGINT or SIGTERM arrives ([`pathlab_os::process::termination_flag`]):
/// for the commands that stop their own loops (`lab`, `lab collect`, `node`). Blocks the
/// signals first, so call it before starting other threads.
pub fn stop_on_signals() -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use anyhow::Context as _;
    pathlab_os::process::termination_flag().context("setting up signal handling")
}

#[cfg(test)]
mod tests {
    use super::parse_time;
    use pathlab_core::Duration;

    #[test]
    fn bare_numbers_are_seconds_and_units_are_read() {
        assert_eq!(parse_time("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_time("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_time("100us"), Ok(Duration::from_micros(100)));
    }

    #[test]
    fn zero_negative_and_garbage_are_refused() {
        for bad in ["0", "0s", "-1", "inf", "NaN", "ten", "5 s", ""] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}

/// How the forwarding threads of the emulators a command runs are scheduled: the one
/// group of `--priority` and `--cpus` for `emulate`, `shell`, `lab` and `node`.
#[derive(clap::Args, Debug, Clone)]
pub struct SchedulingArgs {
    /// How the emulator's forwarding threads get the CPU: `realtime` (SCHED_FIFO, memory
    /// locked, where the process may; they sleep to each deadline, and keep their timing
    /// on a busy machine) or `normal` (they share the CPU with every other program).
    /// Without the privilege for `realtime` it says so once and runs at normal priority.
    #[arg(long, value_name = "realtime|normal", default_value = "realtime")]
    pub priority: pathlab_os::scheduling::Priority,
    /// Run the forwarding threads on these CPUs only, as `taskset -c` writes them (`1`,
    /// `0,2-3`); a lab or node has a thread per CPU listed.
    #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
    pub cpus: Option<CpuList>,
}

/// CPUs given on the command line, each one of the machine's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

fn parse_cpu_list(text: &str) -> Result<CpuList, String> {
    pathlab_os::scheduling::parse_cpus(text).map(CpuList)
}

impl SchedulingArgs {
    /// What the forwarding threads are to ask of the scheduler.
    pub fn request(&self) -> pathlab_os::scheduling::Request {
        pathlab_os::scheduling::Request {
            priority: self.priority,
            cpus: self.cpus.as_ref().map(|list| list.0.clone()),
        }
    }
}
