//! The last hour of every queue's depth, sampled once a minute, for the
//! dashboard's sparklines. In memory only: a restart starts a new hour.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use ackbox_engine::Engine;
use tokio_util::sync::CancellationToken;

/// How often depths are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(60);
/// Samples kept per queue: an hour's worth.
const SAMPLES_KEPT: usize = 60;

/// Recent depths (visible + in flight + delayed) by queue name, oldest first.
#[derive(Debug, Default)]
pub struct DepthHistory {
    samples: Mutex<HashMap<String, VecDeque<u64>>>,
}

impl DepthHistory {
    /// Records one sample of every queue's depth.
    pub async fn sample(&self, engine: &Engine) {
        let Ok(depths) = engine.queue_depths().await else {
            return;
        };
        let mut samples = self.samples.lock().expect("history lock poisoned");
        samples.retain(|name, _| depths.iter().any(|depth| depth.name.as_str() == name));
        for depth in depths {
            let series = samples.entry(depth.name.to_string()).or_default();
            if series.len() == SAMPLES_KEPT {
                series.pop_front();
            }
            series.push_back(depth.stats.visible + depth.stats.in_flight + depth.stats.delayed);
        }
    }

    /// Gives queues created since the last sample their first point, so a
    /// new queue's sparkline starts at once.
    pub fn note_new(&self, depths: &[ackbox_engine::engine::QueueDepth]) {
        let mut samples = self.samples.lock().expect("history lock poisoned");
        for depth in depths {
            samples.entry(depth.name.to_string()).or_insert_with(|| {
                VecDeque::from([depth.stats.visible + depth.stats.in_flight + depth.stats.delayed])
            });
        }
    }

    /// The samples of `queue`, oldest first.
    pub fn series(&self, queue: &str) -> Vec<u64> {
        self.samples
            .lock()
            .expect("history lock poisoned")
            .get(queue)
            .map(|series| series.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Samples now and then every [`SAMPLE_INTERVAL`] until `stop`.
    pub async fn run(&self, engine: Engine, stop: CancellationToken) {
        loop {
            self.sample(&engine).await;
            tokio::select! {
                () = tokio::time::sleep(SAMPLE_INTERVAL) => {}
                () = stop.cancelled() => break,
            }
        }
    }
}

/// An inline SVG sparkline of `series` (empty when there is nothing to draw).
pub fn sparkline(series: &[u64]) -> String {
    if series.is_empty() {
        // A queue newer than the first sample: said, not left blank.
        return "no samples yet (one a minute)".to_owned();
    }
    let (width, height) = (120.0, 24.0);
    let top = series.iter().copied().max().unwrap_or(0).max(1) as f64;
    let step = if series.len() > 1 {
        width / (series.len() - 1) as f64
    } else {
        0.0
    };
    let points: Vec<String> = series
        .iter()
        .enumerate()
        .map(|(index, value)| {
            format!(
                "{:.1},{:.1}",
                index as f64 * step,
                height - 2.0 - (*value as f64 / top) * (height - 4.0)
            )
        })
        .collect();
    format!(
        "<svg class=\"spark\" width=\"120\" height=\"24\" viewBox=\"0 0 120 24\" role=\"img\" aria-label=\"depth over the last hour\">\
         <polyline fill=\"none\" stroke=\"#2f7d5b\" stroke-width=\"1.5\" points=\"{}\"/></svg>",
        points.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_to_its_highest_sample() {
        assert_eq!(sparkline(&[]), "no samples yet (one a minute)");
        let line = sparkline(&[0, 5, 10]);
        assert!(
            line.contains("points=\"0.0,22.0 60.0,12.0 120.0,2.0\""),
            "{line}"
        );
    }
}
