//! `pathlab lab`: experiments on namespaced topologies, and `lab clean`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use pathlab_core::format::{self, Digits};
use pathlab_lab::recipes::{recipe, RECIPES};
use pathlab_lab::run::RunOptions;
use pathlab_lab::spec::{expand, Experiment, SweepPoint};
use pathlab_lab::summary::{rtt_summaries, sawtooths};

use crate::usage;

/// Arguments of `pathlab lab`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// A built-in recipe (bufferbloat, owd-probe, modem-pps, ...) or an experiment spec file (TOML, docs/lab.md).
    #[arg(value_name = "RECIPE|SPEC.toml")]
    pub experiment: Option<String>,
    /// The short form of the experiment (its `quick` length).
    #[arg(long)]
    pub quick: bool,
    /// Directory for the results (default: lab-NAME-UNIXTIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed of the emulators' random choices.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Print the experiment's spec (to copy and edit) instead of running it.
    #[arg(long)]
    pub print: bool,
    #[command(flatten)]
    pub scheduling: crate::cmd::SchedulingArgs,
    /// `--control ADDR`: while it runs, serve each emulated link's HTTP API (read and
    /// change its spec, its stats) and Prometheus metrics of every link on ADDR (see
    /// docs/lab.md).
    #[command(flatten)]
    pub control: crate::cmd::metrics::ControlArgs,
}

/// Lab actions.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Remove what killed pathlab runs left behind: interfaces killed emulators had swapped
    /// (`emulate --iface`, put back as they were), stale control sockets and locks, and in
    /// this namespace the nftables tables and IPv4 forwarding of killed shells (tables
    /// pathlab recorded making, never one by its name). Running emulators and shells, and
    /// other namespaces and interfaces (a killed run leaves none), are left alone.
    Clean,
    /// Write the lab for an engine that runs it beyond this machine's namespaces: a KNE
    /// topology (Kubernetes) or a containerlab one, and each node's config, which `pathlab
    /// node` runs in its pod or container (docs/engines.md).
    Export(ExportArgs),
    /// Run a lab exported to an engine, whose nodes the engine started (`pathlab node` in
    /// each pod or container): wait until every node is ready, start them all at one
    /// instant, and gather their results, recordings and outputs into one result.json and
    /// report, as `pathlab lab` writes them on one machine (docs/engines.md).
    Collect(CollectArgs),
}

/// Arguments of `pathlab lab collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// The lab as it was exported (same recipe or file, --quick, --point and --seed): each
    /// node's config must be the one the export wrote.
    #[command(flatten)]
    pub lab: ExportedLab,
    /// Each node's control address, `{node}` and `{lab}` replaced by their names:
    /// `clab-{lab}-{node}:8080` (containerlab), `service-{node}.{lab}.svc:8080` (KNE, from
    /// inside the cluster), or `NODE=HOST:PORT,...` for each node by name.
    #[arg(long, value_name = "PATTERN", default_value = "{node}:8080")]
    pub address: String,
    /// The nodes' bearer token, from the first line of FILE (their --control-token): the
    /// export's DIR/token.
    #[arg(long, value_name = "FILE")]
    pub token: Option<PathBuf>,
    /// Directory for the results (default: lab-NAME-UNIXTIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How long to wait for every node to be ready, and for their results after the run.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub wait: u64,
}

/// Arguments of `pathlab lab export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub engine: Engine,
}

/// The engines a lab exports to.
#[derive(Debug, clap::Subcommand)]
pub enum Engine {
    /// KNE on Kubernetes: DIR/LAB.pb.txt (text protobuf of KNE's topo.proto, `vendor: HOST`
    /// nodes) and DIR/NODE.toml for each node; then `kne create DIR/LAB.pb.txt`.
    Kne(EngineArgs),
    /// containerlab on one machine: DIR/LAB.clab.yml (`linux` nodes) and DIR/NODE.toml for
    /// each node; then `containerlab deploy -t DIR/LAB.clab.yml`.
    Containerlab(EngineArgs),
}

