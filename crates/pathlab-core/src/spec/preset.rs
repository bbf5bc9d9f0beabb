//! Presets: named link specs for common access links and long-haul paths, each written in
//! the spec grammar itself, so `preset lte` means exactly what its text says.
//!
//! A spec is one direction. An asymmetric link has two texts: `NAME` (also `NAME-down`) is
//! the downlink, towards the subscriber, and `NAME-up` the uplink. A symmetric one (a Wi-Fi
//! hop, a backbone path) has one text for both. Every number comes from a public
//! measurement or standard named in [`Preset::sources`]; `docs/presets.md` gives the full
//! references and how each figure was turned into a spec.

use super::parse::SpecError;
use super::LinkSpec;
use crate::time::Duration;

/// One named link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name `preset NAME` takes (the downlink's, for an asymmetric link).
    pub name: &'static str,
    /// What the preset models, in one line.
    pub summary: &'static str,
    /// The spec towards the subscriber (the only one, for a symmetric link).
    pub downlink: &'static str,
    /// The spec from the subscriber (`NAME-up`); `None` for a symmetric link.
    pub uplink: Option<&'static str>,
    /// Where the numbers come from, briefly (docs/presets.md has the references).
    pub sources: &'static str,
}

/// Which direction of a preset a name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Towards the subscriber (`NAME`, `NAME-down`), or both ways for a symmetric link.
    Down,
    /// From the subscriber (`NAME-up`).
    Up,
}

impl Preset {
    /// Whether the two directions differ.
    pub fn is_asymmetric(&self) -> bool {
        self.uplink.is_some()
    }

    /// The spec text of one direction.
    pub fn text(&self, direction: Direction) -> &'static str {
        match (direction, self.uplink) {
            (Direction::Up, Some(uplink)) => uplink,
            _ => self.downlink,
        }
    }

    /// The parsed spec of one direction.
    pub fn spec(&self, direction: Direction) -> LinkSpec {
        LinkSpec::parse(self.text(direction))
            .unwrap_or_else(|e| panic!("preset {}'s spec is valid (tested): {e}", self.name))
    }

    /// The directions that have their own spec: the downlink alone for a symmetric link
    /// (its spec serves both ways), the downlink then the uplink for an asymmetric one.
    pub fn directions(&self) -> &'static [Direction] {
        if self.is_asymmetric() {
            &[Direction::Down, Direction::Up]
        } else {
            &[Direction::Down]
        }
    }

    /// The name `preset` takes for one direction: `NAME-up` for an asymmetric link's
    /// uplink, `NAME` otherwise.
    pub fn name_of(&self, direction: Direction) -> String {
        match direction {
            Direction::Up if self.is_asymmetric() => format!("{}-up", self.name),
            _ => self.name.to_owned(),
        }
    }

    /// The delay a round trip over the preset's link adds besides queueing and slots: the
    /// two directions' one-way delays (one spec's twice, for a symmetric link).
    pub fn round_trip_delay(&self) -> Duration {
        let one_way = |direction| self.spec(direction).one_way_delay();
        if self.is_asymmetric() {
            one_way(Direction::Down) + one_way(Direction::Up)
        } else {
            one_way(Direction::Down) + one_way(Direction::Down)
        }
    }
}

