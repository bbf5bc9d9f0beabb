//! `pathlab spec`: check a link spec and print its canonical form, or show the presets.

use anyhow::anyhow;
use pathlab_core::format::{self, Digits};
use pathlab_core::spec::preset::{self, Direction, Preset, PRESETS};
use pathlab_core::LinkSpec;
use serde_json::json;

use crate::usage;

/// Arguments of `pathlab spec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec, netem syntax plus pathlab's additions, e.g. 'delay 20ms loss 1% rate 10mbit'.
    #[arg(
        value_name = "SPEC",
        required_unless_present_any = ["preset", "list_presets"],
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
            None => Query::Check(Box::new(parse_spec(&self.spec)?)),
        })
    }
}

/// Runs `pathlab spec`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match args.config()? {
        Query::List => list(args.output.json),
        Query::Show(preset, asked) => show(preset, asked, args.output.json),
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
