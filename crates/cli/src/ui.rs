//! What the admin commands take and show beyond clap's defaults: ranged
//! value parsers for integer flags and progress bar styles.
//!
//! The benchmark binary (`crates/bench`) has its own copy of these two
//! helpers: they are a few lines, and a crate shared by two binaries for
//! them alone would cost more than the copy.

use anyhow::Context;
use indicatif::ProgressStyle;

/// A value parser for integer flags: a whole number in `min..=max`, the
/// range named in every error (clap's own ranged parsers say only "number
/// too large to fit in target type" past the type's end).
pub(crate) fn int_in<T: TryFrom<u128>>(
    min: u128,
    max: u128,
) -> impl Fn(&str) -> Result<T, String> + Clone {
    move |text| {
        let range = || format!("{min}..={max}");
        let value = text
            .parse::<u128>()
            .map_err(|_| format!("{text} is not a whole number in {}", range()))?;
        if !(min..=max).contains(&value) {
            return Err(format!("{text} is not in {}", range()));
        }
        T::try_from(value).map_err(|_| format!("{text} is not in {}", range()))
    }
}

/// A progress style from `template`, which may use `{rate}`: items per
/// second as a whole number (indicatif's `{per_sec}` prints four decimals,
/// `22,022.5982/s`).
pub(crate) fn progress_style(template: &str) -> anyhow::Result<ProgressStyle> {
    Ok(ProgressStyle::with_template(template)
        .with_context(|| format!("progress template {template:?}"))?
        .with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        ))
}
