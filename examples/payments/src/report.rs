//! What the runs did, side by side.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::gateway::Ledger;

/// Which consumer a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConsumerKind {
    /// ackbox-consumer: inbox, effect records, reconciliation, replay
    /// skipping, version-guarded projection.
    WithSdk,
    /// A naive consumer: receive, call the gateway, write, delete.
    Naive,
}

/// How the gateway's counts break down per order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Charges {
    /// Charge calls the gateway received, repeated idempotency keys included.
    pub calls: u64,
    /// Calls that repeated an idempotency key the gateway had seen, which it
    /// answered with the first charge instead of charging again.
    pub repeated_key_calls: u64,
    /// Distinct charges made (money taken).
    pub charges_made: u64,
    /// Orders charged exactly once.
    pub charged_once: u64,
    /// Orders charged more than once.
    pub charged_more_than_once: u64,
    /// Orders never charged.
    pub not_charged: u64,
    /// Orders the gateway was called for more than once.
    pub called_more_than_once: u64,
}

impl Charges {
    /// The gateway's counts for orders `1..=orders`.
    pub fn count(ledger: &Ledger, orders: u64) -> Self {
        let charges = ledger.charges_per_order();
        let calls = ledger.calls_per_order();
        let of = |per_order: &HashMap<u64, u64>, order_id| {
            per_order.get(&order_id).copied().unwrap_or(0)
        };
        let mut counts = Self {
            calls: ledger.calls(),
            repeated_key_calls: ledger.repeated_key_calls(),
            charges_made: charges.values().sum(),
            ..Self::default()
        };
        for order_id in 1..=orders {
            match of(&charges, order_id) {
                0 => counts.not_charged += 1,
                1 => counts.charged_once += 1,
                _ => counts.charged_more_than_once += 1,
            }
            if of(&calls, order_id) > 1 {
                counts.called_more_than_once += 1;
            }
        }
        counts
    }
}

/// One run's tally.
#[derive(Debug, Clone, Serialize)]
pub struct Tally {
    /// The consumer the run used.
    pub consumer: ConsumerKind,
    /// Orders placed.
    pub orders: u64,
    /// What the gateway saw.
    pub charges: Charges,
    /// Payment rows the consumer wrote (an order paid twice counts twice).
    pub payment_rows: u64,
    /// Orders whose projected status is PAID at version 2.
    pub projected_paid: u64,
    /// Deliveries the inbox recognised as already applied (both consumers).
    pub duplicates_absorbed: u64,
    /// Late answers settled by reconciliation: the charge was found at the
    /// gateway, so it was not made again.
    pub late_answers_reconciled: u64,
    /// Charges re-made after reconciliation found no trace of the first
    /// call — with the same idempotency key, so the gateway deduplicates
    /// them should the first call arrive after all.
    pub recalls_after_not_found: u64,
    /// Charges re-made with a new idempotency key after a late answer.
    pub late_answers_recharged: u64,
    /// Replayed payment messages acknowledged without charging.
    pub replays_skipped: u64,
    /// Replayed payment messages charged.
    pub replays_charged: u64,
    /// Simulated consumer crashes (both consumers).
    pub worker_crashes: u64,
    /// Simulated outbox relay crashes after publishing, before marking.
    pub relay_crashes: u64,
    /// Deliveries handed to a consumer twice (both consumers).
    pub duplicates_injected: u64,
    /// Gateway answers that came too late on purpose.
    pub slow_answers: u64,
    /// Orders whose events were replayed.
    pub replayed_orders: u64,
    /// How long the run took.
    pub seconds: f64,
}

impl Tally {
    /// Charge calls beyond one per order.
    pub fn extra_calls(&self) -> u64 {
        self.charges.calls.saturating_sub(self.orders)
    }

    /// Charge calls beyond one per order that no replay explains: made
    /// because of duplicates, crashes, late answers or republished events.
    pub fn extra_calls_not_from_replays(&self) -> u64 {
        self.extra_calls().saturating_sub(self.replays_charged)
    }

    /// What ackbox-consumer guarantees, and where the run broke it: every
    /// order charged exactly once; the gateway called once per order, or
    /// more only for charges re-made with the same idempotency key after
    /// reconciliation found no trace of the first call; one payment row per
    /// order; every order projected PAID. Empty when all hold.
    pub fn broken_guarantees(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let orders = self.orders;
        let charges = &self.charges;
        if charges.charged_once != orders || charges.charges_made != orders {
            broken.push(format!(
                "{} of {orders} orders charged exactly once ({} charges made, {} orders charged \
                 more than once, {} never)",
                charges.charged_once,
                charges.charges_made,
                charges.charged_more_than_once,
                charges.not_charged
            ));
        }
        if charges.calls < orders || self.extra_calls() > self.recalls_after_not_found {
            broken.push(format!(
                "{} charge calls for {orders} orders, and only {} re-calls after reconciliation \
                 found no charge explain calls beyond one per order",
                charges.calls, self.recalls_after_not_found
            ));
        }
        if self.payment_rows != orders {
            broken.push(format!(
                "{} payment rows for {orders} orders",
                self.payment_rows
            ));
        }
        if self.projected_paid != orders {
            broken.push(format!(
                "{} of {orders} orders projected PAID at version 2",
                self.projected_paid
            ));
        }
        broken
    }

    /// Whether every guarantee of [`Tally::broken_guarantees`] held.
    pub fn guarantees_hold(&self) -> bool {
        self.broken_guarantees().is_empty()
    }
}