/// Every preset, access links first (slowest to fastest fixed, then mobile, satellite,
/// Wi-Fi), then backbone paths by length.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "adsl",
        summary: "ADSL2+ line with interleaving, ATM cells (13/1 Mbit/s sync, about 11 Mbit/s of TCP)",
        downlink: "delay 10ms rate 13mbit 8 48 5",
        uplink: Some("delay 10ms rate 1mbit 8 48 5"),
        sources: "ITU-T G.992.5; Telekom ADSL2+ first-hop RTT 19.9-21.3 ms with 8+8 ms \
                  interleaving; seed 000's line (11 Mbit/s sustained TCP)",
    },
    Preset {
        name: "vdsl",
        summary: "VDSL2 17a with vectoring, fibre to the cabinet (50/10 Mbit/s)",
        downlink: "delay 2ms rate 50mbit",
        uplink: Some("delay 2ms rate 10mbit"),
        sources: "ITU-T G.993.2/G.993.5; Telekom VDSL2 50/10 vectoring first-hop RTT 3.7-4.3 ms; \
                  Openreach VDSL line-rate range 49.5/9.8 Mbit/s",
    },
    Preset {
        name: "cable",
        summary: "DOCSIS 3.1 cable (200/20 Mbit/s), PIE in the modem's upstream",
        downlink: "delay 5ms rate 200mbit",
        uplink: Some("delay 5ms rate 20mbit queue pie target 10ms"),
        sources: "CableLabs LLD white paper (about 10 ms on the access link); Ookla (cable ISP \
                  median 211 Mbit/s down); FCC 100/20 benchmark; RFC 8034 (DOCSIS-PIE, 10 ms target)",
    },
    Preset {
        name: "ftth",
        summary: "fibre to the home, GPON, a symmetric 1 Gbit/s tier",
        downlink: "delay 750us rate 1gbit",
        uplink: None,
        sources: "ITU-T G.984 (GPON); Telekom/Orange GPON first-hop RTT 1.5 ms",
    },
    Preset {
        name: "edge",
        summary: "2G EDGE (240/200 kbit/s, 840 ms round trip)",
        downlink: "delay 420ms rate 240kbit",
        uplink: Some("delay 420ms rate 200kbit"),
        sources: "WebPageTest's 'Mobile Edge' profile (240/200 kbit/s, 840 ms RTT)",
    },
    Preset {
        name: "3g",
        summary: "3G HSPA (5.9/1.6 Mbit/s, 64 ms round trip, 2 ms TTI)",
        downlink: "delay 32ms rate 5900kbit slot 2ms",
        uplink: Some("delay 32ms rate 1600kbit slot 2ms"),
        sources: "Ofcom mobile broadband Q4 2014 (3G 5.9/1.6 Mbit/s, 63.5 ms); 3GPP TS 25.211 \
                  (HSDPA 2 ms TTI)",
    },
    Preset {
        name: "lte",
        summary: "4G LTE (21/6 Mbit/s, 50 ms round trip, 1 ms TTI)",
        downlink: "delay 25ms rate 21mbit slot 1ms",
        uplink: Some("delay 25ms rate 6mbit slot 1ms"),
        sources: "Opensignal USA Q1 2019 (21.3/6.3 Mbit/s, 44-66 ms); Ofcom Q4 2014 (4G 53.1 ms); \
                  3GPP TS 36.211 (1 ms subframe)",
    },
    Preset {
        name: "5g",
        summary: "5G NR mid-band (166/21 Mbit/s, 51 ms round trip, 0.5 ms slot)",
        downlink: "delay 25ms rate 166mbit slot 500us",
        uplink: Some("delay 25ms rate 21mbit slot 500us"),
        sources: "Ookla global 5G medians Q3 2021 (166.13/21.08 Mbit/s); Ookla USA Q2 2023 (5G \
                  multi-server latency 51 ms); 3GPP TS 38.211 (30 kHz numerology, 0.5 ms slot)",
    },
    Preset {
        name: "geo",
        summary: "geostationary satellite (18/3.4 Mbit/s, 600 ms round trip)",
        downlink: "delay 300ms rate 18mbit",
        uplink: Some("delay 300ms rate 3400kbit"),
        sources: "ITU-T G.114 (about 260 ms one way for the GEO hop alone); Ookla Q2 2021 Viasat \
                  medians 18.13/3.38 Mbit/s; GEO RTT about 600 ms (FCC MBA satellite results)",
    },
    Preset {
        name: "leo",
        summary: "LEO satellite, Starlink-like (105/15 Mbit/s, 33 ms median round trip)",
        downlink: "delay 16500us 8ms distribution normal rate 105mbit",
        uplink: Some("delay 16500us 8ms distribution normal rate 15mbit"),
        sources: "Starlink network update March 2024 (US peak-hour median 33 ms, p99 under 65 ms); \
                  Ookla Q1 2025 (Starlink US medians 104.71/14.84 Mbit/s)",
    },
    Preset {
        name: "wifi",
        summary: "good Wi-Fi: 200 Mbit/s with 802.11 aggregation in slots of 0.8-10 ms",
        downlink: "delay 200us rate 200mbit slot 800us 10ms packets 42 bytes 64kb",
        uplink: None,
        sources: "netem's slot feature (Taht, Seung, Cardwell 2017), its Wi-Fi example; Sharma et \
                  al. 2023 (Wi-Fi is the bottleneck above 800 Mbit/s access)",
    },
    Preset {
        name: "wifi-congested",
        summary: "congested Wi-Fi: 20 Mbit/s, a Wi-Fi hop of 20 ms median round trip, a heavy tail",
        downlink: "delay 10ms 20ms distribution paretonormal rate 20mbit \
                   slot 800us 10ms packets 42 bytes 64kb",
        uplink: None,
        sources: "Pei et al. INFOCOM 2016 (half of packets over 20 ms on the Wi-Fi hop, 10% over \
                  100 ms); Sui et al. MobiSys 2016 (p90 20 ms, p99 250 ms); Opensignal (national \
                  Wi-Fi averages from 21.4 Mbit/s)",
    },
    Preset {
        name: "continental-eu",
        summary: "intra-European backbone path, Paris-Milan (21.5 ms round trip)",
        downlink: "delay 10750us",
        uplink: None,
        sources: "WonderProxy city-pair pings (Paris-Milan 21.29/21.61 ms)",
    },
    Preset {
        name: "continental-us",
        summary: "US coast-to-coast backbone path, New York-Fremont (78 ms round trip)",
        downlink: "delay 39ms",
        uplink: None,
        sources: "WonderProxy city-pair pings (New York-Fremont 77.49/78.43 ms)",
    },
    Preset {
        name: "transatlantic",
        summary: "transatlantic backbone path, New York-Paris (78 ms round trip)",
        downlink: "delay 39ms",
        uplink: None,
        sources: "WonderProxy city-pair pings (New York-Paris 78.33/77.31 ms)",
    },
    Preset {
        name: "transpacific",
        summary: "transpacific backbone path, Fremont-Sydney (188 ms round trip)",
        downlink: "delay 94ms",
        uplink: None,
        sources: "WonderProxy city-pair pings (Fremont-Sydney 184.91/191.96 ms)",
    },
];