/// What `pathlab lab export ENGINE` takes.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// The lab, one sweep point of it.
    #[command(flatten)]
    pub lab: ExportedLab,
    /// Directory for the topology, the node configs and the control token (created if
    /// missing; files of the same names are replaced, but a valid token file is kept).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The container image every node runs; it must have `pathlab` on its PATH.
    #[arg(long, value_name = "IMAGE", default_value = pathlab_engines::export::DEFAULT_IMAGE)]
    pub image: String,
}

/// Which lab an export is (and a collection was exported as): `lab export` and `lab
/// collect` take the same.
#[derive(Debug, clap::Args)]
pub struct ExportedLab {
    /// A built-in recipe or an experiment spec file, as `pathlab lab` takes them.
    #[arg(value_name = "RECIPE|SPEC.toml")]
    pub experiment: String,
    /// The short form of the experiment (its `quick` length, its `quick_sweep` values).
    #[arg(long)]
    pub quick: bool,
    /// Which run of a sweep, 1 to the number of runs (an engine runs one topology at a
    /// time; without it, a sweep is refused with its runs listed).
    #[arg(long, value_name = "N")]
    pub point: Option<usize>,
    /// Seed of the emulators' random choices.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

/// Reads the experiment's text: a recipe's or a file's.
fn experiment_text(name: &str) -> anyhow::Result<(String, Option<String>)> {
    if let Some(text) = recipe(name) {
        return Ok((text.to_owned(), None));
    }
    if !name.contains('.') && !name.contains('/') {
        return Err(usage(anyhow::anyhow!(
            "no recipe '{name}' (recipes: {}); a spec file's name ends in .toml",
            RECIPES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let text = std::fs::read_to_string(name)
        .with_context(|| format!("cannot read '{name}'"))
        .map_err(usage)?;
    Ok((text, Some(name.to_owned())))
}

/// A spec error as a usage error naming `file` (none for a recipe).
fn spec_error(file: Option<&str>) -> impl Fn(pathlab_lab::SpecFileError) -> anyhow::Error + '_ {
    move |mut e| {
        e.file = file.map(str::to_owned);
        usage(e)
    }
}

fn run_experiment(args: &Args, name: &str) -> anyhow::Result<()> {
    let (text, file) = experiment_text(name)?;
    if args.print {
        print!("{text}");
        return Ok(());
    }
    let named = spec_error(file.as_deref());
    // Every sweep point is checked before anything is built.
    let mut runs = Vec::new();
    for point in expand(&text, args.quick).map_err(&named)? {
        let experiment = Experiment::parse(&point.text).map_err(&named)?;
        let experiment = if args.quick {
            experiment.quick()
        } else {
            experiment
        };
        runs.push((point, experiment));
    }
    pathlab_os::require_net_admin("pathlab lab").map_err(usage)?;
    let control = crate::cmd::metrics::Control::bind(&args.control)?;
    if let Some(control) = &control {
        control.announce(&format!(
            "links' control: http://{addr}/api/v1/links, metrics http://{addr}/metrics",
            addr = control.server.local_addr()
        ));
    }
    let (control, trace_dir) = match control {
        Some(control) => (Some(Arc::new(control.server)), control.traces.map(Arc::new)),
        None => (None, None),
    };
    let stop = crate::cmd::stop_on_signals()?;
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = pathlab_os::unix_now_secs();
        PathBuf::from(format!("lab-{}-{secs}", runs[0].1.name))
    });
    let mut stdout = std::io::stdout().lock();
    let mut saved = Vec::new();
    for (point, experiment) in &runs {
        let dir = if point.label.is_empty() {
            out.clone()
        } else {
            out.join(point.label.replace('=', "-").replace(", ", "_"))
        };
        writeln!(
            stdout,
            "{}{}: {} s, results in {}",
            experiment.name,
            if point.label.is_empty() {
                String::new()
            } else {
                format!(" ({})", point.label)
            },
            experiment.duration.as_secs_f64(),
            dir.display()
        )?;
        stdout.flush()?;
        let run = pathlab_lab::run::run(
            experiment,
            point,
            &RunOptions {
                out: dir.clone(),
                seed: args.seed,
                stop: Arc::clone(&stop),
                control: control.clone(),
                trace_dir: trace_dir.clone(),
                scheduling: args.scheduling.request(),
            },
        )?;
        let file = pathlab_results::ResultFile::new(
            pathlab_results::RunResult::Lab(Box::new(run.clone())),
            std::env::args().collect(),
            Some(run.started_unix_ns / 1_000_000_000),
        );
        std::fs::write(dir.join("result.json"), file.to_json())
            .with_context(|| format!("writing {}", dir.join("result.json").display()))?;
        saved.push(dir.clone());
        print_summary(&mut stdout, experiment, &run, &dir)?;
        if run.interrupted {
            drop(stdout);
            write_report(&saved, &out)?;
            println!(
                "interrupted: what was recorded so far is in {}",
                dir.display()
            );
            return Err(anyhow::anyhow!("interrupted"));
        }
    }
    drop(stdout);
    write_report(&saved, &out)
}

/// What `pathlab lab` says of a run once it is over (its result in `dir`): failures,
/// warnings, and each workload's figures beside their theory.
fn print_summary(
    stdout: &mut impl std::io::Write,
    experiment: &Experiment,
    run: &pathlab_results::lab::LabRun,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    for workload in &run.workloads {
        if let pathlab_results::lab::LabOutcome::Failed(why) = &workload.outcome {
            writeln!(stdout, "  {}: failed: {why}", workload.name)?;
        }
    }
    // Before the figures: they may describe the emulator rather than the links.
    for warning in run.late_warnings() {
        writeln!(stdout, "  warning: {warning}")?;
    }
    for note in run.change_notes() {
        writeln!(stdout, "  note: {note}")?;
    }
    for rtt in rtt_summaries(experiment, run) {
        print_rtt_summary(stdout, &rtt)?;
    }
    for sawtooth in sawtooths(experiment, run, dir) {
        write!(
            stdout,
            "  {}: the queue at {} overflowed every {:.2} s (median of {} cycles)",
            sawtooth.name, sawtooth.link, sawtooth.period_s, sawtooth.cycles
        )?;
        if let Some(theory) = sawtooth.theory_s {
            write!(stdout, "; one Reno flow's sawtooth: {theory:.2} s")?;
        }
        writeln!(stdout)?;
    }
    for workload in &run.workloads {
        print_workload_figures(stdout, workload)?;
    }
    if experiment.name == pathlab_lab::modem_pps::RECIPE {
        for line in pathlab_lab::modem_pps::summary_lines(run) {
            writeln!(stdout, "  {line}")?;
        }
    }
    Ok(())
}

/// Seconds as milliseconds with one decimal, as the run's summary writes them.
fn summary_ms(seconds: f64) -> String {
    format::in_millis(seconds, Digits::fixed(1))
}

/// An RTT workload's line of the summary: its percentiles and plateau, which clock timed
/// them, and the plateau's theory (base RTT plus a full queue) when the path has one.
fn print_rtt_summary(
    stdout: &mut impl std::io::Write,
    rtt: &pathlab_lab::summary::RttSummary,
) -> anyhow::Result<()> {
    write!(
        stdout,
        "  {}: RTT p50 {} ms, p99 {} ms, plateau {} ms",
        rtt.name,
        summary_ms(rtt.p50_s),
        summary_ms(rtt.p99_s),
        summary_ms(rtt.plateau_s)
    )?;
    write!(stdout, ", {}", rtt.timed_by.describe())?;
    if let Some(theory) = rtt.theory {
        if let (Some(plateau), Some(queue), Some(rate)) = (
            theory.plateau_rtt_s,
            theory.queue_packets,
            theory.bottleneck_bps,
        ) {
            write!(
                stdout,
                " (theory {} ms = base {} + {queue} packets x 1514 B at {}; {})",
                summary_ms(plateau),
                summary_ms(theory.base_rtt_s),
                format::rate(rate, Digits::fixed(2)),
                format::fraction_as_percent(
                    rtt.plateau_s / plateau - 1.0,
                    Digits::fixed(1).signed()
                )
            )?;
        }
    }
    writeln!(stdout)?;
    Ok(())
}

/// A workload's lines of the summary: a TCP workload's goodput against the Mathis bound,
/// a blocks workload's throughput against a block per round trip, what inspect said of
/// each connection, and a one-way workload's rates, losses and delay trend.
fn print_workload_figures(
    stdout: &mut impl std::io::Write,
    workload: &pathlab_results::lab::LabWorkload,
) -> anyhow::Result<()> {
    use pathlab_results::lab::LabOutcome;
    if let LabOutcome::Tcp(report) = &workload.outcome {
        let retransmitted = report.retransmitted_segments();
        write!(
            stdout,
            "  {}: goodput {}, {retransmitted} segments retransmitted",
            workload.name,
            format::rate(report.up_bps + report.down_bps, Digits::fixed(2)),
        )?;
        if let Some(bound) = workload.path.and_then(|p| p.mathis_bps) {
            write!(
                stdout,
                " (Mathis bound {})",
                format::rate(bound, Digits::fixed(2))
            )?;
        }
        // A result of the path, not a failure: what got through is the goodput.
        if let Some(starved) = report.starved() {
            write!(stdout, "; {}", starved.summary())?;
        }
        writeln!(stdout)?;
    }
    if let LabOutcome::Blocks(report) = &workload.outcome {
        write!(
            stdout,
            "  {}: {} blocks of {} B answered, {}, block time p50 {} ms",
            workload.name,
            report.blocks,
            report.size,
            format::rate(report.throughput_bps, Digits::fixed(2)),
            summary_ms(report.block_time.p50_ns as f64 * 1e-9)
        )?;
        if let Some(path) = workload.path {
            write!(
                stdout,
                " (a block per round trip: {})",
                format::rate(
                    pathlab_results::lab::blocks_bound_bps(report.size, &path),
                    Digits::fixed(2)
                )
            )?;
        }
        writeln!(stdout)?;
    }
    for connection in workload.inspect.iter().flat_map(|i| &i.connections) {
        writeln!(stdout, "    inspect: {}", connection.verdict.sentence)?;
    }
    if let LabOutcome::Owd(result) = &workload.outcome {
        writeln!(
            stdout,
            "  {}: sent at {} ({:.0} packets/s), {:.0} packets/s arrived, lost {}, delay trend {:+.0} us/s (95% CI +-{:.0}): {}",
            workload.name,
            format::rate(result.achieved_rate_bps, Digits::fixed(2)),
            result.achieved_pps,
            result.delivered_pps().unwrap_or(0.0),
            result.sequence.lost,
            result.owd.trend_us_per_s,
            result.owd.trend_ci95_us_per_s,
            result.owd.verdict.text()
        )?;
    }
    Ok(())
}

/// The report of every saved sweep point, with their series compared on shared figures.
fn write_report(saved: &[PathBuf], out: &std::path::Path) -> anyhow::Result<()> {
    let context = || {
        format!(
            "making the report (the results are saved in {})",
            out.display()
        )
    };
    let mut runs = Vec::new();
    for dir in saved {
        runs.push(pathlab_results::report::load_run(dir).with_context(context)?);
    }
    pathlab_results::report::sort_by_parameters(&mut runs);
    crate::cmd::report::report(&runs, out, true).with_context(context)
}

/// The sweep point `chosen` (1-based) of `points`; a sweep without a choice, or a choice
/// out of range, is refused with the runs listed.
fn choose_point(
    name: &str,
    mut points: Vec<SweepPoint>,
    chosen: Option<usize>,
) -> anyhow::Result<SweepPoint> {
    let runs = || {
        points
            .iter()
            .enumerate()
            .map(|(i, point)| format!("{}: {}", i + 1, point.label))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match chosen {
        None if points.len() == 1 => Ok(points.remove(0)),
        None => Err(usage(anyhow::anyhow!(
            "{name} is a sweep of {} runs ({}); an engine runs one topology: export one with \
             --point N",
            points.len(),
            runs()
        ))),
        Some(n) if (1..=points.len()).contains(&n) => Ok(points.remove(n - 1)),
        Some(n) if points.len() == 1 => Err(usage(anyhow::anyhow!(
            "--point {n}: {name} is one run, not a sweep"
        ))),
        Some(n) => Err(usage(anyhow::anyhow!(
            "--point {n}: {name} is a sweep of {} runs ({})",
            points.len(),
            runs()
        ))),
    }
}

/// The experiment as `pathlab lab export` exports it: one sweep point, `--quick` applied.
fn exported(lab: &ExportedLab) -> anyhow::Result<(Experiment, SweepPoint)> {
    let (name, quick) = (lab.experiment.as_str(), lab.quick);
    let (text, file) = experiment_text(name)?;
    let named = spec_error(file.as_deref());
    let points = expand(&text, quick).map_err(&named)?;
    let point = choose_point(name, points, lab.point)?;
    let experiment = Experiment::parse(&point.text).map_err(&named)?;
    let experiment = if quick {
        experiment.quick()
    } else {
        experiment
    };
    Ok((experiment, point))
}

/// Each node's control address from `--address`: a pattern, or `NODE=ADDR` for each.
fn addresses(pattern: &str, lab: &str, nodes: &[String]) -> anyhow::Result<Vec<String>> {
    if !pattern.contains('=') {
        return Ok(nodes
            .iter()
            .map(|node| pattern.replace("{node}", node).replace("{lab}", lab))
            .collect());
    }
    let mut given = std::collections::HashMap::new();
    for pair in pattern.split(',') {
        let Some((node, address)) = pair.split_once('=') else {
            return Err(usage(anyhow::anyhow!(
                "--address: '{pair}' is not NODE=HOST:PORT"
            )));
        };
        if !nodes.iter().any(|n| n == node) {
            return Err(usage(anyhow::anyhow!(
                "--address: the lab has no node '{node}' (its nodes: {})",
                nodes.join(", ")
            )));
        }
        given.insert(node.to_owned(), address.to_owned());
    }
    nodes
        .iter()
        .map(|node| {
            given
                .remove(node)
                .ok_or_else(|| usage(anyhow::anyhow!("--address: no address for node '{node}'")))
        })
        .collect()
}

/// Runs `pathlab lab collect`.
fn collect(args: &CollectArgs) -> anyhow::Result<()> {
    let (experiment, point) = exported(&args.lab)?;
    let configs = pathlab_engines::export::Export {
        experiment: &experiment,
        point: Some(point.label.clone()).filter(|label| !label.is_empty()),
        seed: args.lab.seed,
        image: pathlab_engines::export::DEFAULT_IMAGE.to_owned(),
    }
    .node_configs("pods and containers")
    .map_err(usage)?;
    let names: Vec<String> = experiment.nodes.iter().map(|n| n.name.clone()).collect();
    let addresses = addresses(&args.address, &experiment.name, &names)?;
    let token = args
        .token
        .as_deref()
        .map(pathlab_http::read_token)
        .transpose()
        .map_err(usage)?;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "lab-{}-{}",
            experiment.name,
            pathlab_os::unix_now_secs()
        ))
    });
    let stop = crate::cmd::stop_on_signals()?;
    println!(
        "{}: collecting {} nodes ({}, ...), results in {}",
        experiment.name,
        names.len(),
        addresses[0],
        out.display()
    );
    let run = pathlab_engines::collect::collect(
        &experiment,
        &point,
        &configs,
        &pathlab_engines::collect::CollectOptions {
            addresses,
            token,
            wait: std::time::Duration::from_secs(args.wait),
            lead: std::time::Duration::from_secs(2),
            out: out.clone(),
            stop,
        },
        &mut |line| println!("  {line}"),
    )?;
    let file = pathlab_results::ResultFile::new(
        pathlab_results::RunResult::Lab(Box::new(run.clone())),
        std::env::args().collect(),
        Some(run.started_unix_ns / 1_000_000_000),
    );
    std::fs::write(out.join("result.json"), file.to_json())
        .with_context(|| format!("writing {}", out.join("result.json").display()))?;
    let mut stdout = std::io::stdout().lock();
    for link in &run.links {
        for u in &link.underlay {
            writeln!(
                stdout,
                "  link {} at {} ({}): underlay round trip {} ms ({}), added to the spec's delay",
                link.name,
                u.interface,
                u.device,
                format::in_millis(u.rtt_p50_ns as f64 * 1e-9, Digits::fixed(3)),
                u.timed_by.describe()
            )?;
        }
    }
    print_summary(&mut stdout, &experiment, &run, &out)?;
    drop(stdout);
    write_report(std::slice::from_ref(&out), &out)?;
    if run.interrupted {
        return Err(anyhow::anyhow!("interrupted"));
    }
    Ok(())
}