/// Both runs' tallies.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The application database.
    pub database: &'static str,
    /// Orders placed in each run.
    pub orders: u64,
    /// Whether faults were injected.
    pub faults: bool,
    /// The run with ackbox-consumer, unless it was left out.
    pub with_sdk: Option<Tally>,
    /// The run with a naive consumer, unless it was left out.
    pub without_sdk: Option<Tally>,
}

impl Report {
    /// The run with ackbox-consumer kept its guarantees (or was left out).
    /// The naive run is expected to charge orders twice and decides nothing.
    pub fn passed(&self) -> bool {
        self.with_sdk.as_ref().is_none_or(Tally::guarantees_hold)
    }
}

const LABEL_WIDTH: usize = 46;
const COLUMN_WIDTH: usize = 22;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let columns: Vec<&Tally> = [&self.with_sdk, &self.without_sdk]
            .into_iter()
            .flatten()
            .collect();
        writeln!(
            f,
            "payments example on {}: {} orders, {}",
            self.database,
            self.orders,
            if self.faults {
                "faults injected"
            } else {
                "no faults"
            }
        )?;
        let heading = |tally: &&Tally| match tally.consumer {
            ConsumerKind::WithSdk => "with ackbox-consumer",
            ConsumerKind::Naive => "without (naive)",
        };
        write!(f, "{:LABEL_WIDTH$}", "")?;
        for tally in &columns {
            write!(f, "{:>COLUMN_WIDTH$}", heading(tally))?;
        }
        writeln!(f)?;
        let row = |f: &mut fmt::Formatter<'_>,
                   label: &str,
                   cell: &dyn Fn(&Tally) -> String|
         -> fmt::Result {
            write!(f, "{label:LABEL_WIDTH$}")?;
            for tally in &columns {
                write!(f, "{:>COLUMN_WIDTH$}", cell(tally))?;
            }
            writeln!(f)
        };
        row(f, "orders", &|t| t.orders.to_string())?;
        row(f, "charge calls received by the gateway", &|t| {
            t.charges.calls.to_string()
        })?;
        row(f, "  of them repeating an idempotency key", &|t| {
            t.charges.repeated_key_calls.to_string()
        })?;
        row(f, "distinct charges made", &|t| {
            t.charges.charges_made.to_string()
        })?;
        row(f, "orders charged once", &|t| {
            t.charges.charged_once.to_string()
        })?;
        row(f, "orders charged more than once", &|t| {
            t.charges.charged_more_than_once.to_string()
        })?;
        row(f, "orders never charged", &|t| {
            t.charges.not_charged.to_string()
        })?;
        row(f, "payment rows written", &|t| t.payment_rows.to_string())?;
        row(f, "orders projected PAID (version 2)", &|t| {
            t.projected_paid.to_string()
        })?;
        row(f, "duplicates absorbed by the inbox", &|t| {
            t.duplicates_absorbed.to_string()
        })?;
        row(f, "late answers reconciled, not re-charged", &|t| {
            t.late_answers_reconciled.to_string()
        })?;
        row(f, "late answers re-charged with a new key", &|t| {
            t.late_answers_recharged.to_string()
        })?;
        row(f, "re-calls, same key, after no charge was found", &|t| {
            t.recalls_after_not_found.to_string()
        })?;
        row(f, "replayed payments skipped", &|t| {
            t.replays_skipped.to_string()
        })?;
        row(f, "replayed payments charged", &|t| {
            t.replays_charged.to_string()
        })?;
        // The same plan on both sides; the counts follow the deliveries and
        // calls each side made, and the naive side makes more.
        writeln!(f, "faults injected (same rates on both sides):")?;
        row(f, "  consumer crashes", &|t| t.worker_crashes.to_string())?;
        row(f, "  relay crashes (a batch published again)", &|t| {
            t.relay_crashes.to_string()
        })?;
        row(f, "  deliveries duplicated", &|t| {
            t.duplicates_injected.to_string()
        })?;
        row(f, "  gateway answers too late (timeouts)", &|t| {
            t.slow_answers.to_string()
        })?;
        row(f, "  orders replayed", &|t| t.replayed_orders.to_string())?;
        row(f, "seconds", &|t| format!("{:.1}", t.seconds))?;
        row(f, "result", &|t| match t.consumer {
            ConsumerKind::WithSdk if t.guarantees_hold() => "PASS".to_owned(),
            ConsumerKind::WithSdk => "FAIL".to_owned(),
            ConsumerKind::Naive if t.charges.charged_more_than_once > 0 => {
                format!("{} overcharged", t.charges.charged_more_than_once)
            }
            ConsumerKind::Naive => "none overcharged".to_owned(),
        })?;
        if let Some(sdk) = &self.with_sdk {
            if sdk.extra_calls() > 0 && sdk.guarantees_hold() {
                writeln!(
                    f,
                    "note: with ackbox-consumer the gateway got {} charge calls for {} orders: \
                     {} charge(s) were re-made with the same idempotency key after \
                     reconciliation found no trace of the first call, and the gateway answered \
                     them with the first charge — {} distinct charges, one per order",
                    sdk.charges.calls,
                    sdk.orders,
                    sdk.extra_calls(),
                    sdk.charges.charges_made
                )?;
            }
            for broken in sdk.broken_guarantees() {
                writeln!(f, "FAILED with ackbox-consumer: {broken}")?;
            }
        }
        Ok(())
    }
}