/// The names `preset` accepts, in table order: `NAME`, and `NAME-up` for an asymmetric
/// link (`NAME-down`, an alias of `NAME`, is accepted but not listed).
pub fn names() -> Vec<String> {
    PRESETS
        .iter()
        .flat_map(|preset| {
            let up = preset
                .is_asymmetric()
                .then(|| format!("{}-up", preset.name));
            std::iter::once(preset.name.to_owned()).chain(up)
        })
        .collect()
}

/// Finds a preset and the direction a name asks for; an unknown name is an error that
/// lists the valid ones and suggests the nearest.
pub fn find(name: &str) -> Result<(&'static Preset, Direction), SpecError> {
    let lower = name.to_ascii_lowercase();
    let (base, direction, explicit) = if let Some(base) = lower.strip_suffix("-up") {
        (base, Direction::Up, true)
    } else if let Some(base) = lower.strip_suffix("-down") {
        (base, Direction::Down, true)
    } else {
        (lower.as_str(), Direction::Down, false)
    };
    match PRESETS.iter().find(|preset| preset.name == base) {
        Some(preset) if !explicit || preset.is_asymmetric() => Ok((preset, direction)),
        found => {
            let suggestion = match found {
                // `wifi-up`: the link is the same both ways.
                Some(preset) => Some(preset.name.to_owned()),
                None => super::parse::nearest(&lower, names().iter().map(String::as_str), 3),
            };
            Err(SpecError::UnknownPreset {
                name: name.to_owned(),
                suggestion,
                valid: names().join(", "),
            })
        }
    }
}