/// The lab's control token for an export into `out`.
enum LabToken {
    /// The valid token already in `out`, kept: nodes running with it must keep working.
    Kept(String),
    /// A new one, to write.
    New(String),
}

impl LabToken {
    fn text(&self) -> &str {
        match self {
            LabToken::Kept(token) | LabToken::New(token) => token,
        }
    }
}

/// The token in `out`'s token file if there is one (refused if it will not do, as `pathlab
/// node` would refuse it), else a new one; nothing is written here.
fn lab_token(out: &std::path::Path) -> anyhow::Result<LabToken> {
    let path = out.join(pathlab_engines::export::TOKEN_FILE);
    match std::fs::symlink_metadata(&path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(LabToken::New(
            pathlab_http::new_token()
                .context("making a control token from the kernel's random bytes")?,
        )),
        Err(error) => {
            Err(anyhow::Error::new(error).context(format!("looking for {}", path.display())))
        }
        Ok(_) => pathlab_http::read_token(&path)
            .map(LabToken::Kept)
            .map_err(kept_token_refused),
    }
}

/// A token file already in the output directory that will not do, as the export says it.
fn kept_token_refused(error: pathlab_http::HttpServerError) -> anyhow::Error {
    usage(anyhow::Error::new(error).context(
        "the lab's control token, kept across exports, will not do (fix it, or remove it to \
         have a new one made)",
    ))
}

