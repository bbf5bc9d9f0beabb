//! `pathlab lab`: experiments on namespaced topologies, and `lab clean`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use pathlab_core::format::{self, Digits};
use pathlab_engines::collect::{self, CollectConfig};
use pathlab_engines::export::save::{self, ExportConfig, ExportWriteError};
use pathlab_lab::spec::Experiment;
use pathlab_lab::summary::{rtt_summaries, sawtooths};
use pathlab_lab::sweep::{self, ExperimentSource, PlannedRun, RunConfig, RunControls, SweepEvent};

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
    /// The directory `lab export` wrote: the lab CA's certificate (DIR/ca.crt), the only
    /// one trusted, and each node's own token (DIR/NODE.token). Each node proves its name
    /// in TLS before anything is sent to it. Without it, nodes are spoken to in the clear
    /// without a token, on loopback only.
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// Directory for the results (default: lab-NAME-UNIXTIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How long to wait for every node to be ready, for their results after the run, and
    /// to gather their recordings: each phase's deadline, whatever the nodes do.
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
    /// Directory for the topology, the node configs and the lab's credentials: the lab CA
    /// (ca.key stays here), each node's key, certificate and token (created if missing;
    /// files of the same names are replaced, but the CA and valid token files are kept).
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

/// Reads the experiment `name` names, a recipe or a spec file; any problem is a usage
/// error.
fn read_source(name: &str) -> anyhow::Result<ExperimentSource> {
    ExperimentSource::read(name).map_err(usage)
}

impl Args {
    /// The run `pathlab lab EXPERIMENT` asks for: every sweep point of `source` parsed and
    /// checked (a spec error is a usage error naming the file) before anything is built.
    fn config(&self, source: &ExperimentSource) -> anyhow::Result<RunConfig> {
        let runs = source.sweep(self.quick).map_err(usage)?;
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| sweep::default_out(&runs[0].experiment.name));
        Ok(RunConfig {
            runs,
            out,
            seed: self.seed,
            scheduling: self.scheduling.request(),
            command_line: std::env::args().collect(),
        })
    }
}

fn run_experiment(args: &Args, name: &str) -> anyhow::Result<()> {
    let source = read_source(name)?;
    if args.print {
        print!("{}", source.text);
        return Ok(());
    }
    let config = args.config(&source)?;
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
    let controls = RunControls {
        stop: crate::cmd::stop_on_signals()?,
        control,
        trace_dir,
    };
    let mut stdout = std::io::stdout().lock();
    let outcome = sweep::run(&config, &controls, &mut |event| match event {
        SweepEvent::Starting { run, dir } => {
            writeln!(
                stdout,
                "{}{}: {} s, results in {}",
                run.experiment.name,
                if run.point.label.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", run.point.label)
                },
                run.experiment.duration.as_secs_f64(),
                dir.display()
            )?;
            stdout.flush()
        }
        SweepEvent::Finished { run, result, dir } => {
            print_summary(&mut stdout, &run.experiment, result, dir)
        }
    })?;
    drop(stdout);
    write_report(&outcome.saved, &config.out)?;
    if outcome.interrupted {
        if let Some(dir) = outcome.saved.last() {
            println!(
                "interrupted: what was recorded so far is in {}",
                dir.display()
            );
        }
        return Err(anyhow::anyhow!("interrupted"));
    }
    Ok(())
}

/// What `pathlab lab` says of a run once it is over (its result in `dir`): failures,
/// warnings, and each workload's figures beside their theory.
fn print_summary(
    stdout: &mut impl std::io::Write,
    experiment: &Experiment,
    run: &pathlab_results::lab::LabRun,
    dir: &std::path::Path,
) -> std::io::Result<()> {
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
) -> std::io::Result<()> {
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
) -> std::io::Result<()> {
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

impl ExportedLab {
    /// The experiment as `pathlab lab export` exports it (and `lab collect` collects it):
    /// one sweep point, `--quick` applied; any problem is a usage error.
    fn planned(&self) -> anyhow::Result<PlannedRun> {
        read_source(&self.experiment)?
            .point(self.quick, self.point)
            .map_err(usage)
    }
}

impl CollectArgs {
    /// The collection `pathlab lab collect` asks for: the lab as it was exported, each
    /// node's config and control address, the token; any problem is a usage error.
    fn config(&self) -> anyhow::Result<CollectConfig> {
        let run = self.lab.planned()?;
        let experiment = &run.experiment;
        let image = pathlab_engines::export::DEFAULT_IMAGE.to_owned();
        let configs = pathlab_engines::export::Export::of(&run, self.lab.seed, image)
            .node_configs("pods and containers")
            .map_err(usage)?;
        let names = experiment.node_names();
        let addresses = collect::addresses(&self.address, &experiment.name, &names)
            .map_err(|error| usage(anyhow::anyhow!("--address: {error}")))?;
        let access = self
            .export
            .as_deref()
            .map(|dir| collect::access_from_export(dir, &names))
            .transpose()
            .map_err(|error| usage(anyhow::anyhow!("--export: {error}")))?;
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| sweep::default_out(&experiment.name));
        Ok(CollectConfig {
            run,
            configs,
            addresses,
            access,
            wait: std::time::Duration::from_secs(self.wait),
            lead: collect::DEFAULT_LEAD,
            out,
            command_line: std::env::args().collect(),
        })
    }
}

