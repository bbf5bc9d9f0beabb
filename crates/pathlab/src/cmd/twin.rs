//! `pathlab twin`: measure a real path against a `pathlab server` and write its twin, a
//! file the emulator runs (`pathlab spec --twin FILE` prints it back).

use std::io::Write as _;

use anyhow::Context as _;
use pathlab_probe::control::Direction;
use pathlab_probe_driver::twin::{self, TwinConfig, TwinEvent};

use crate::usage;
use pathlab_results::report::saved::save_page;
use pathlab_results::{ResultFile, RunResult};
use pathlab_twin::check::{CheckRecord, PathFigures};

/// Where in `twin check --out DIR` the twin's lab keeps its own result and recordings
/// (`pathlab report DIR/twin` draws it as a lab run).
const TWIN_LAB_DIR: &str = "twin";

/// Arguments of `pathlab twin`: measure a path, or `check` a twin against it.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<TwinCommand>,
    #[command(flatten)]
    pub measure: MeasureArgs,
}

/// `pathlab twin`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TwinCommand {
    /// Run the same workloads on the real path and on its twin (in namespaces here: needs
    /// root), side by side: base RTT, bulk TCP each way with round trips beside it, loss.
    Check(CheckArgs),
}

/// Arguments of `pathlab twin check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The twin file (`pathlab twin`'s).
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
    #[command(flatten)]
    pub server: crate::cmd::args::ServerAddress,
    /// Where the check is saved: its result.json and report.html (both paths' curves
    /// overlaid; `pathlab report DIR/result.json` draws it again), the twin's lab in
    /// DIR/twin.
    #[arg(long, value_name = "DIR", default_value = "twin-check")]
    pub out: std::path::PathBuf,
    /// Bulk TCP's time each way (the idle round trips and each way's probes take half).
    #[arg(short = 't', long, value_name = "TIME", default_value = "10s", value_parser = crate::cmd::parse_time)]
    pub time: pathlab_core::Duration,
    /// Congestion control of bulk TCP's senders, the same on the path and on the twin
    /// (cubic, reno, bbr, ...; not the host's default, which differs between hosts).
    #[arg(short = 'C', long, value_name = "ALGO", default_value = pathlab_twin::check::CONGESTION)]
    pub congestion: String,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// Arguments of `pathlab twin HOST --out FILE`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each direction is measured in turn: packet trains for a rough \
capacity, then small probes at low load (base delay, the delay's variation, loss), then \
full-size probes at 1.5 times the capacity for 4 s and the smallest probes for 2 s (the \
bottleneck's rate, its buffer, how it drops, a packet-rate limit): those overfeed the path, \
which looks like an attack to whoever watches it; --gentle does without them and says what \
it could not learn."
)]
pub struct MeasureArgs {
    /// The pathlab server (NAME or ADDRESS, optionally :PORT).
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// Where to write the twin (TOML); a trace file of a rate that moves goes beside it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// The whole measurement, both directions (each takes half).
    #[arg(short = 't', long, value_name = "TIME", default_value = "60s", value_parser = crate::cmd::parse_time)]
    pub time: pathlab_core::Duration,
    /// The highest rate any probes go at (UDP payload), e.g. 50M; the server's own bound
    /// applies too.
    #[arg(long, value_name = "RATE")]
    pub max_rate: Option<String>,
    /// Do not overfeed the path: learn the delay, its variation and loss only.
    #[arg(long)]
    pub gentle: bool,
    #[command(flatten)]
    pub client: crate::cmd::client::ClientOptions,
}

/// The shortest `-t`: both directions' low load at least 5 s.
const MIN_TIME_S: f64 = 10.0;

impl MeasureArgs {
    fn config(&self, host: &str, out: &std::path::Path) -> anyhow::Result<TwinConfig> {
        let max_rate = self
            .max_rate
            .as_deref()
            .map(pathlab_core::spec::parse_rate)
            .transpose()
            .map_err(|e| usage(anyhow::anyhow!("--max-rate: {e}")))?;
        let seconds = self.time.as_secs_f64();
        if seconds < MIN_TIME_S {
            return Err(usage(anyhow::anyhow!(
                "-t {seconds}s is too short: a twin takes at least {MIN_TIME_S}s (5 s of low \
                 load each way)"
            )));
        }
        let stem = out
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| usage(anyhow::anyhow!("--out {}: not a file name", out.display())))?
            .to_owned();
        Ok(TwinConfig {
            target: self.client.target(host)?,
            host: host.to_owned(),
            time_per_direction: std::time::Duration::from_secs_f64(seconds / 2.0),
            max_rate,
            gentle: self.gentle,
            trace_stem: stem,
        })
    }
}