/// Writes `file` into `out`. A secret one is written to a new file only its owner may read,
/// then renamed over the old one: whoever holds the old file open never reads the new one.
fn write_export_file(
    out: &pathlab_os::files::Dir,
    file: &pathlab_engines::export::ExportFile,
) -> anyhow::Result<()> {
    let path = out.path().join(&file.name);
    let written = if file.secret {
        let temporary = format!(".{}.new", file.name);
        let _ = std::fs::remove_file(out.path().join(&temporary));
        out.create_new(&temporary)
            .map_err(anyhow::Error::new)
            .and_then(|mut new| Ok(new.write_all(file.contents.as_bytes())?))
            .and_then(|()| Ok(std::fs::rename(out.path().join(&temporary), &path)?))
    } else {
        std::fs::write(&path, &file.contents).map_err(anyhow::Error::new)
    };
    written.with_context(|| format!("writing {}", path.display()))
}

/// Runs `pathlab lab export`: checks the lab, writes the control token (unless a valid one
/// is there), the engine's topology and every node's config into `--out`.
fn export(args: &ExportArgs) -> anyhow::Result<()> {
    use pathlab_engines::export::{containerlab, kne, Export, TOKEN_FILE};
    let options = match &args.engine {
        Engine::Kne(options) | Engine::Containerlab(options) => options,
    };
    let (experiment, point) = exported(&options.lab)?;
    let out = &options.out;
    let token = lab_token(out)?;
    let export = Export {
        experiment: &experiment,
        point: Some(point.label).filter(|label| !label.is_empty()),
        seed: options.lab.seed,
        image: options.image.clone(),
    };
    let files = match &args.engine {
        Engine::Kne(_) => kne::files(&export, token.text()),
        Engine::Containerlab(_) => containerlab::files(&export),
    }
    .map_err(usage)?;
    // Bad input stops above, before anything is written.
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let dir = pathlab_os::files::Dir::open(out)?;
    let token_path = out.join(TOKEN_FILE);
    match &token {
        LabToken::New(text) => {
            // O_EXCL: a token file that appeared since it was looked for is never replaced.
            dir.create_new(TOKEN_FILE)
                .map_err(anyhow::Error::new)
                .and_then(|mut file| Ok(file.write_all(format!("{text}\n").as_bytes())?))
                .with_context(|| format!("writing {}", token_path.display()))?;
            println!(
                "{}: a new control token for the nodes (mode 0600; `pathlab lab collect \
                 --token {}`)",
                token_path.display(),
                token_path.display()
            );
        }
        LabToken::Kept(_) => println!(
            "{}: kept the control token already there, so nodes running with it keep working",
            token_path.display()
        ),
    }
    for file in &files {
        write_export_file(&dir, file)?;
    }
    let topology = out.join(&files[0].name);
    let run = match &args.engine {
        Engine::Kne(_) => format!("kne create {}", topology.display()),
        Engine::Containerlab(_) => {
            format!("sudo containerlab deploy -t {}", topology.display())
        }
    };
    println!(
        "{}: {} and {} node configs in {}; run it with `{run}`",
        experiment.name,
        files[0].name,
        files.len() - 1,
        out.display()
    );
    Ok(())
}