/// Runs `pathlab lab collect`.
fn collect(args: &CollectArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let stop = crate::cmd::stop_on_signals()?;
    let experiment = &config.run.experiment;
    println!(
        "{}: collecting {} nodes ({}, ...), results in {}",
        experiment.name,
        config.configs.len(),
        config.addresses[0],
        config.out.display()
    );
    let run = collect::run(&config, &stop, &mut |line| println!("  {line}"))?;
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
    print_summary(&mut stdout, experiment, &run, &config.out)?;
    drop(stdout);
    write_report(std::slice::from_ref(&config.out), &config.out)?;
    if run.interrupted {
        return Err(anyhow::anyhow!("interrupted"));
    }
    Ok(())
}

impl ExportArgs {
    /// The export `pathlab lab export ENGINE` asks for; any problem is a usage error.
    fn config(&self) -> anyhow::Result<ExportConfig> {
        let (engine, options) = match &self.engine {
            Engine::Kne(options) => (save::Engine::Kne, options),
            Engine::Containerlab(options) => (save::Engine::Containerlab, options),
        };
        Ok(ExportConfig {
            engine,
            run: options.lab.planned()?,
            seed: options.lab.seed,
            image: options.image.clone(),
            out: options.out.clone(),
        })
    }
}

/// Runs `pathlab lab export`: checks the lab, writes its credentials (keeping the CA and
/// tokens already there), the engine's topology and every node's config into `--out`.
fn export(args: &ExportArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let exported = save::write(&config).map_err(|error| match error {
        ExportWriteError::Export(_) | ExportWriteError::Credentials(_) => usage(error),
        other => anyhow::Error::new(other),
    })?;
    let nodes = config.run.experiment.nodes.len();
    println!(
        "{}: {} the lab CA (ca.crt; its key ca.key stays here, given to no node); each node's \
         own key, certificate and token ({} of {} tokens kept), mode 0600 for keys and tokens; \
         `pathlab lab collect --export {}`",
        config.out.display(),
        if exported.kept.ca { "kept" } else { "made" },
        exported.kept.tokens,
        nodes,
        config.out.display()
    );
    println!(
        "{}: {} and {} node configs in {}; run it with `{}`",
        config.run.experiment.name,
        exported.files[0],
        exported.files.len() - 1,
        config.out.display(),
        exported.deploy_command
    );
    Ok(())
}

/// Runs `pathlab lab`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match (&args.action, &args.experiment) {
        (None, None) => Err(usage(anyhow::anyhow!(
            "say which experiment: a recipe ({}) or a spec file",
            sweep::recipe_names()
        ))),
        (None, Some(name)) => run_experiment(args, name),
        (Some(Action::Export(export_args)), _) => export(export_args),
        (Some(Action::Collect(collect_args)), _) => collect(collect_args),
        (Some(Action::Clean), _) => clean(),
    }
}

/// Runs `pathlab lab clean`: what was cleaned on stdout, what could not be (a record
/// refused, a swap not undone) on stderr, and then exit status 1.
fn clean() -> anyhow::Result<()> {
    pathlab_os::require_net_admin("pathlab lab clean").map_err(crate::usage)?;
    let cleaned = pathlab_os::clean::clean()?;
    print_cleaned(&cleaned)?;
    for failed in &cleaned.not_restored {
        eprintln!(
            "pathlab: not restored: {} (record {}): {}",
            failed.interface.as_deref().unwrap_or("a swap"),
            failed.record.display(),
            failed.why
        );
    }
    for refused in &cleaned.refused {
        eprintln!(
            "pathlab: record {} refused: {}",
            refused.path.display(),
            refused.why
        );
    }
    if cleaned.failed() {
        anyhow::bail!(
            "{} record(s) not acted on (above); the rest was cleaned",
            cleaned.not_restored.len() + cleaned.refused.len()
        );
    }
    Ok(())
}

/// What `lab clean` cleaned, a line each.
fn print_cleaned(cleaned: &pathlab_os::clean::Cleaned) -> std::io::Result<()> {
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
            "restored interface {} (a killed emulator had swapped it; the swap was at \
             step '{}')",
            restored.interface,
            restored.step.name()
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
    if total == 0 && !cleaned.failed() {
        writeln!(out, "nothing to clean")?;
    }
    Ok(())
}
