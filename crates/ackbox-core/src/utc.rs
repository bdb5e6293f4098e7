//! Calendar times in UTC of epoch-millisecond [`Timestamp`]s: SigV4's
//! request dates, and every time ackbox shows a person (the CLI, the
//! dashboard) as RFC 3339 instead of raw milliseconds.

use std::fmt;

use crate::clock::Timestamp;

/// A UTC calendar time to the second (proleptic Gregorian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// The year, e.g. 2026.
    pub year: i64,
    /// 1..=12.
    pub month: i64,
    /// 1..=31.
    pub day: i64,
    /// 0..=23.
    pub hour: i64,
    /// 0..=59.
    pub minute: i64,
    /// 0..=60 (a leap second is accepted on input).
    pub second: i64,
}

impl UtcTime {
    /// The calendar time of `epoch_millis`, milliseconds dropped.
    pub fn from_epoch_millis(epoch_millis: Timestamp) -> Self {
        let seconds = epoch_millis.div_euclid(1_000);
        let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: second_of_day / 3_600,
            minute: second_of_day % 3_600 / 60,
            second: second_of_day % 60,
        }
    }

    /// Epoch milliseconds, or `None` when a field is out of its range or the
    /// day does not exist in that month (February 30th).
    pub fn to_epoch_millis(self) -> Option<Timestamp> {
        let Self {
            year,
            month,
            day,
            hour,
            minute,
            second,
        } = self;
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || !(0..=23).contains(&hour)
            || !(0..=59).contains(&minute)
            || !(0..=60).contains(&second)
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        if civil_from_days(days) != (year, month, day) {
            return None;
        }
        Some(((days * 86_400) + hour * 3_600 + minute * 60 + second) * 1_000)
    }
}

/// RFC 3339: `2026-12-07T02:44:24Z`.
impl fmt::Display for UtcTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// `epoch_millis` as a person reads it: RFC 3339 in UTC, to the second.
pub fn rfc3339(epoch_millis: Timestamp) -> String {
    UtcTime::from_epoch_millis(epoch_millis).to_string()
}

/// `epoch_millis` in RFC 3339 in UTC to the millisecond, as SNS stamps a
/// notification: `2026-12-07T04:43:02.842Z`.
pub fn rfc3339_millis(epoch_millis: Timestamp) -> String {
    let seconds = rfc3339(epoch_millis);
    let stem = seconds.strip_suffix('Z').unwrap_or(&seconds);
    format!("{stem}.{:03}Z", epoch_millis.rem_euclid(1_000))
}

/// Reads an age such as `90s`, `30m`, `2h` or `1d` (bare numbers are
/// seconds) as seconds: how the CLI and the dashboard take "older than" and
/// "since".
pub fn parse_age(text: &str) -> Result<u32, String> {
    let (digits, unit) = match text.char_indices().find(|(_, ch)| !ch.is_ascii_digit()) {
        Some((split, _)) => text.split_at(split),
        None => (text, "s"),
    };
    let amount: u32 = digits
        .parse()
        .map_err(|_| format!("expected an age like 30m or 2h; got {text:?}"))?;
    let unit_seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown age unit {other:?} in {text:?}; use s, m, h or d"
            ));
        }
    };
    amount
        .checked_mul(unit_seconds)
        .ok_or_else(|| format!("age {text:?} is too large"))
}

/// Reads an RFC 3339 time — `2026-12-07T04:43:02Z`, with optional
/// fractional seconds (kept to the millisecond) and a `Z` or `±hh:mm`
/// offset — as SNS's replay policies write them. `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let number = |digits: &str| -> Option<i64> {
        (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    };
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date_fields = date.split('-');
    let (year, month, day) = (
        date_fields.next().filter(|year| year.len() == 4)?,
        date_fields.next().filter(|month| month.len() == 2)?,
        date_fields.next().filter(|day| day.len() == 2)?,
    );
    if date_fields.next().is_some() {
        return None;
    }
    let (clock, rest) = (time.get(..8)?, time.get(8..)?);
    let mut clock_fields = clock.split(':');
    let (hour, minute, second) = (
        clock_fields.next().filter(|hour| hour.len() == 2)?,
        clock_fields.next().filter(|minute| minute.len() == 2)?,
        clock_fields.next().filter(|second| second.len() == 2)?,
    );
    let (fraction, offset) = match rest.strip_prefix('.') {
        Some(fraction) => {
            let end = fraction
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(fraction.len());
            fraction.split_at(end)
        }
        None => ("", rest),
    };
    if rest.starts_with('.') && fraction.is_empty() {
        return None;
    }
    let millis = format!("{fraction:0<3}")[..3].parse::<i64>().ok()?;
    let offset_minutes = match offset {
        "Z" | "z" => 0,
        _ => {
            let sign = match offset.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (hours, minutes) = offset[1..].split_once(':')?;
            if hours.len() != 2 || minutes.len() != 2 {
                return None;
            }
            sign * (number(hours)? * 60 + number(minutes)?)
        }
    };
    let utc = UtcTime {
        year: number(year)?,
        month: number(month)?,
        day: number(day)?,
        hour: number(hour)?,
        minute: number(minute)?,
        second: number(second)?,
    };
    Some(utc.to_epoch_millis()? + millis - offset_minutes * 60_000)
}

// Howard Hinnant's proleptic Gregorian calendar algorithms.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_people_write_them() {
        assert_eq!(parse_age("90"), Ok(90));
        assert_eq!(parse_age("30m"), Ok(1_800));
        assert_eq!(parse_age("2h"), Ok(7_200));
        assert_eq!(parse_age("1d"), Ok(86_400));
        assert!(parse_age("5w").is_err());
        assert!(parse_age("soon").is_err());
        assert!(parse_age("999999999d").is_err());
    }

    #[test]
    fn rfc3339_times_read_back_as_epoch_milliseconds() {
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.042Z"),
            Some(1_700_000_000_042)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.0429999Z"),
            Some(1_700_000_000_042)
        );
        assert_eq!(
            parse_rfc3339("2023-11-15T00:13:20.5+02:00"),
            Some(1_700_000_000_500)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T21:13:20-01:00"),
            Some(1_700_000_000_000)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-02-30T00:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T24:00:00Z",
            "2023-1-14T22:13:20Z",
            "2023-11-14T22:13:20+0200",
            "yesterday",
            "2023-11-14T22:13:2é",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn epoch_milliseconds_read_as_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
        // 2024 is a leap year; 1969 is before the epoch.
        assert_eq!(rfc3339(1_709_164_800_000), "2024-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1_000), "1969-12-31T23:59:59Z");
        assert_eq!(
            rfc3339_millis(1_700_000_000_042),
            "2023-11-14T22:13:20.042Z"
        );
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn calendar_times_round_trip_and_impossible_days_are_refused() {
        for millis in [0, 1_700_000_000_000, 1_709_164_800_000, 4_102_444_800_000] {
            let time = UtcTime::from_epoch_millis(millis);
            assert_eq!(time.to_epoch_millis(), Some(millis));
        }
        let february_30 = UtcTime {
            year: 2023,
            month: 2,
            day: 30,
            hour: 0,
            minute: 0,
            second: 0,
        };
        assert_eq!(february_30.to_epoch_millis(), None);
        assert_eq!(
            UtcTime {
                hour: 24,
                ..UtcTime::from_epoch_millis(0)
            }
            .to_epoch_millis(),
            None
        );
    }
}
