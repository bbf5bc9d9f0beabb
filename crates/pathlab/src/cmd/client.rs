//! What every measurement client command shares: the key, JSON output, saving, connecting.

use std::time::Duration;

use pathlab_io::measure::{Client, MeasureError};

use crate::cmd::server::read_key;
use crate::usage;

/// Options of every client command.
#[derive(Debug, clap::Args)]
pub struct ClientOptions {
    /// Authenticate with the pre-shared key in FILE (the server must have the same).
    #[arg(long, value_name = "FILE")]
    pub psk: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(short = 'J', long)]
    pub json: bool,
    /// Save the whole result (every sample) to FILE, for later plots.
    #[arg(long, value_name = "FILE")]
    pub save: Option<std::path::PathBuf>,
}

impl ClientOptions {
    /// Connects to `host` with the key, if any.
    pub fn connect(&self, host: &str) -> anyhow::Result<Client> {
        let key = read_key(self.psk.as_deref())?;
        Client::connect(host, key, Duration::from_secs(5)).map_err(measure_error)
    }

    /// Writes `result` to `--save`, if given.
    pub fn save(&self, result: impl FnOnce() -> pathlab_results::RunResult) -> anyhow::Result<()> {
        let Some(path) = &self.save else {
            return Ok(());
        };
        let file = pathlab_results::ResultFile::new(
            result(),
            std::env::args().collect(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs()),
        );
        std::fs::write(path, file.to_json())?;
        Ok(())
    }
}

/// A measurement error as the CLI reports it: the user's input (refused, unknown host,
/// wrong key) is a usage error.
pub fn measure_error(error: MeasureError) -> anyhow::Error {
    match error {
        MeasureError::Refused(_) | MeasureError::Resolve(_) | MeasureError::Auth(_) => usage(error),
        other => anyhow::Error::new(other),
    }
}
