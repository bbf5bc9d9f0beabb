//! `distance KM`: a propagation delay from a great-circle distance, by the rule of thumb of
//! shared/seeds/003 (a WAN emulator's guide): light in fibre covers 2/3 c = 200 km/ms, and
//! the cable runs 1.5 times the straight line, so one way takes 1.5 x km / 200 ms
//! (6000 km: 45 ms).

use super::parse::SpecError;
use crate::time::Duration;

/// How much longer a fibre route is than the great-circle distance.
pub const ROUTE_FACTOR: f64 = 1.5;

/// Kilometres light covers in a millisecond in fibre (2/3 of c, rounded).
pub const FIBRE_KM_PER_MS: f64 = 200.0;

/// The longest distance `distance` takes: once around the Earth at the equator. A longer
/// one is surely a typo (great-circle distances stop at half of this).
pub const MAX_KM: f64 = 40_075.0;

/// Kilometres in a statute mile.
const KM_PER_MILE: f64 = 1.609_344;

const WHAT: &str = "a distance with a unit, like 6000km or 3700mi";

/// The one-way propagation delay over `km` kilometres of great-circle distance:
/// `ROUTE_FACTOR x km / FIBRE_KM_PER_MS` milliseconds, to the nanosecond.
pub fn propagation_delay(km: f64) -> Duration {
    let nanos = (ROUTE_FACTOR * km / FIBRE_KM_PER_MS * 1e6).round();
    Duration::from_nanos(nanos.max(0.0) as u64)
}

/// Parses `6000km`, `3700mi` or `500m` into kilometres; rejects a missing unit, a negative
/// or a distance longer than [`MAX_KM`], naming the token.
pub(super) fn parse_km(token: &str) -> Result<f64, SpecError> {
    let expected = || SpecError::Expected {
        what: WHAT,
        after: "distance".into(),
        got: token.to_owned(),
    };
    let split = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(token.len());
    let (number, unit) = token.split_at(split);
    let value: f64 = number.parse().map_err(|_| expected())?;
    let km_per_unit = match unit.to_ascii_lowercase().as_str() {
        "km" => 1.0,
        "m" => 1e-3,
        "mi" => KM_PER_MILE,
        _ => return Err(expected()),
    };
    let km = value * km_per_unit;
    if !km.is_finite() || !(0.0..=MAX_KM).contains(&km) {
        return Err(SpecError::OutOfRange {
            what: "distance".into(),
            range: "between 0 and 40075 km (once around the Earth)",
            got: token.to_owned(),
        });
    }
    Ok(km)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's table (1.5 x km / 200 ms one way) and its worked example.
    #[test]
    fn delay_follows_the_seeds_rule() {
        for (km, millis) in [
            (100.0, 0.75),
            (200.0, 1.5),
            (400.0, 3.0),
            (600.0, 4.5),
            (6000.0, 45.0),
        ] {
            let delay = propagation_delay(km);
            assert!(
                (delay.as_millis_f64() - millis).abs() < 1e-9,
                "{km} km: {delay}"
            );
        }
        assert_eq!(propagation_delay(6000.0), Duration::from_millis(45));
        assert_eq!(propagation_delay(0.0), Duration::ZERO);
    }

    #[test]
    fn units_convert_to_kilometres() {
        assert_eq!(parse_km("6000km"), Ok(6000.0));
        assert_eq!(parse_km("6000KM"), Ok(6000.0));
        assert_eq!(parse_km("1.5km"), Ok(1.5));
        assert_eq!(parse_km("500m"), Ok(0.5));
        assert_eq!(parse_km("0km"), Ok(0.0));
        let miles = parse_km("3728mi").expect("miles");
        assert!((miles - 3728.0 * 1.609_344).abs() < 1e-9);
        // 1 mile: 1.609344 km x 7.5 us/km = 12.07008 us.
        assert_eq!(
            propagation_delay(parse_km("1mi").expect("a mile")),
            Duration::from_nanos(12_070)
        );
    }

    #[test]
    fn bad_distances_are_named() {
        for (token, message) in [
            ("6000", "expected a distance with a unit, like 6000km or 3700mi after 'distance', got '6000'"),
            ("far", "got 'far'"),
            ("6000furlongs", "got '6000furlongs'"),
            ("km", "got 'km'"),
            ("1.2.3km", "got '1.2.3km'"),
            ("-5km", "distance must be between 0 and 40075 km (once around the Earth), got -5km"),
            ("50000km", "got 50000km"),
            ("30000mi", "got 30000mi"),
            ("1e309km", "got '1e309km'"),
        ] {
            let error = parse_km(token).expect_err(token).to_string();
            assert!(error.contains(message), "{token}: {error}");
        }
    }

    fn parse(text: &str) -> crate::LinkSpec {
        crate::LinkSpec::parse(text).unwrap_or_else(|e| panic!("'{text}': {e}"))
    }

    #[test]
    fn distance_sets_the_delay_and_adds_to_one_given() {
        let alone = parse("distance 6000km").delay.expect("a delay");
        assert_eq!(alone.delay, Duration::from_millis(45));
        assert!(alone.jitter.is_zero());
        // `delay` is what the path adds besides the fibre (queues, the access link): the sum,
        // in either order, keeping the jitter.
        for text in [
            "delay 5ms 2ms distance 6000km",
            "distance 6000km delay 5ms 2ms",
        ] {
            let delay = parse(text).delay.expect("a delay");
            assert_eq!(delay.delay, Duration::from_millis(50), "{text}");
            assert_eq!(delay.jitter, Duration::from_millis(2), "{text}");
        }
        // Reordering needs a delay, and a distance is one.
        assert!(crate::LinkSpec::parse("distance 100km reorder 1%").is_ok());
    }

    #[test]
    fn canonical_form_is_the_delay_and_parses_back() {
        for (text, canonical) in [
            ("distance 6000km", "delay 45ms"),
            ("distance 100km", "delay 750us"),
            ("distance 1mi", "delay 12070ns"),
            (
                "distance 1000km delay 2ms rate 10mbit",
                "delay 9500us rate 10mbit",
            ),
        ] {
            let spec = parse(text);
            assert_eq!(spec.to_string(), canonical, "{text}");
            assert_eq!(parse(canonical), spec, "{text}");
        }
    }

    #[test]
    fn distance_errors_name_the_keyword() {
        for (text, message) in [
            (
                "distance",
                "'distance' needs a distance like 6000km, but the spec ended",
            ),
            ("distance 1km distance 2km", "'distance' is given twice"),
            ("distance -5km", "distance must be between 0 and 40075 km"),
            ("distance 6000 loss 1%", "got '6000'"),
            ("distnace 6000km", "did you mean 'distance'?"),
        ] {
            let error = crate::LinkSpec::parse(text).expect_err(text).to_string();
            assert!(error.contains(message), "'{text}': {error}");
        }
    }
}
