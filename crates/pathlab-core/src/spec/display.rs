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
        for (flag, name) in [
            (config.ecn, "ecn"),
            (config.gentle, "gentle"),
            (config.harddrop, "harddrop"),
        ] {
            if flag {
                self.push(name);
            }
        }
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
        for (flag, name) in [
            (config.ecn, "ecn"),
            (config.bytemode, "bytemode"),
            (config.dq_rate_estimator, "dq_rate_estimator"),
        ] {
            if flag {
                self.push(name);
            }
        }
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = Words::default();
        if let Some(delay) = self.delay {
            words.push("delay");
            words.push(delay.delay);
            if !delay.jitter.is_zero() {
                words.push(delay.jitter);
                if !delay.correlation.is_zero() {
                    words.push(delay.correlation);
                }
            }
            if delay.distribution != Distribution::Uniform {
                words.push("distribution");
                words.push(distribution_name(delay.distribution));
            }
        }
        match self.loss {
            Some(LossSpec::Random(chance)) => words.chance("loss", chance),
            Some(LossSpec::State {
                p13,
                p31,
                p32,
                p23,
                p14,
            }) => {
                words.push("loss state");
                for p in [p13, p31, p32, p23, p14] {
                    words.push(p);
                }
            }
            Some(LossSpec::GilbertElliott {
                p,
                r,
                loss_in_bad,
                loss_in_good,
            }) => {
                words.push("loss gemodel");
                for p in [p, r, loss_in_bad, loss_in_good] {
                    words.push(p);
                }
            }
            None => {}
        }
        if self.ecn {
            words.push("ecn");
        }
        if let Some(chance) = self.duplicate {
            words.chance("duplicate", chance);
        }
        if let Some(chance) = self.corrupt {
            words.chance("corrupt", chance);
        }
        if let Some(reorder) = self.reorder {
            words.chance(
                "reorder",
                Chance {
                    probability: reorder.probability,
                    correlation: reorder.correlation,
                },
            );
            if reorder.gap != 1 {
                words.push("gap");
                words.push(reorder.gap);
            }
        }
        match &self.rate {
            Some(RateSpec::Fixed(fixed)) => {
                words.push("rate");
                words.push(fixed.rate);
                if fixed.packet_overhead != 0 || fixed.cell_size != 0 {
                    words.push(fixed.packet_overhead);
                }
                if fixed.cell_size != 0 {
                    words.push(fixed.cell_size);
                    if fixed.cell_overhead != 0 {
                        words.push(fixed.cell_overhead);
                    }
                }
                if let Some(bucket) = self.bucket {
                    words.push("burst");
                    words.push(format!("{}b", bucket.burst_bytes));
                    if let Some(peak) = bucket.peak {
                        words.push("peakrate");
                        words.push(peak);
                    }
                }
            }
            Some(RateSpec::Schedule(schedule)) => {
                words.push("schedule");
                words.push(schedule.step);
                for rate in &schedule.rates {
                    words.push(rate);
                }
                if schedule.repeat {
                    words.push("loop");
                }
            }
            Some(RateSpec::Trace(trace)) => {
                words.push("trace");
                words.push(&trace.path);
            }
            None => {}
        }
        if let Some(packet_rate) = self.packet_rate {
            words.push("pps");
            words.push(packet_rate);
        }
        if let Some(slot) = self.slot {
            words.push("slot");
            match slot.interval {
                SlotInterval::Uniform { min, max } => {
                    words.push(min);
                    if max != min {
                        words.push(max);
                    }
                }
                SlotInterval::Distribution {
                    distribution,
                    delay,
                    jitter,
                } => {
                    words.push("distribution");
                    words.push(distribution_name(distribution));
                    words.push(delay);
                    words.push(jitter);
                }
            }
            if let Some(packets) = slot.max_packets {
                words.push("packets");
                words.push(packets);
            }
            if let Some(bytes) = slot.max_bytes {
                words.push("bytes");
                words.push(format!("{bytes}b"));
            }
        }
        if let Some(packets) = self.queue.limit_packets {
            words.push("limit");
            words.push(packets);
        }
        if let Some(bytes) = self.queue.limit_bytes {
            words.push("limit");
            words.push(format!("{bytes}b"));
        }
        match &self.queue.discipline {
            Discipline::TailDrop => {}
            Discipline::HeadDrop => words.push("queue headdrop"),
            Discipline::Red(config) => {
                words.push("queue red");
                words.red(config);
            }
            Discipline::Codel(config) => {
                words.push("queue codel");
                words.codel(config, &CodelConfig::default());
            }
            Discipline::FqCodel(config) => {
                words.push("queue fq_codel");
                words.fq_codel(config);
            }
            Discipline::Pie(config) => {
                words.push("queue pie");
                words.pie(config);
            }
        }
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
