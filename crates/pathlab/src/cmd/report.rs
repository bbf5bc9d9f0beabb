//! `pathlab report`: re-plot saved lab runs as CSV files, figures and one HTML page.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pathlab_results::report::{
    default_out, write_report, ReportConfig, ReportFiles, ReportOptions, ReportSource, RunData,
};

use crate::usage;

/// Arguments of `pathlab report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
RESULT is a run's result.json, a run's directory, or a directory whose subdirectories are
runs (a sweep, as `pathlab lab` writes it); or one file `pathlab inspect --save` or
`pathlab analyze --out` wrote. The report goes to DIR/report.html, with every
series as DIR/csv/*.csv and every figure as DIR/plots/*.png and *.svg.

Example (the three queue sizes of the bufferbloat recipe on shared figures):
  pathlab report lab-bufferbloat-1700000000 --compare")]
pub struct Args {
    /// Saved runs to report on.
    #[arg(value_name = "RESULT", required = true, num_args = 1..)]
    pub results: Vec<PathBuf>,
    /// Directory for the report (default: the input's directory when there is one input,
    /// else report-UNIXTIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also draw the same series of every run on one figure (RTT per probe of each queue
    /// size, ...).
    #[arg(long)]
    pub compare: bool,
}

impl Args {
    /// The report to write: the results read (an unreadable one is a usage error) and
    /// where it goes.
    fn config(&self) -> anyhow::Result<ReportConfig> {
        let source = ReportSource::load(&self.results).map_err(usage)?;
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| default_out(&self.results, pathlab_os::unix_now_secs()));
        Ok(ReportConfig {
            source,
            out,
            options: ReportOptions {
                compare: self.compare,
            },
        })
    }
}

/// Writes the report of `runs` into `out` and says where it is.
pub fn report(runs: &[RunData], out: &Path, compare: bool) -> anyhow::Result<()> {
    let files = write_report(runs, out, &ReportOptions { compare })?;
    print_notes(runs)?;
    print_files(&files);
    Ok(())
}

/// Each run's notes (what it could not show, and why), on stderr.
fn print_notes(runs: &[RunData]) -> anyhow::Result<()> {
    let mut stderr = std::io::stderr().lock();
    for run in runs {
        for note in &run.notes {
            writeln!(stderr, "pathlab: note: {note}")?;
        }
    }
    Ok(())
}

fn print_files(files: &ReportFiles) {
    println!(
        "report: {} ({} figures as PNG and SVG, {} CSV files)",
        files.html.display(),
        files.png.len(),
        files.csv.len()
    );
}

/// Runs `pathlab report`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let files = config.write()?;
    if let ReportSource::Runs(runs) = &config.source {
        print_notes(runs)?;
    }
    print_files(&files);
    Ok(())
}