/// The spec a preset name stands for.
pub fn expand(name: &str) -> Result<LinkSpec, SpecError> {
    let (preset, direction) = find(name)?;
    Ok(preset.spec(direction))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{tc, RateSpec};

    #[test]
    fn every_preset_parses_and_its_canonical_form_parses_back_to_it() {
        for preset in PRESETS {
            for direction in [Direction::Down, Direction::Up] {
                let text = preset.text(direction);
                assert!(
                    !text.contains("preset"),
                    "{}: presets do not nest",
                    preset.name
                );
                let spec = LinkSpec::parse(text)
                    .unwrap_or_else(|e| panic!("{} {direction:?}: {e}", preset.name));
                let canonical = spec.to_string();
                let again = LinkSpec::parse(&canonical).expect("canonical form parses");
                assert_eq!(again, spec, "{}: '{text}' -> '{canonical}'", preset.name);
                assert_eq!(again.to_string(), canonical);
                // `preset NAME` is the same spec as the text it stands for.
                let name = match direction {
                    Direction::Up if preset.is_asymmetric() => format!("{}-up", preset.name),
                    _ => preset.name.to_owned(),
                };
                assert_eq!(
                    LinkSpec::parse(&format!("preset {name}")).expect("preset parses"),
                    spec
                );
            }
        }
    }

    #[test]
    fn names_are_unique_lowercase_and_listed_with_their_uplinks() {
        let names = names();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        for name in &names {
            assert_eq!(*name, name.to_ascii_lowercase());
            assert!(find(name).is_ok(), "{name}");
        }
        let asymmetric = PRESETS.iter().filter(|p| p.is_asymmetric()).count();
        assert_eq!(names.len(), PRESETS.len() + asymmetric);
    }

    #[test]
    fn asymmetric_links_are_faster_downstream() {
        for preset in PRESETS.iter().filter(|p| p.is_asymmetric()) {
            let down = preset.spec(Direction::Down).peak_rate().expect("a rate");
            let up = preset.spec(Direction::Up).peak_rate().expect("a rate");
            assert!(down > up, "{}: {down} down, {up} up", preset.name);
        }
    }

    #[test]
    fn directions_resolve_by_suffix() {
        let (adsl, direction) = find("adsl-up").expect("known");
        assert_eq!((adsl.name, direction), ("adsl", Direction::Up));
        assert_eq!(find("ADSL-down").expect("known").1, Direction::Down);
        assert_eq!(
            expand("adsl").expect("known"),
            expand("adsl-down").expect("known")
        );
        let Some(RateSpec::Fixed(up)) = expand("adsl-up").expect("known").rate else {
            panic!("fixed rate")
        };
        // ATM: 48-byte cells with 5 bytes of header, the AAL5 trailer per packet.
        assert_eq!(
            (up.packet_overhead, up.cell_size, up.cell_overhead),
            (8, 48, 5)
        );
    }

    #[test]
    fn unknown_names_list_the_valid_ones_and_suggest_the_nearest() {
        let error = find("lte4").expect_err("unknown").to_string();
        assert!(error.contains("unknown preset 'lte4'"), "{error}");
        assert!(error.contains("did you mean 'lte'?"), "{error}");
        assert!(error.contains("adsl, adsl-up, vdsl"), "{error}");
        let error = find("wifi-up").expect_err("symmetric").to_string();
        assert!(error.contains("did you mean 'wifi'?"), "{error}");
        let error = find("dialup").expect_err("unknown").to_string();
        assert!(!error.contains("did you mean"), "{error}");
    }

    /// `--print-tc` of a preset works as of any spec: every preset gives tc commands.
    #[test]
    fn every_preset_has_tc_commands() {
        for preset in PRESETS {
            for direction in [Direction::Down, Direction::Up] {
                let out = tc::to_tc_commands(&preset.spec(direction), "eth1");
                assert!(!out.commands.is_empty(), "{}", preset.name);
                assert!(
                    out.commands.iter().any(|c| c.contains("netem")),
                    "{}: {:?}",
                    preset.name,
                    out.commands
                );
            }
        }
    }

    #[test]
    fn later_keywords_replace_what_they_set_and_keep_the_rest() {
        let lte = expand("lte").expect("known");
        // A keyword the preset lacks extends it.
        let lossy = LinkSpec::parse("preset lte loss 2%").expect("valid");
        assert!(lossy.loss.is_some());
        assert_eq!(
            (lossy.delay, lossy.rate.clone(), lossy.slot),
            (lte.delay, lte.rate.clone(), lte.slot)
        );
        // A keyword the preset has replaces it: `rate` is no conflict with the preset's rate.
        let slower = LinkSpec::parse("preset lte rate 5mbit").expect("valid");
        assert_eq!(slower.peak_rate(), Some(crate::BitsPerSec::mbit(5)));
        assert_eq!(slower.delay, lte.delay);
        // `delay` replaces the whole delay line, distribution included (leo's is normal).
        let leo = LinkSpec::parse("preset leo delay 30ms").expect("valid");
        let delay = leo.delay.expect("a delay");
        assert_eq!(delay.delay, crate::Duration::from_millis(30));
        assert!(delay.jitter.is_zero());
        assert_eq!(delay.distribution, crate::spec::Distribution::Uniform);
        // ... while `distribution` alone changes the preset's jitter shape.
        let pareto = LinkSpec::parse("preset leo distribution pareto").expect("valid");
        let delay = pareto.delay.expect("a delay");
        assert_eq!(delay.distribution, crate::spec::Distribution::Pareto);
        assert_eq!(delay.jitter, crate::Duration::from_millis(8));
        // The first `limit` replaces the preset's limits of both kinds.
        let with_limit = LinkSpec::parse("preset wifi limit 64kb").expect("valid");
        assert_eq!(
            (with_limit.queue.limit_packets, with_limit.queue.limit_bytes),
            (None, Some(65_536))
        );
        // `queue` replaces the discipline (cable-up's PIE).
        let fq = LinkSpec::parse("preset cable-up queue fq_codel").expect("valid");
        assert!(matches!(
            fq.queue.discipline,
            crate::spec::Discipline::FqCodel(_)
        ));
        // A distance adds the fibre to the access link's delay: cable + 6000 km = 5 + 45 ms.
        let far = LinkSpec::parse("preset cable distance 6000km").expect("valid");
        assert_eq!(
            far.delay.expect("a delay").delay,
            crate::Duration::from_millis(50)
        );
        // The user's own keywords still may not repeat.
        let twice = LinkSpec::parse("preset lte loss 1% loss 2%").expect_err("twice");
        assert_eq!(twice.to_string(), "'loss' is given twice");
    }

    #[test]
    fn preset_comes_first_and_once() {
        for (text, message) in [
            ("loss 1% preset lte", "'preset' must come first"),
            ("preset lte preset adsl", "'preset' must come first"),
            (
                "preset",
                "'preset' needs a preset name like lte, but the spec ended",
            ),
            ("preset lte4", "unknown preset 'lte4' (did you mean 'lte'?)"),
            ("prest lte", "did you mean 'preset'?"),
        ] {
            let error = LinkSpec::parse(text).expect_err(text).to_string();
            assert!(error.contains(message), "'{text}': {error}");
        }
    }

    #[test]
    fn a_round_trip_adds_both_directions_delays() {
        // adsl: 10 ms down and 10 ms up; ftth: 750 us one spec, both ways.
        let (adsl, _) = find("adsl").unwrap();
        assert_eq!(adsl.round_trip_delay(), Duration::from_millis(20));
        assert_eq!(adsl.directions(), [Direction::Down, Direction::Up]);
        assert_eq!(adsl.name_of(Direction::Up), "adsl-up");
        let (ftth, _) = find("ftth").unwrap();
        assert_eq!(ftth.round_trip_delay(), Duration::from_micros(1500));
        assert_eq!(ftth.directions(), [Direction::Down]);
        assert_eq!(ftth.name_of(Direction::Up), "ftth");
    }
}
