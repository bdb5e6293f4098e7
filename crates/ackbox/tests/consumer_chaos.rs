//! Exactly-once effects under real chaos: consumer OS processes built on
//! `ackbox-consumer` run three workloads against the real `ackbox` binary
//! (and, with smaller loads, RabbitMQ and NATS JetStream) and the machine's
//! PostgreSQL, while the trial SIGKILLs consumer processes every few
//! hundred milliseconds, `kill -9`s the broker once and terminates the
//! consumers' database sessions once. Then every order must be booked
//! exactly once, every FIFO group committed in send order, no projection
//! write may lower a version, and every queue must be empty.
//!
//! The consumer processes are this test binary started again with
//! `ACKBOX_CHAOS_CONSUMER` set, so the harness is libtest-mimic
//! (`harness = false`): `main` runs the consumer role when the variable is
//! set and the trials otherwise, under `cargo test` and
//! `cargo nextest run` alike. Runs when `ACKBOX_TEST_POSTGRES_URL` is set
//! (`.ci/run` sets it); the RabbitMQ and NATS trials also need
//! `ACKBOX_TEST_AMQP_URL` and `ACKBOX_TEST_NATS_URL`. Print the figures
//! with `cargo nextest run -p ackbox --test consumer_chaos --no-capture`.

// The modules live beside this file, in `consumer_chaos/`.
#[path = "consumer_chaos/broker/mod.rs"]
mod broker;
#[path = "consumer_chaos/chaos.rs"]
mod chaos;
#[path = "consumer_chaos/consumer_role.rs"]
mod consumer_role;
#[path = "consumer_chaos/database.rs"]
mod database;
#[path = "consumer_chaos/fleet.rs"]
mod fleet;
#[path = "consumer_chaos/trial.rs"]
mod trial;
#[path = "consumer_chaos/verdict.rs"]
mod verdict;
#[path = "consumer_chaos/workload/mod.rs"]
mod workload;

use std::process::ExitCode;

use libtest_mimic::{Arguments, Trial};
use rand::rngs::StdRng;

use crate::broker::nats::NatsBroker;
use crate::broker::rabbitmq::RabbitMqBroker;
use crate::broker::sqs::SqsBroker;
use crate::trial::Setup;
use crate::workload::{Plan, orders, projection, steps};

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(consumer_role::SPEC_VARIABLE) {
        return consumer_role::main(&spec);
    }
    let mut arguments = Arguments::from_args();
    // Each trial is a broker, four consumer processes and a database load:
    // one at a time unless asked otherwise (nextest gives each trial a
    // process of its own).
    arguments.test_threads.get_or_insert(1);
    libtest_mimic::run(&arguments, trials()).exit_code()
}

fn trials() -> Vec<Trial> {
    vec![
        Trial::test(
            "sqs_effects_exactly_once_and_groups_in_order_under_process_and_broker_kills",
            || {
                in_runtime(trial::run(
                    Setup {
                        transport: "SQS (ackbox serve)",
                        plans: sqs_plans,
                        consumer_kills: 25,
                    },
                    async || Some(SqsBroker::start()),
                ))
            },
        ),
        Trial::test("rabbitmq_effects_exactly_once_under_process_kills", || {
            in_runtime(trial::run(
                Setup {
                    transport: "RabbitMQ",
                    plans: shared_broker_plans,
                    consumer_kills: 15,
                },
                RabbitMqBroker::connect,
            ))
        }),
        Trial::test("nats_effects_exactly_once_under_process_kills", || {
            in_runtime(trial::run(
                Setup {
                    transport: "NATS JetStream",
                    plans: shared_broker_plans,
                    consumer_kills: 15,
                },
                NatsBroker::connect,
            ))
        }),
    ]
}

/// ackbox: all three workloads, FIFO groups included.
fn sqs_plans(rng: &mut StdRng) -> Vec<Plan> {
    vec![
        Plan::Orders(orders::Plan::new(rng, 2_000, 200)),
        Plan::Steps(steps::Plan::new(20, 50)),
        Plan::Projection(projection::Plan::new(rng, 30, 20, 120)),
    ]
}

/// The shared brokers: a smaller load, and no FIFO workload until their
/// transports keep message groups in order.
fn shared_broker_plans(rng: &mut StdRng) -> Vec<Plan> {
    vec![
        Plan::Orders(orders::Plan::new(rng, 1_200, 120)),
        Plan::Projection(projection::Plan::new(rng, 25, 20, 100)),
    ]
}

/// Runs a trial on a runtime of its own, which is shut down without
/// waiting long for blocking work a timed-out trial left behind.
fn in_runtime(
    trial: impl Future<Output = Result<(), String>>,
) -> Result<(), libtest_mimic::Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = runtime.block_on(trial);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    outcome.map_err(libtest_mimic::Failed::from)
}
