//! One way to write a duration everywhere: URLs, the CLI, config files.

use std::time::Duration;

/// Parses a duration written as a number and a unit: `250ms`, `30s`, `1.5s`,
/// `5m`, `1h` (also `us`). A bare number is refused, since a unit-less `5000`
/// has meant milliseconds to one tool and seconds to another.
///
/// ```
/// use distlock_core::toolkit::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert!(parse_duration("5000").unwrap_err().contains("5000ms"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const FORM: &str = "write a number and a unit, like 250ms, 30s, 5m or 1h";
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!("is not a duration; {FORM}"));
    }
    let seconds_per_unit = match unit.trim() {
        "" => {
            return Err(format!(
                "has no unit; {FORM} (for example {number}ms or {number}s)"
            ));
        }
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("has an unknown unit; {FORM}")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("is not a duration; {FORM}"))?;
    Duration::try_from_secs_f64(value * seconds_per_unit)
        .map_err(|_| format!("is too long; {FORM}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit() {
        assert_eq!(parse_duration("7us"), Ok(Duration::from_micros(7)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 30s "), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_what_it_cannot_read_and_says_the_form() {
        for bad in [
            "",
            "s",
            "soon",
            "5 parsecs",
            "1.2.3s",
            "-1s",
            "1e400s",
            "5000",
        ] {
            let why = parse_duration(bad).unwrap_err();
            assert!(why.contains("250ms"), "{bad}: {why}");
        }
    }
}