/// Runs `pathlab lab`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match (&args.action, &args.experiment) {
        (None, None) => Err(usage(anyhow::anyhow!(
            "say which experiment: a recipe ({}) or a spec file",
            RECIPES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        (None, Some(name)) => run_experiment(args, name),
        (Some(Action::Export(export_args)), _) => export(export_args),
        (Some(Action::Collect(collect_args)), _) => collect(collect_args),
        (Some(Action::Clean), _) => {
            pathlab_os::require_net_admin("pathlab lab clean").map_err(crate::usage)?;
            let cleaned = pathlab_os::clean::clean()?;
            let mut out = std::io::stdout().lock();
            let total = cleaned.sockets.len()
                + cleaned.locks.len()
                + cleaned.nat_tables.len()
                + cleaned.records.len()
                + cleaned.forwarding.len()
                + cleaned.interfaces.len();
            for restored in &cleaned.interfaces {
                writeln!(
                    out,
                    "restored interface {} (a killed emulator had swapped it)",
                    restored.interface
                )?;
                for note in &restored.notes {
                    writeln!(out, "  {note}")?;
                }
            }
            for path in &cleaned.sockets {
                writeln!(out, "removed stale control socket {}", path.display())?;
            }
            for path in &cleaned.locks {
                writeln!(out, "removed unheld lock {}", path.display())?;
            }
            for name in &cleaned.nat_tables {
                writeln!(out, "removed nftables table {name} of a killed shell")?;
            }
            for path in &cleaned.records {
                writeln!(
                    out,
                    "removed record {} (its namespace and table are gone)",
                    path.display()
                )?;
            }
            for path in &cleaned.forwarding {
                writeln!(
                    out,
                    "removed forwarding lock {} of killed shells (IPv4 forwarding restored \
                     where it is this namespace's)",
                    path.display()
                )?;
            }
            if total == 0 {
                writeln!(out, "nothing to clean")?;
            }
            Ok(())
        }
    }
}
