//! The canonical text form of a spec: a fixed keyword order, defaults left out, tc units.
//! It parses back to the same spec.

use std::fmt::{self, Write as _};

use super::{
    Chance, CodelConfig, Discipline, Distribution, FqCodelConfig, LinkSpec, LossSpec, PieConfig,
    RateSpec, RedConfig, RestartSpec, SlotInterval,
};
use crate::format::{self, Digits};

fn distribution_name(distribution: Distribution) -> &'static str {
    match distribution {
        Distribution::Uniform => "uniform",
        Distribution::Normal => "normal",
        Distribution::Pareto => "pareto",
        Distribution::ParetoNormal => "paretonormal",
    }
}

/// Words of the canonical form, joined by single spaces at the end.
#[derive(Default)]
struct Words(String);

impl Words {
    fn push(&mut self, word: impl fmt::Display) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        let _ = write!(self.0, "{word}");
    }

    /// `keyword value`, unless the value is the default (which the canonical form leaves
    /// out).
    fn unless_default<T: PartialEq + fmt::Display>(
        &mut self,
        keyword: &str,
        value: T,
        default: &T,
    ) {
        if value != *default {
            self.push(keyword);
            self.push(value);
        }
    }

    /// `keyword value` when there is a value.
    fn optional(&mut self, keyword: &str, value: Option<impl fmt::Display>) {
        if let Some(value) = value {
            self.push(keyword);
            self.push(value);
        }
    }

    /// The name of each `(flag, name)` whose flag is set, in order.
    fn push_flags(&mut self, flags: &[(bool, &str)]) {
        for &(flag, name) in flags {
            if flag {
                self.push(name);
            }
        }
    }

    fn chance(&mut self, keyword: &str, chance: Chance) {
        self.push(keyword);
        self.push(chance.probability);
        if !chance.correlation.is_zero() {
            self.push(chance.correlation);
        }
    }

    fn codel(&mut self, config: &CodelConfig, default: &CodelConfig) {
        self.unless_default("target", config.target, &default.target);
        self.unless_default("interval", config.interval, &default.interval);
        self.optional("ce_threshold", config.ce_threshold);
        if config.ecn != default.ecn {
            self.push(if config.ecn { "ecn" } else { "noecn" });
        }
    }

    fn red(&mut self, config: &RedConfig) {
        let default = RedConfig::default();
        self.push("min");
        self.push(format!("{}b", config.min_bytes));
        self.push("max");
        self.push(format!("{}b", config.max_bytes));
        self.unless_default(
            "probability",
            config.max_probability,
            &default.max_probability,
        );
        self.unless_default("avpkt", config.avpkt_bytes, &default.avpkt_bytes);
        self.push("weight");
        self.push(config.weight);
        self.push_flags(&[
            (config.ecn, "ecn"),
            (config.gentle, "gentle"),
            (config.harddrop, "harddrop"),
        ]);
    }

    fn fq_codel(&mut self, config: &FqCodelConfig) {
        let default = FqCodelConfig::default();
        self.unless_default("flows", config.flows, &default.flows);
        self.unless_default("quantum", config.quantum, &default.quantum);
        self.unless_default("drop_batch", config.drop_batch, &default.drop_batch);
        self.codel(&config.codel, &default.codel);
    }

    fn pie(&mut self, config: &PieConfig) {
        let default = PieConfig::default();
        self.unless_default("target", config.target, &default.target);
        self.unless_default("tupdate", config.tupdate, &default.tupdate);
        self.unless_default("max_burst", config.max_burst, &default.max_burst);
        self.unless_default("alpha", config.alpha, &default.alpha);
        self.unless_default("beta", config.beta, &default.beta);
        self.push_flags(&[
            (config.ecn, "ecn"),
            (config.bytemode, "bytemode"),
            (config.dq_rate_estimator, "dq_rate_estimator"),
        ]);
    }

    /// The delay line: `delay`, its jitter and correlation, and a distribution other
    /// than uniform.
    fn delay(&mut self, spec: &LinkSpec) {
        if let Some(delay) = spec.delay {
            self.push("delay");
            self.push(delay.delay);
            if !delay.jitter.is_zero() {
                self.push(delay.jitter);
                if !delay.correlation.is_zero() {
                    self.push(delay.correlation);
                }
            }
            if delay.distribution != Distribution::Uniform {
                self.push("distribution");
                self.push(distribution_name(delay.distribution));
            }
        }
        if let Some(quantiles) = &spec.delay_quantiles {
            self.push("quantiles");
            for quantile in &quantiles.quantiles {
                self.push(*quantile);
            }
        }
    }

    /// What harms packets: `loss` (random, state or gemodel), `ecn`, `duplicate`,
    /// `corrupt`, and `reorder` with a `gap` other than 1.
    fn impairments(&mut self, spec: &LinkSpec) {
        match spec.loss {
            Some(LossSpec::Random(chance)) => self.chance("loss", chance),
            Some(LossSpec::State {
                p13,
                p31,
                p32,
                p23,
                p14,
            }) => {
                self.push("loss state");
                for p in [p13, p31, p32, p23, p14] {
                    self.push(p);
                }
            }
            Some(LossSpec::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            }) => {
                self.push("loss gemodel");
                for p in [p, r, loss_in_bad, loss_in_good] {
                    self.push(p);
                }
            }
            None => {}
        }
        if spec.ecn {
            self.push("ecn");
        }
        if let Some(chance) = spec.duplicate {
            self.chance("duplicate", chance);
        }
        if let Some(chance) = spec.corrupt {
            self.chance("corrupt", chance);
        }
        if let Some(reorder) = spec.reorder {
            self.chance(
                "reorder",
                Chance {
                    probability: reorder.probability,
                    correlation: reorder.correlation,
                },
            );
            if reorder.gap != 1 {
                self.push("gap");
                self.push(reorder.gap);
            }
        }
    }

    /// What paces packets: the `rate` (fixed with its bucket, a `schedule`, or a `trace`),
    /// `pps` and `slot`.
    fn pacing(&mut self, spec: &LinkSpec) {
        match &spec.rate {
            Some(RateSpec::Fixed(fixed)) => {
                self.push("rate");
                self.push(fixed.rate);
                if fixed.packet_overhead != 0 || fixed.cell_size != 0 {
                    self.push(fixed.packet_overhead);
                }
                if fixed.cell_size != 0 {
                    self.push(fixed.cell_size);
                    if fixed.cell_overhead != 0 {
                        self.push(fixed.cell_overhead);
                    }
                }
                if let Some(bucket) = spec.bucket {
                    self.push("burst");
                    self.push(format!("{}b", bucket.burst_bytes));
                    self.optional("peakrate", bucket.peak);
                }
                if let Some(restart) = spec.restart {
                    self.push("restart");
                    self.push(format::percent_as_is(
                        restart.from * 100.0,
                        Digits::up_to(6),
                    ));
                    self.push(restart.ramp);
                    if restart.idle != RestartSpec::DEFAULT_IDLE {
                        self.push("idle");
                        self.push(restart.idle);
                    }
                }
            }
            Some(RateSpec::Schedule(schedule)) => {
                self.push("schedule");
                self.push(schedule.step);
                for rate in &schedule.rates {
                    self.push(rate);
                }
                if schedule.repeat {
                    self.push("loop");
                }
            }
            Some(RateSpec::Trace(trace)) => {
                self.push("trace");
                self.push(&trace.path);
            }
            None => {}
        }
        self.optional("pps", spec.packet_rate);
        if let Some(slot) = spec.slot {
            self.push("slot");
            match slot.interval {
                SlotInterval::Uniform { min, max } => {
                    self.push(min);
                    if max != min {
                        self.push(max);
                    }
                }
                SlotInterval::Distribution {
                    distribution,
                    delay,
                    jitter,
                } => {
                    self.push("distribution");
                    self.push(distribution_name(distribution));
                    self.push(delay);
                    self.push(jitter);
                }
            }
            self.optional("packets", slot.max_packets);
            self.optional("bytes", slot.max_bytes.map(|bytes| format!("{bytes}b")));
        }
    }

    /// The queue: its `limit`s in packets and in bytes, and a discipline other than
    /// taildrop.
    fn queue(&mut self, spec: &LinkSpec) {
        self.optional("limit", spec.queue.limit_packets);
        self.optional(
            "limit",
            spec.queue.limit_bytes.map(|bytes| format!("{bytes}b")),
        );
        match &spec.queue.discipline {
            Discipline::TailDrop => {}
            Discipline::HeadDrop => self.push("queue headdrop"),
            Discipline::Red(config) => {
                self.push("queue red");
                self.red(config);
            }
            Discipline::Codel(config) => {
                self.push("queue codel");
                self.codel(config, &CodelConfig::default());
            }
            Discipline::FqCodel(config) => {
                self.push("queue fq_codel");
                self.fq_codel(config);
            }
            Discipline::Pie(config) => {
                self.push("queue pie");
                self.pie(config);
            }
        }
        self.optional("ring", spec.queue.ring);
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = Words::default();
        words.delay(self);
        words.impairments(self);
        words.pacing(self);
        words.queue(self);
        words.optional("mtu", self.mtu);
        words.optional("seed", self.seed);
        f.write_str(&words.0)
    }
}
