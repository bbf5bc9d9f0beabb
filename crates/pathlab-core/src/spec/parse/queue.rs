//! The queue keywords: `limit` and `queue` with its disciplines' options (tail drop,
//! CoDel, fq_codel, PIE, RED), each bounded where it is parsed.

use super::super::units;
use super::super::{CodelConfig, Discipline, FqCodelConfig, PieConfig, RedConfig};
use super::{Parser, SpecError, SIZE};

impl Parser<'_> {
    pub(super) fn limit(&mut self) -> Result<(), SpecError> {
        let Some(token) = self.take() else {
            return Err(SpecError::Ended {
                keyword: "limit".into(),
                what: "a packet count like 100 or a size like 150kb",
            });
        };
        if !self.seen.contains(&"limit") {
            // The first `limit` replaces a preset's queue limits, both kinds.
            self.seen.push("limit");
            self.spec.queue.limit_packets = None;
            self.spec.queue.limit_bytes = None;
        }
        if let Some(bytes) = units::size_with_unit(token) {
            if self.spec.queue.limit_bytes.replace(bytes).is_some() {
                return Err(SpecError::Duplicate("limit SIZE".into()));
            }
        } else if let Some(packets) = units::integer(token) {
            let packets = u32::try_from(packets).map_err(|_| SpecError::OutOfRange {
                what: "limit".into(),
                range: "at most 4294967295 packets",
                got: token.to_owned(),
            })?;
            if std::mem::replace(&mut self.limit_packets_seen, true) {
                return Err(SpecError::Duplicate("limit PACKETS".into()));
            }
            self.spec.queue.limit_packets = Some(packets);
        } else {
            return Err(SpecError::Expected {
                what: "a packet count like 100 or a size like 150kb",
                after: "limit".into(),
                got: token.to_owned(),
            });
        }
        Ok(())
    }

    pub(super) fn queue(&mut self) -> Result<(), SpecError> {
        const WHAT: &str = "one of taildrop, headdrop, red, codel, fq_codel, pie";
        let (name, _) = self.required("queue", WHAT, |t| Some(t.to_owned()))?;
        self.spec.queue.discipline = match name.as_str() {
            "taildrop" | "fifo" | "pfifo" | "bfifo" => Discipline::TailDrop,
            "headdrop" | "pfifo_head_drop" => Discipline::HeadDrop,
            "codel" => Discipline::Codel(self.codel(CodelConfig::default())?),
            "fq_codel" | "fq-codel" => Discipline::FqCodel(self.fq_codel()?),
            "pie" => Discipline::Pie(self.pie()?),
            "red" => {
                self.red()?;
                Discipline::Red(RedConfig::default())
            }
            _ => {
                return Err(SpecError::Expected {
                    what: WHAT,
                    after: "queue".into(),
                    got: name,
                })
            }
        };
        Ok(())
    }

    /// Takes the next token if it is one of a discipline's `options`.
    pub(super) fn option(&mut self, options: &[&'static str]) -> Option<&'static str> {
        let token = self.peek()?;
        let option = options.iter().find(|o| **o == token)?;
        self.next += 1;
        Some(option)
    }

    /// A byte count that must fit a u32 and be at least `min`.
    fn bytes_u32(
        &mut self,
        keyword: &str,
        min: u32,
        range: &'static str,
    ) -> Result<u32, SpecError> {
        let (bytes, token) = self.required(keyword, SIZE, units::size)?;
        u32::try_from(bytes)
            .ok()
            .filter(|b| *b >= min)
            .ok_or_else(|| SpecError::OutOfRange {
                what: keyword.to_owned(),
                range,
                got: token.to_owned(),
            })
    }

    /// Applies one of CoDel's options (shared by codel and fq_codel).
    fn codel_option(&mut self, option: &str, config: &mut CodelConfig) -> Result<(), SpecError> {
        match option {
            "target" => config.target = self.time(option)?,
            "interval" => config.interval = self.time(option)?,
            "ce_threshold" => config.ce_threshold = Some(self.time(option)?),
            "ecn" => config.ecn = true,
            _ => config.ecn = false, // noecn
        }
        Ok(())
    }

    fn codel(&mut self, mut config: CodelConfig) -> Result<CodelConfig, SpecError> {
        while let Some(option) = self.option(CODEL_OPTIONS) {
            self.codel_option(option, &mut config)?;
        }
        check_codel(&config)?;
        Ok(config)
    }

    fn fq_codel(&mut self) -> Result<FqCodelConfig, SpecError> {
        const OPTIONS: &[&str] = &[
            "flows",
            "quantum",
            "drop_batch",
            "target",
            "interval",
            "ce_threshold",
            "ecn",
            "noecn",
        ];
        let mut config = FqCodelConfig::default();
        while let Some(option) = self.option(OPTIONS) {
            match option {
                "flows" => {
                    config.flows = self.count(option)?;
                    if !(1..=65_536).contains(&config.flows) {
                        return Err(SpecError::OutOfRange {
                            what: "flows".into(),
                            range: "between 1 and 65536",
                            got: config.flows.to_string(),
                        });
                    }
                }
                "quantum" => config.quantum = self.bytes_u32(option, 64, "at least 64 bytes")?,
                "drop_batch" => config.drop_batch = self.count(option)?.max(1),
                codel => self.codel_option(codel, &mut config.codel)?,
            }
        }
        check_codel(&config.codel)?;
        Ok(config)
    }

    fn pie(&mut self) -> Result<PieConfig, SpecError> {
        const OPTIONS: &[&str] = &[
            "target",
            "tupdate",
            "max_burst",
            "alpha",
            "beta",
            "ecn",
            "noecn",
            "bytemode",
            "dq_rate_estimator",
        ];
        let mut config = PieConfig::default();
        let float = |t: &str| t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
        while let Some(option) = self.option(OPTIONS) {
            match option {
                "target" => config.target = self.time(option)?,
                "tupdate" => config.tupdate = self.time(option)?,
                "max_burst" => config.max_burst = self.time(option)?,
                "alpha" => config.alpha = self.required(option, "a number like 0.125", float)?.0,
                "beta" => config.beta = self.required(option, "a number like 1.25", float)?.0,
                "ecn" => config.ecn = true,
                "noecn" => config.ecn = false,
                "bytemode" => config.bytemode = true,
                _ => config.dq_rate_estimator = true,
            }
        }
        if config.tupdate.is_zero() || config.target.is_zero() {
            return Err(SpecError::Conflict(
                "pie's target and tupdate must be longer than zero".into(),
            ));
        }
        Ok(config)
    }

    /// RED's options; thresholds default from the limit, so they are resolved in `finish`.
    fn red(&mut self) -> Result<(), SpecError> {
        const OPTIONS: &[&str] = &[
            "min",
            "max",
            "avpkt",
            "probability",
            "burst",
            "weight",
            "ecn",
            "gentle",
            "harddrop",
        ];
        let mut config = RedConfig::default();
        let (mut min, mut max, mut burst, mut weight) = (None, None, None, None);
        let fraction = |t: &str| t.parse::<f64>().ok().filter(|w| *w > 0.0 && *w <= 1.0);
        while let Some(option) = self.option(OPTIONS) {
            match option {
                "min" => min = Some(self.required(option, SIZE, units::size)?.0),
                "max" => max = Some(self.required(option, SIZE, units::size)?.0),
                "avpkt" => {
                    config.avpkt_bytes =
                        self.bytes_u32(option, 1, "between 1 and 4294967295 bytes")?;
                }
                "probability" => {
                    config.max_probability = self.percent(option, "red probability")?;
                    if config.max_probability.is_zero() {
                        return Err(SpecError::OutOfRange {
                            what: "red probability".into(),
                            range: "above 0% and at most 100%",
                            got: "0%".into(),
                        });
                    }
                }
                "burst" => burst = Some(f64::from(self.count(option)?)),
                "weight" => {
                    weight = Some(
                        self.required(option, "a number in (0, 1] like 0.002", fraction)?
                            .0,
                    );
                }
                "ecn" => config.ecn = true,
                "gentle" => config.gentle = true,
                _ => config.harddrop = true,
            }
        }
        self.red = Some((config, min, max, burst, weight));
        Ok(())
    }
}

const CODEL_OPTIONS: &[&str] = &["target", "interval", "ce_threshold", "ecn", "noecn"];

fn check_codel(config: &CodelConfig) -> Result<(), SpecError> {
    if config.target.is_zero() || config.interval.is_zero() {
        return Err(SpecError::Conflict(
            "codel's target and interval must be longer than zero".into(),
        ));
    }
    Ok(())
}

/// tc-red's choice of EWMA weight: the largest power of 1/2 such that a burst of `burst`
/// packets arriving at an empty queue does not push the average above `min_packets`
/// (Floyd & Jacobson 1993, section 10): burst + 1 - min < (1 - (1-W)^burst) / W.
pub(in crate::spec) fn red_weight(burst: f64, min_packets: f64) -> f64 {
    let target = burst + 1.0 - min_packets;
    for log in 1..=23 {
        let w = 0.5_f64.powi(log);
        if (1.0 - (1.0 - w).powf(burst)) / w > target {
            return w;
        }
    }
    0.5_f64.powi(23)
}
