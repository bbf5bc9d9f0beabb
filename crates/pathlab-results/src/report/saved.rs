//! Saving a result that has a page of its own (`pathlab analyze --out`, `pathlab twin
//! check`): its `result.json`, then the page drawn from it, which `pathlab report` draws
//! again from the file.

use std::path::{Path, PathBuf};

use super::{ReportError, ReportFiles, ReportSource, RESULT_FILE};
use crate::ResultFile;

/// What [`save_page`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedPage {
    /// The result file, `OUT/result.json` (with the plotted series).
    pub result: PathBuf,
    /// The report drawn from it.
    pub files: ReportFiles,
}

/// Why [`save_page`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The output directory could not be made.
    #[error("creating {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The result file could not be written.
    #[error("writing {}", path.display())]
    WriteResult {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The result has no page of its own (a run: the runs' report draws it).
    #[error("a run has no page of its own: pathlab report draws it with its recordings")]
    NoPage,
    /// The report could not be drawn or written.
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// Saves `file` into `out_dir`: `result.json` (a versioned result file with the series,
/// which `pathlab report` draws again), then its page ([`ReportSource::page`]).
pub fn save_page(file: ResultFile, out_dir: &Path) -> Result<SavedPage, SaveError> {
    std::fs::create_dir_all(out_dir).map_err(|source| SaveError::CreateDir {
        path: out_dir.to_owned(),
        source,
    })?;
    let result = out_dir.join(RESULT_FILE);
    std::fs::write(&result, file.to_json()).map_err(|source| SaveError::WriteResult {
        path: result.clone(),
        source,
    })?;
    let source = ReportSource::page(file).ok_or(SaveError::NoPage)?;
    let files = super::ReportConfig {
        source,
        out: out_dir.to_owned(),
        options: super::ReportOptions::default(),
    }
    .write()?;
    Ok(SavedPage { result, files })
}
