//! A measured figure: its value, its 95% confidence interval, and how it was measured.

use serde::{Deserialize, Serialize};

/// One figure of a twin: the estimate, the interval the true value lies in with 95%
/// confidence (`low <= value <= high`), and in words how it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// The estimate.
    pub value: f64,
    /// The interval's low end.
    pub low: f64,
    /// The interval's high end.
    pub high: f64,
    /// How it was measured, for a person: what was sent, what was counted.
    pub how: String,
}

impl Figure {
    /// A figure with its interval; the interval is widened to hold the value.
    pub fn new(value: f64, low: f64, high: f64, how: impl Into<String>) -> Figure {
        Figure {
            value,
            low: low.min(value),
            high: high.max(value),
            how: how.into(),
        }
    }

    /// Whether `truth` lies in the interval.
    pub fn covers(&self, truth: f64) -> bool {
        self.low <= truth && truth <= self.high
    }

    /// The same figure in another unit (every number times `factor`, positive).
    pub fn scaled(&self, factor: f64) -> Figure {
        Figure {
            value: self.value * factor,
            low: self.low * factor,
            high: self.high * factor,
            how: self.how.clone(),
        }
    }
}
