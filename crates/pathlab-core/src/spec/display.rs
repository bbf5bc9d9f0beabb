//! The canonical text form of a spec: a fixed keyword order, defaults left out, tc units.
//! It parses back to the same spec.

use std::fmt::{self, Write as _};

use super::{
    Chance, CodelConfig, Discipline, Distribution, FqCodelConfig, LinkSpec, LossSpec, PieConfig,
    RateSpec, RedConfig, SlotInterval,
};

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
        if config.target != default.target {
            self.push("target");
            self.push(config.target);
        }
        if config.interval != default.interval {
            self.push("interval");
            self.push(config.interval);
        }
        if let Some(threshold) = config.ce_threshold {
            self.push("ce_threshold");
            self.push(threshold);
        }
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
        if config.max_probability != default.max_probability {
            self.push("probability");
            self.push(config.max_probability);
        }
        if config.avpkt_bytes != default.avpkt_bytes {
            self.push("avpkt");
            self.push(config.avpkt_bytes);
        }
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
        if config.flows != default.flows {
            self.push("flows");
            self.push(config.flows);
        }
        if config.quantum != default.quantum {
            self.push("quantum");
            self.push(config.quantum);
        }
        if config.drop_batch != default.drop_batch {
            self.push("drop_batch");
            self.push(config.drop_batch);
        }
        self.codel(&config.codel, &default.codel);
    }

    fn pie(&mut self, config: &PieConfig) {
        let default = PieConfig::default();
        for (value, default, name) in [
            (config.target, default.target, "target"),
            (config.tupdate, default.tupdate, "tupdate"),
            (config.max_burst, default.max_burst, "max_burst"),
        ] {
            if value != default {
                self.push(name);
                self.push(value);
            }
        }
        for (value, default, name) in [
            (config.alpha, default.alpha, "alpha"),
            (config.beta, default.beta, "beta"),
        ] {
            if value != default {
                self.push(name);
                self.push(value);
            }
        }
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
                    if let Some(peak) = bucket.peak {
                        self.push("peakrate");
                        self.push(peak);
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
        if let Some(packet_rate) = spec.packet_rate {
            self.push("pps");
            self.push(packet_rate);
        }
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
            if let Some(packets) = slot.max_packets {
                self.push("packets");
                self.push(packets);
            }
            if let Some(bytes) = slot.max_bytes {
                self.push("bytes");
                self.push(format!("{bytes}b"));
            }
        }
    }

    /// The queue: its `limit`s in packets and in bytes, and a discipline other than
    /// taildrop.
    fn queue(&mut self, spec: &LinkSpec) {
        if let Some(packets) = spec.queue.limit_packets {
            self.push("limit");
            self.push(packets);
        }
        if let Some(bytes) = spec.queue.limit_bytes {
            self.push("limit");
            self.push(format!("{bytes}b"));
        }
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
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = Words::default();
        words.delay(self);
        words.impairments(self);
        words.pacing(self);
        words.queue(self);
        if let Some(mtu) = self.mtu {
            words.push("mtu");
            words.push(mtu);
        }
        if let Some(seed) = self.seed {
            words.push("seed");
            words.push(seed);
        }
        f.write_str(&words.0)
    }
}
