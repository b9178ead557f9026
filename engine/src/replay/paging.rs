//! How long a paged person takes to act on a failure: the acknowledgement target of the hour (working
//! hours or not, weekends included) plus the time to read the logs and decide.

use chrono::{DateTime, Datelike, Timelike, Utc};

use super::trace::Paging;

/// Seconds from the page at `at` until the person's action.
pub fn reaction_s(paging: &Paging, at: DateTime<Utc>) -> f64 {
    let minutes = if is_working_time(paging, at) {
        paging.ack_working_minutes
    } else {
        paging.ack_off_hours_minutes
    };
    (minutes + paging.diagnose_minutes) * 60.0
}

/// Whether `at` falls in the person's working hours on a working day.
pub fn is_working_time(paging: &Paging, at: DateTime<Utc>) -> bool {
    let [from, to] = paging.working_hours;
    paging.working_days.contains(&at.weekday()) && (from..to).contains(&at.hour())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Weekday;

    fn paging() -> Paging {
        Paging {
            source: String::new(),
            working_hours: [9, 18],
            working_days: vec![
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri,
            ],
            ack_working_minutes: 5.0,
            ack_off_hours_minutes: 30.0,
            diagnose_minutes: 10.0,
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn nights_and_weekends_take_the_long_target() {
        let p = paging();
        // Monday 2026-01-05.
        assert_eq!(reaction_s(&p, at("2026-01-05T10:00:00Z")), 15.0 * 60.0);
        assert_eq!(reaction_s(&p, at("2026-01-05T17:59:59Z")), 15.0 * 60.0);
        assert_eq!(reaction_s(&p, at("2026-01-05T18:00:00Z")), 40.0 * 60.0);
        assert_eq!(reaction_s(&p, at("2026-01-05T03:00:00Z")), 40.0 * 60.0);
        // Saturday noon.
        assert_eq!(reaction_s(&p, at("2026-01-10T12:00:00Z")), 40.0 * 60.0);
    }
}
