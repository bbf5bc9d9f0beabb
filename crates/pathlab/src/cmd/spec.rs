//! `pathlab spec`: check a link spec and print its canonical form, or show the presets.

use anyhow::anyhow;
use pathlab_core::format::{self, Digits};
use pathlab_core::spec::preset::{self, Direction, Preset, PRESETS};
use pathlab_core::LinkSpec;
use pathlab_twin::file::TwinFile;
use serde_json::json;

use crate::usage;

/// Arguments of `pathlab spec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec, netem syntax plus pathlab's additions, e.g. 'delay 20ms loss 1% rate 10mbit'.
    #[arg(
        value_name = "SPEC",
        required_unless_present_any = ["preset", "list_presets", "twin"],
        num_args = 1..
    )]
    pub spec: Vec<String>,
    /// Show a preset: its spec each way, what that means, and where its numbers come from
    /// (`--preset list` lists them).
    #[arg(long, value_name = "NAME", conflicts_with = "spec")]
    pub preset: Option<String>,
    /// List the presets, one line each.
    #[arg(long, conflicts_with_all = ["spec", "preset"])]
    pub list_presets: bool,
    /// Read a twin file (`pathlab twin`'s): check it and print it back, a spec per
    /// direction and its figures with their intervals.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["spec", "preset", "list_presets"])]
    pub twin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub output: crate::cmd::args::JsonOutput,
}

/// Parses a spec given as one or several words, loading any trace file it names.
pub fn parse_spec(words: &[String]) -> anyhow::Result<LinkSpec> {
    pathlab_emulator::load_spec(&words.join(" ")).map_err(usage)
}

/// What `pathlab spec` is asked to show.
enum Query {
    /// The presets, one line each.
    List,
    /// One preset, and the direction its name asked for.
    Show(&'static Preset, Direction),
    /// A spec, parsed.
    Check(Box<LinkSpec>),
    /// A twin file, read.
    Twin(Box<TwinFile>),
}

impl Args {
    /// What to show: the preset found or the spec parsed, or a usage error.
    fn config(&self) -> anyhow::Result<Query> {
        Ok(match self.preset.as_deref() {
            Some("list") => Query::List,
            Some(name) => {
                let (preset, asked) = preset::find(name).map_err(|e| usage(anyhow!(e)))?;
                Query::Show(preset, asked)
            }
            None if self.list_presets => Query::List,
            None if self.twin.is_some() => {
                Query::Twin(Box::new(read_twin(self.twin.as_deref().expect("given"))?))
            }
            None => Query::Check(Box::new(parse_spec(&self.spec)?)),
        })
    }
}

/// Reads and checks a twin file; a file that cannot be read or is refused is a usage
/// error (exit 2) naming the line and field.
pub fn read_twin(path: &std::path::Path) -> anyhow::Result<TwinFile> {
    pathlab_lab::sweep::read_twin(path).map_err(usage)
}

/// The two specs a command that runs a link was given, loaded: a twin file's (`up`, from
/// the measuring host to the far one, and `down`, a trace either names read beside the
/// file), or SPEC and `--reverse` (SPEC both ways without it).
pub fn given_specs(
    twin: Option<&std::path::Path>,
    spec: &[String],
    reverse: Option<&String>,
) -> anyhow::Result<(LinkSpec, LinkSpec)> {
    if let Some(path) = twin {
        let twin = read_twin(path)?;
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let up = parse_spec(&[twin.up.spec_beside(dir)])?;
        let down = parse_spec(&[twin.down.spec_beside(dir)])?;
        return Ok((up, down));
    }
    let forward = parse_spec(spec)?;
    let reverse = match reverse {
        Some(text) => parse_spec(std::slice::from_ref(text))?,
        None => forward.clone(),
    };
    Ok((forward, reverse))
}

/// Runs `pathlab spec`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match args.config()? {
        Query::List => list(args.output.json),
        Query::Show(preset, asked) => show(preset, asked, args.output.json),
        Query::Twin(twin) => {
            if args.output.json {
                let direction = |d: &pathlab_twin::file::DirectionTwin| json!({ "spec": d.spec.to_string(), "figures": d.figures });
                let value = json!({
                    "host": twin.host,
                    "up": direction(&twin.up),
                    "down": direction(&twin.down),
                });
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!("{}", twin.to_toml());
            }
            Ok(())
        }
        Query::Check(spec) => {
            if args.output.json {
                println!("{}", serde_json::to_string_pretty(&spec)?);
            } else {
                println!("{spec}");
            }
            Ok(())
        }
    }
}

fn list(json: bool) -> anyhow::Result<()> {
    if json {
        let presets: Vec<_> = PRESETS
            .iter()
            .map(|preset| {
                json!({
                    "name": preset.name,
                    "uplink": preset.is_asymmetric().then(|| preset.name_of(Direction::Up)),
                    "summary": preset.summary,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&presets)?);
        return Ok(());
    }
    for preset in PRESETS {
        let names = preset
            .directions()
            .iter()
            .map(|d| preset.name_of(*d))
            .collect::<Vec<_>>()
            .join(" ");
        println!("{names:<26} {}", preset.summary);
    }
    Ok(())
}

fn show(preset: &Preset, asked: Direction, json: bool) -> anyhow::Result<()> {
    if json {
        let direction = |d: Direction| {
            json!({
                "name": preset.name_of(d),
                "text": preset.text(d),
                "spec": preset.spec(d),
            })
        };
        let value = json!({
            "name": preset.name,
            "summary": preset.summary,
            "sources": preset.sources,
            "downlink": direction(Direction::Down),
            "uplink": preset.is_asymmetric().then(|| direction(Direction::Up)),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{}: {}", preset.name, preset.summary);
    for &direction in preset.directions() {
        let label = match (preset.is_asymmetric(), direction) {
            (false, _) => "both ways",
            (true, Direction::Down) => "downlink",
            (true, Direction::Up) => "uplink",
        };
        let marker = if preset.is_asymmetric() && direction == asked {
            " (asked)"
        } else {
            ""
        };
        let spec = preset.spec(direction);
        println!(
            "{label}{marker}: preset {} = {spec}",
            preset.name_of(direction)
        );
        for line in pathlab_core::explain::meaning(&spec) {
            println!("  {line}");
        }
    }
    println!(
        "round trip: {} ms of delay, before queueing and slots",
        format::in_millis(preset.round_trip_delay().as_secs_f64(), Digits::fixed(3))
    );
    println!("sources: {} (references: docs/presets.md)", preset.sources);
    if preset.is_asymmetric() {
        println!(
            "use: SPEC 'preset {0}' for the direction towards the subscriber, \
             --reverse 'preset {0}-up' for the other (emulate, sim; spec/reverse in a lab)",
            preset.name
        );
    }
    Ok(())
}