/// Runs `pathlab twin`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(TwinCommand::Check(check)) = &args.command {
        return run_check(check);
    }
    let args = &args.measure;
    refuse_save(
        &args.client,
        "the twin file (--out) holds its figures, --json prints them",
    )?;
    let (Some(host), Some(out)) = (&args.host, &args.out) else {
        return Err(usage(anyhow::anyhow!(
            "pathlab twin HOST --out FILE: both are needed (or pathlab twin check FILE HOST)"
        )));
    };
    let config = args.config(host, out)?;
    let gentle = config.gentle;
    let longer_s = pathlab_twin::measure::longer_seconds(config.time_per_direction.as_secs_f64());
    let measured = twin::run(&config, &mut |event| say(event, gentle, longer_s))
        .map_err(crate::cmd::client::measure_error)?;
    // What is written must read back: a figure the reader refuses (an interval to
    // infinity, 2026-12-07) is this program's defect, said before any file is written.
    let twin_text = measured.file.to_toml();
    pathlab_twin::file::TwinFile::parse(&twin_text).map_err(|e| {
        anyhow::anyhow!("the twin measured does not read back (a defect of pathlab's): {e}")
    })?;
    let directory = out.parent().filter(|p| !p.as_os_str().is_empty());
    for (name, text) in &measured.traces {
        let path = directory.map_or_else(|| name.into(), |d| d.join(name));
        write(&path, text)?;
    }
    write(out, &twin_text)?;
    if args.client.output.json {
        let direction = |d: &pathlab_twin::file::DirectionTwin| serde_json::json!({ "spec": d.spec.to_string(), "figures": d.figures });
        let cannot: Vec<_> = measured
            .cannot
            .iter()
            .map(|(d, what)| serde_json::json!({ "direction": d.name(), "what": what }))
            .collect();
        let value = serde_json::json!({
            "file": out.display().to_string(),
            "host": measured.file.host,
            "up": direction(&measured.file.up),
            "down": direction(&measured.file.down),
            "traces": measured.traces.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "cannot": cannot,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    for (name, direction) in [("up", &measured.file.up), ("down", &measured.file.down)] {
        writeln!(stdout, "{name:5} {}", direction.spec)?;
    }
    for (direction, what) in &measured.cannot {
        writeln!(stdout, "not learned {}: {what}", direction.name())?;
    }
    writeln!(stdout, "twin written to {}", out.display())?;
    Ok(())
}

/// Runs `pathlab twin check FILE HOST`: the real path first, then the twin in
/// namespaces; exit 1 when the twin does not hold.
fn run_check(args: &CheckArgs) -> anyhow::Result<()> {
    refuse_save(
        &args.client,
        "--out DIR holds its whole result, result.json",
    )?;
    let twin = crate::cmd::spec::read_twin(&args.file)?;
    let target = args.client.target(&args.server.host)?;
    let seconds = args.time.as_secs_f64().round() as u64;
    if seconds < 2 {
        return Err(usage(anyhow::anyhow!("-t must be at least 2s")));
    }
    let plan = pathlab_twin::check::Plan::for_bulk(seconds, &args.congestion);
    let real = twin::check_real(&target, &plan, &mut |step| {
        eprintln!("twin check, the path: {step}");
    })
    .map_err(crate::cmd::client::measure_error)?;
    eprintln!(
        "twin check, the twin: the same in namespaces ({} s)",
        pathlab_lab::twin_check::length_s(&plan)
    );
    let dir = match args.file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    let (twin_up, twin_down) = (twin.up.spec_beside(dir), twin.down.spec_beside(dir));
    let command: Vec<String> = std::env::args().collect();
    let twin_runs = pathlab_lab::twin_check::run_twin(
        &twin_up,
        &twin_down,
        &plan,
        &args.out.join(TWIN_LAB_DIR),
        command.clone(),
    )?;
    let record = CheckRecord {
        host: args.server.host.clone(),
        twin_up,
        twin_down,
        congestion: plan.congestion.clone(),
        real,
        twin: twin_runs,
    };
    let comparison = record.comparison();
    let (real, twin_figures) = (PathFigures::of(&record.real), PathFigures::of(&record.twin));
    let file = ResultFile::new(
        RunResult::TwinCheck(Box::new(record)),
        command,
        Some(pathlab_os::unix_now_secs()),
    );
    let saved = save_page(file, &args.out)?;
    eprintln!(
        "twin check: wrote {}, {} ({} figures as PNG and SVG); the twin's lab in {}",
        saved.result.display(),
        saved.files.html.display(),
        saved.files.png.len(),
        args.out.join(TWIN_LAB_DIR).display()
    );
    if args.client.output.json {
        let value = serde_json::json!({
            "congestion": plan.congestion,
            "real": real,
            "twin": twin_figures,
            "rows": comparison.rows,
            "holds": comparison.holds(),
            "result": saved.result.display().to_string(),
            "report": saved.files.html.display().to_string(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "{:28} {:>10} {:>10} {:>9} {:>8}",
            "figure", "path", "twin", "error", "bound"
        )?;
        for row in &comparison.rows {
            let (error, bound) = row.error_and_bound();
            writeln!(
                stdout,
                "{:28} {:>10.3} {:>10.3} {error:>9} {bound:>8}{}",
                row.name,
                row.real,
                row.twin,
                if row.within { "" } else { "  MISS" }
            )?;
        }
        writeln!(stdout, "verdict: {}", comparison.verdict())?;
    }
    if comparison.holds() {
        Ok(())
    } else {
        Err(anyhow::anyhow!("the twin does not hold"))
    }
}

/// Makes `path` anew (what had its name is removed first, never followed) and writes
/// `text`.
fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut file = pathlab_os::files::create_replacing(path)
        .map_err(|e| anyhow::Error::new(e.into_io()))
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Progress on stderr; `longer_s`: a longer saturating phase's length.
fn say(event: TwinEvent<'_>, gentle: bool, longer_s: f64) {
    match event {
        TwinEvent::Bounds { max_rate_bps } if !gentle => eprintln!(
            "twin: this measurement overfeeds the path for about 6 s each way ({} s more where \
             its rate may move), at up to {:.2} Mbit/s (--max-rate; --gentle not to), then \
             runs bulk TCP twice for {} s each way",
            longer_s,
            max_rate_bps / 1e6,
            pathlab_twin::calibrate::TCP_SECONDS
        ),
        TwinEvent::Bounds { .. } => {}
        TwinEvent::Capacity { direction } => eprintln!(
            "twin {}: packet trains and a constant-rate stream of up to {} MiB (the rough \
             capacity, a token bucket's sustained rate)",
            direction_name(direction),
            pathlab_probe::shaper::DEFAULT_BUDGET_BYTES >> 20
        ),
        TwinEvent::Phase {
            direction,
            name,
            phase,
        } => eprintln!(
            "twin {}: {name}: {} probes of {} bytes at {:.3} Mbit/s",
            direction_name(direction),
            phase.count,
            phase.payload_bytes,
            phase.rate_bps / 1e6
        ),
        TwinEvent::Tcp {
            direction,
            after_idle: false,
        } => eprintln!(
            "twin {}: bulk TCP for {} s (the rate TCP meets)",
            direction_name(direction),
            pathlab_twin::calibrate::TCP_SECONDS
        ),
        TwinEvent::Tcp {
            direction,
            after_idle: true,
        } => eprintln!(
            "twin {}: bulk TCP for {} s after {} s of pings alone (how the path restarts)",
            direction_name(direction),
            pathlab_twin::calibrate::TCP_SECONDS,
            pathlab_twin::restart::IDLE_BEFORE_S
        ),
        TwinEvent::Cannot { direction, what } => {
            eprintln!("twin {}: will not learn {what}", direction_name(direction));
        }
    }
}

fn direction_name(direction: Direction) -> &'static str {
    match direction {
        Direction::Up => "up",
        Direction::Down => "down",
    }
}

/// `--save`, which the other client commands take, is refused here rather than ignored:
/// `instead` says where the command's results go.
fn refuse_save(client: &crate::cmd::client::ClientOptions, instead: &str) -> anyhow::Result<()> {
    match &client.save {
        Some(file) => Err(usage(anyhow::anyhow!(
            "--save {}: pathlab twin does not save its samples; {instead}",
            file.display()
        ))),
        None => Ok(()),
    }
}
