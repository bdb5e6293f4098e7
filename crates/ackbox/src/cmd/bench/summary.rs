//! The medians of every round per target, ackbox's ratio to each peer, and what durability each target's numbers stand for.

use std::collections::BTreeMap;

use super::TargetKind;
use super::postgres;
use super::report::Report;
#[cfg(feature = "bench-peers")]
use super::{nats, rabbitmq};

pub(super) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// Medians per target: W1 and W2 throughput, W3 acknowledgement and
/// delivery p99.
#[derive(Debug, Default)]
pub(super) struct Summary {
    w1: Option<f64>,
    w2: Option<f64>,
    w3_ack_p99_ms: Option<f64>,
    w3_delivery_p99_ms: Option<f64>,
}

pub(super) fn summarize(reports: &[Report], target: &str) -> Summary {
    let of = |workload: &'static str| {
        reports
            .iter()
            .filter(move |r| r.target == target && r.workload == workload)
    };
    Summary {
        w1: median(of("W1").map(|r| r.messages_per_second).collect()),
        w2: median(of("W2").map(|r| r.messages_per_second).collect()),
        w3_ack_p99_ms: median(
            of("W3")
                .map(|r| r.request_latency.p99_us as f64 / 1_000.0)
                .collect(),
        ),
        w3_delivery_p99_ms: median(
            of("W3")
                .filter_map(|r| r.delivery_latency.as_ref())
                .map(|latency| latency.p99_us as f64 / 1_000.0)
                .collect(),
        ),
    }
}

pub(super) fn durability(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Ackbox => {
            "as the server's --durability: fsync (group commit) before the acknowledgement by default"
        }
        #[cfg(feature = "bench-peers")]
        TargetKind::Rabbitmq => rabbitmq::DURABILITY,
        #[cfg(feature = "bench-peers")]
        TargetKind::Nats => nats::DURABILITY,
        #[cfg(not(feature = "bench-peers"))]
        TargetKind::Rabbitmq | TargetKind::Nats => "not measured: this build has no client for it",
        TargetKind::Postgres => postgres::DURABILITY,
    }
}

pub(super) fn print_summary(
    targets: &[TargetKind],
    reports: &[Report],
    rounds: usize,
    backlog: u64,
    markdown: bool,
) {
    let summaries: BTreeMap<TargetKind, Summary> = targets
        .iter()
        .map(|&kind| (kind, summarize(reports, kind.name())))
        .collect();
    let ackbox = summaries.get(&TargetKind::Ackbox);
    let ratio = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
        (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}×", ours / theirs),
        _ => "–".to_owned(),
    };
    let rate = |value: Option<f64>| value.map_or("–".to_owned(), |value| format!("{value:.0}"));
    let millis =
        |value: Option<f64>| value.map_or("–".to_owned(), |value| format!("{value:.2} ms"));
    let header = [
        "target",
        "W1 msg/s",
        "W2 msg/s",
        "W3 ack p99",
        "W3 delivery p99",
        "ackbox ÷ W1",
        "ackbox ÷ W2",
        "durability",
    ];
    let rows: Vec<[String; 8]> = summaries
        .iter()
        .map(|(kind, summary)| {
            [
                kind.name().to_owned(),
                rate(summary.w1),
                rate(summary.w2),
                millis(summary.w3_ack_p99_ms),
                millis(summary.w3_delivery_p99_ms),
                ratio(ackbox.and_then(|a| a.w1), summary.w1),
                ratio(ackbox.and_then(|a| a.w2), summary.w2),
                durability(*kind).to_owned(),
            ]
        })
        .collect();
    if backlog > 0 {
        println!("\nmedians of {rounds} round(s), {backlog} messages queued beforehand:");
    } else {
        println!("\nmedians of {rounds} round(s):");
    }
    if markdown {
        println!("| {} |", header.join(" | "));
        println!("|{}", "---|".repeat(header.len()));
        for row in rows {
            println!("| {} |", row.join(" | "));
        }
    } else {
        println!(
            "{:<9} {:>10} {:>10} {:>11} {:>16} {:>12} {:>12}  {}",
            header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7]
        );
        for row in rows {
            println!(
                "{:<9} {:>10} {:>10} {:>11} {:>16} {:>12} {:>12}  {}",
                row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7]
            );
        }
    }
}
