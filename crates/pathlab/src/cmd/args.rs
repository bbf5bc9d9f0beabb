//! The arguments several commands share, each defined once with one help text, for the
//! commands to flatten (`#[command(flatten)]`) into their own.
//!
//! What is not here, and why: `sim`'s `-t` (30 s), `bloat`'s (each phase's length), and
//! `emulate`'s and `inspect`'s (none: they run until stopped) each mean something of their
//! own; `tune`'s HOST is optional and says when it is needed; the server's `--psk` is the
//! key it requires, not the one a client offers; the bond's `--psk` and `--key` belong to
//! its two ends alone (`bond::Common`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::usage;

/// The pathlab server a measurement client connects to: `rtt`, `owd`, `tcp`, `capacity`
/// and `bloat`.
#[derive(Debug, clap::Args)]
pub struct ServerAddress {
    /// The pathlab server (NAME or ADDRESS, optionally :PORT).
    #[arg(value_name = "HOST")]
    pub host: String,
}

/// How long a measurement runs, 10 s unless `-t` says otherwise: `rtt`, `owd` (each
/// direction) and `tcp` (with `--rfc6349`, each of its throughput tests).
#[derive(Debug, clap::Args)]
pub struct TestTime {
    /// How long each test runs.
    #[arg(short = 't', long, value_name = "TIME", default_value = "10s", value_parser = crate::cmd::parse_time)]
    pub time: pathlab_core::Duration,
}

/// `-J`: what a command prints on stdout is JSON. What that JSON holds (and leaves out,
/// where it differs from the text) each command says in its own help.
#[derive(Debug, clap::Args)]
pub struct JsonOutput {
    /// Print JSON instead of text.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// The pre-shared key a measurement client authenticates with (`--psk`): every client
/// command and `tune`.
#[derive(Debug, clap::Args)]
pub struct ClientKey {
    /// Authenticate with the pre-shared key in FILE (the server must have the same; only
    /// its owner may read the file).
    #[arg(long, value_name = "FILE")]
    pub psk: Option<PathBuf>,
}

impl ClientKey {
    /// Reads the key file, if one was given.
    pub fn read(&self) -> anyhow::Result<Option<pathlab_probe::auth::Key>> {
        read_key(self.psk.as_deref())
    }
}

/// Reads a measurement key file, a client's (`--psk` of [`ClientKey`]) or the server's (a
/// usage error when it is missing, too short or open to other users).
pub fn read_key(path: Option<&Path>) -> anyhow::Result<Option<pathlab_probe::auth::Key>> {
    let Some(path) = path else { return Ok(None) };
    let contents = crate::cmd::read_key_file(path)?;
    let key = pathlab_probe::auth::Key::from_file_contents(&contents)
        .with_context(|| format!("key file '{}'", path.display()))
        .map_err(usage)?;
    Ok(Some(key))
}

/// The directions a `--direction` of `owd` and `capacity` asks for: `up`, `down`, or both
/// (up first) for anything else (`both`, its default).
pub fn directions(choice: &str) -> Vec<pathlab_probe::control::Direction> {
    use pathlab_probe::control::Direction;
    match choice {
        "up" => vec![Direction::Up],
        "down" => vec![Direction::Down],
        _ => vec![Direction::Up, Direction::Down],
    }
}
