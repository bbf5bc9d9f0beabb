//! `pathlab spec`: check a link spec and print its canonical form, or show the presets.

use anyhow::anyhow;
use pathlab_core::format::{self, Digits};
use pathlab_core::spec::preset::{self, Direction, Preset, PRESETS};
use pathlab_core::spec::{Discipline, RateSpec, SlotInterval};
use pathlab_core::stage::rate::RateModel;
use pathlab_core::{Duration, Instant, LinkSpec};
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

/// Runs `pathlab spec`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match args.preset.as_deref() {
        Some("list") => return list(args.output.json),
        Some(name) => return show(name, args.output.json),
        None if args.list_presets => return list(args.output.json),
        None => {}
    }
    let spec = parse_spec(&args.spec)?;
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&spec)?);
    } else {
        println!("{spec}");
    }
    Ok(())
}

/// The name `preset` takes for one direction of a preset.
fn name_of(preset: &Preset, direction: Direction) -> String {
    match direction {
        Direction::Up if preset.is_asymmetric() => format!("{}-up", preset.name),
        _ => preset.name.to_owned(),
    }
}

fn directions(preset: &Preset) -> &'static [Direction] {
    if preset.is_asymmetric() {
        &[Direction::Down, Direction::Up]
    } else {
        &[Direction::Down]
    }
}

fn list(json: bool) -> anyhow::Result<()> {
    if json {
        let presets: Vec<_> = PRESETS
            .iter()
            .map(|preset| {
                json!({
                    "name": preset.name,
                    "uplink": preset.is_asymmetric().then(|| name_of(preset, Direction::Up)),
                    "summary": preset.summary,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&presets)?);
        return Ok(());
    }
    for preset in PRESETS {
        let names = directions(preset)
            .iter()
            .map(|d| name_of(preset, *d))
            .collect::<Vec<_>>()
            .join(" ");
        println!("{names:<26} {}", preset.summary);
    }
    Ok(())
}

fn show(name: &str, json: bool) -> anyhow::Result<()> {
    let (preset, asked) = preset::find(name).map_err(|e| usage(anyhow!(e)))?;
    if json {
        let direction = |d: Direction| {
            json!({
                "name": name_of(preset, d),
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
    for &direction in directions(preset) {
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
            name_of(preset, direction)
        );
        for line in meaning(&spec) {
            println!("  {line}");
        }
    }
    let round_trip = directions(preset)
        .iter()
        .fold(Duration::ZERO, |sum, d| sum + one_way(&preset.spec(*d)));
    let round_trip = if preset.is_asymmetric() {
        round_trip
    } else {
        round_trip + round_trip
    };
    println!(
        "round trip: {} ms of delay, before queueing and slots",
        format::in_millis(round_trip.as_secs_f64(), Digits::fixed(3))
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

/// The mean one-way delay a spec adds besides queueing and slots.
fn one_way(spec: &LinkSpec) -> Duration {
    spec.delay.map_or(Duration::ZERO, |d| d.delay)
}

/// What a spec does, in words, a line per stage it has.
fn meaning(spec: &LinkSpec) -> Vec<String> {
    let ms = |d: Duration| format::in_millis(d.as_secs_f64(), Digits::fixed(3));
    let mut lines = Vec::new();
    if let Some(delay) = spec.delay {
        let jitter = if delay.jitter.is_zero() {
            String::new()
        } else {
            format!(
                ", jitter {} ms ({:?})",
                ms(delay.jitter),
                delay.distribution
            )
            .to_lowercase()
        };
        lines.push(format!("one-way delay {} ms{jitter}", ms(delay.delay)));
    }
    if let Some(RateSpec::Fixed(fixed)) = &spec.rate {
        let cells = if fixed.cell_size > 0 {
            format!(
                ", each packet +{} bytes in cells of {}+{} bytes (ATM)",
                fixed.packet_overhead, fixed.cell_size, fixed.cell_overhead
            )
        } else {
            String::new()
        };
        lines.push(format!(
            "bottleneck {}{cells}",
            format::rate(fixed.rate.0 as f64, Digits::fixed(2))
        ));
    }
    if let Some(RateSpec::Fixed(_)) = &spec.rate {
        let packets = spec.queue.effective_limit_packets();
        // One full-size frame's time through the rate model itself (overhead and cells).
        let frame_time = spec
            .rate
            .as_ref()
            .and_then(|rate| RateModel::new(rate).ok())
            .map_or(Duration::ZERO, |mut model| {
                model.transmit(Instant::ZERO, pathlab_core::units::FRAME_BYTES as u32)
                    - Instant::ZERO
            });
        let drain = Duration::from_nanos(frame_time.as_nanos().saturating_mul(u64::from(packets)));
        let discipline = match spec.queue.discipline {
            Discipline::TailDrop => "tail drop".to_owned(),
            Discipline::HeadDrop => "head drop".to_owned(),
            Discipline::Red(_) => "RED".to_owned(),
            Discipline::Codel(c) => format!("CoDel, target {} ms", ms(c.target)),
            Discipline::FqCodel(c) => {
                format!("FQ-CoDel, target {} ms", ms(c.codel.target))
            }
            Discipline::Pie(c) => format!("PIE, target {} ms", ms(c.target)),
        };
        lines.push(format!(
            "queue {packets} packets, {discipline}: {} ms of full-size frames when full \
             (change with limit N or queue ...)",
            ms(drain)
        ));
    }
    if let Some(slot) = spec.slot {
        let every = match slot.interval {
            SlotInterval::Uniform { min, max } if min == max => {
                format!("every {} ms", ms(min))
            }
            SlotInterval::Uniform { min, max } => format!("every {} to {} ms", ms(min), ms(max)),
            SlotInterval::Distribution { delay, .. } => {
                format!("every {} ms on average", ms(delay))
            }
        };
        lines.push(format!(
            "packets leave in slots {every} (radio scheduling, aggregation)"
        ));
    }
    lines
}
