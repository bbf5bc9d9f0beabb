//! The experiments shipped with pathlab (`pathlab lab NAME`): spec files users can copy
//! and edit (`pathlab lab NAME --print` shows one).

/// (name, spec text) of every recipe.
pub const RECIPES: &[(&str, &str)] = &[
    ("bufferbloat", include_str!("../recipes/bufferbloat.toml")),
    ("aqm", include_str!("../recipes/aqm.toml")),
    ("owd-probe", include_str!("../recipes/owd-probe.toml")),
    ("wan-sweep", include_str!("../recipes/wan-sweep.toml")),
    ("bond", include_str!("../recipes/bond.toml")),
    ("app-limits", include_str!("../recipes/app-limits.toml")),
    ("bond-fair", include_str!("../recipes/bond-fair.toml")),
    ("modem-pps", include_str!("../recipes/modem-pps.toml")),
    ("bond-pps", include_str!("../recipes/bond-pps.toml")),
];

/// A recipe's spec text by name.
pub fn recipe(name: &str) -> Option<&'static str> {
    RECIPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{expand, Experiment};

    #[test]
    fn a_sweep_number_takes_its_unit_from_the_spec_around_its_placeholder() {
        let wan = expand(recipe("wan-sweep").unwrap(), true).expect("expands");
        assert_eq!(
            wan[5].parameters,
            [
                ("delay".to_owned(), "10ms".to_owned()),
                ("loss".to_owned(), "1%".to_owned())
            ]
        );
        assert_eq!(wan[5].label, "delay=10, loss=1");
    }

    #[test]
    fn every_recipe_parses_in_every_sweep_point_and_has_a_quick_form() {
        for (name, text) in RECIPES {
            for point in expand(text, false).unwrap_or_else(|e| panic!("{name}: {e}")) {
                let experiment = Experiment::parse(&point.text)
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", point.label));
                assert!(experiment.quick.is_some(), "{name} has a quick length");
            }
            // --quick ends within 2 minutes, counting a second to build and tear down each
            // run.
            let quick: f64 = expand(text, true)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .iter()
                .map(|point| {
                    let e = Experiment::parse(&point.text)
                        .expect("parsed above")
                        .quick();
                    e.duration.as_secs_f64() + 1.0
                })
                .sum();
            assert!(quick <= 105.0, "{name}: --quick takes {quick} s");
        }
    }
}
