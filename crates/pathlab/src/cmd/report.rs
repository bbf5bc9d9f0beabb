//! `pathlab report`: re-plot saved lab runs as CSV files, figures and one HTML page.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pathlab_results::report::{
    find_results, load_run, sort_by_parameters, write_report, ReportOptions, RunData,
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

/// Where the report of `inputs` goes by default.
fn default_out(inputs: &[PathBuf]) -> PathBuf {
    if let [only] = inputs {
        if only.is_dir() {
            return only.clone();
        }
        if let Some(parent) = only.parent() {
            return if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_owned()
            };
        }
    }
    let secs = pathlab_os::unix_now_secs();
    PathBuf::from(format!("report-{secs}"))
}

/// Reads every run `inputs` name; a sweep's points in the order of their parameters.
pub fn load_runs(inputs: &[PathBuf]) -> anyhow::Result<Vec<RunData>> {
    let mut runs = Vec::new();
    for input in inputs {
        let mut group = Vec::new();
        for file in find_results(input).map_err(usage)? {
            group.push(load_run(&file).map_err(usage)?);
        }
        sort_by_parameters(&mut group);
        runs.extend(group);
    }
    Ok(runs)
}

/// Writes the report of `runs` into `out` and says where it is.
pub fn report(runs: &[RunData], out: &Path, compare: bool) -> anyhow::Result<()> {
    let files = write_report(runs, out, &ReportOptions { compare })?;
    let mut stderr = std::io::stderr().lock();
    for run in runs {
        for note in &run.notes {
            writeln!(stderr, "pathlab: note: {note}")?;
        }
    }
    println!(
        "report: {} ({} figures as PNG and SVG, {} CSV files)",
        files.html.display(),
        files.png.len(),
        files.csv.len()
    );
    Ok(())
}

/// A saved `pathlab inspect` watch or `pathlab analyze` at `path`, if that is what it is.
fn page_result(path: &Path) -> Option<pathlab_results::ResultFile> {
    let text = std::fs::read_to_string(path).ok()?;
    let file = pathlab_results::ResultFile::from_json(&text).ok()?;
    matches!(
        file.result,
        pathlab_results::RunResult::Inspect(_) | pathlab_results::RunResult::Analyze(_)
    )
    .then_some(file)
}

/// Runs `pathlab report`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if let [only] = args.results.as_slice() {
        if let Some(file) = page_result(only) {
            let out = args
                .out
                .clone()
                .unwrap_or_else(|| default_out(&args.results));
            let files = match &file.result {
                pathlab_results::RunResult::Inspect(report) => {
                    pathlab_results::report::inspect::write_inspect_report(
                        report,
                        &file.command,
                        &out,
                    )?
                }
                pathlab_results::RunResult::Analyze(analysis) => {
                    pathlab_results::report::analyze::write_analyze_report(
                        analysis,
                        &file.command,
                        &out,
                    )?
                }
                _ => unreachable!("checked"),
            };
            println!(
                "report: {} ({} figures as PNG and SVG, {} CSV files)",
                files.html.display(),
                files.png.len(),
                files.csv.len()
            );
            return Ok(());
        }
    }
    let runs = load_runs(&args.results)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(&args.results));
    report(&runs, &out, args.compare)
}
