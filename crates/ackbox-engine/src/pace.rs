//! The pace of background tasks that move messages at a rate (move tasks,
//! replays): a slice every tick, the rate spread over the ticks.

use std::time::Duration;

/// How often a paced task moves a slice.
pub(crate) const TICK: Duration = Duration::from_millis(100);
const TICKS_PER_SECOND: i64 = 10;

/// Messages a task may move at each tick to average `rate` a second.
/// Credit accrues in tenths of a message per tick, so a rate such as 15/s
/// averages 15/s instead of rounding to whole slices.
#[derive(Debug)]
pub(crate) struct Pace {
    credit: i64,
}

impl Pace {
    pub(crate) fn new() -> Self {
        Self { credit: 0 }
    }

    /// The slice this tick may move at `rate` a second (often 0 at low
    /// rates: the credit carries over).
    pub(crate) fn slice(&mut self, rate: i64) -> i64 {
        self.credit += rate;
        let slice = self.credit / TICKS_PER_SECOND;
        self.credit -= slice * TICKS_PER_SECOND;
        slice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_averages_its_rate_over_a_second_of_ticks() {
        for rate in [1, 7, 15, 500] {
            let mut pace = Pace::new();
            let moved: i64 = (0..TICKS_PER_SECOND * 3).map(|_| pace.slice(rate)).sum();
            assert_eq!(moved, rate * 3, "rate {rate}");
        }
        let mut pace = Pace::new();
        let slices: Vec<i64> = (0..10).map(|_| pace.slice(15)).collect();
        assert_eq!(slices, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
    }
}
