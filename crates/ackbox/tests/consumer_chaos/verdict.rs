//! What a trial found: figures to print and failed checks to report. A
//! trial gathers every failure before it fails, so one run shows all that
//! went wrong (a FIFO violation does not hide a doubled order).

/// Figures and failures, in the order they were found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) figures: Vec<String>,
    pub(crate) failures: Vec<String>,
}

impl Findings {
    pub(crate) fn failed(failure: String) -> Self {
        Self {
            figures: Vec::new(),
            failures: vec![failure],
        }
    }

    pub(crate) fn figure(&mut self, figure: String) {
        self.figures.push(figure);
    }

    /// Records `failure()` unless `holds`.
    pub(crate) fn check(&mut self, holds: bool, failure: impl FnOnce() -> String) {
        if !holds {
            self.failures.push(failure());
        }
    }

    pub(crate) fn fail(&mut self, failure: String) {
        self.failures.push(failure);
    }

    pub(crate) fn merge(&mut self, other: Self) {
        self.figures.extend(other.figures);
        self.failures.extend(other.failures);
    }
}

/// The first few of `items`, for a failure message that stays readable.
pub(crate) fn examples(items: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut text = items
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > SHOWN {
        text.push_str(&format!("; … and {} more", items.len() - SHOWN));
    }
    text
}
