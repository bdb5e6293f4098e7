//! Several `ackbox serve` nodes over one PostgreSQL database (issue 10):
//! clients spread over three nodes while one is killed with `kill -9` and
//! restarted; every acknowledged message is received, FIFO groups keep their
//! order, no message is leased to two receivers while its lease runs; long
//! polls wake across nodes; a move task fails over to a surviving node.
//!
//! Runs when `ACKBOX_TEST_POSTGRES_URL` is set (`.ci/run` sets it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ackbox_testkit::client::sqs_client;
use ackbox_testkit::postgres::PostgresSchema;
use ackbox_testkit::process::{ServerProcess, free_port};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};

const BINARY: &str = env!("CARGO_BIN_EXE_ackbox");
const NODES: usize = 3;
/// Short, so messages leased by a killed node's consumers come back soon.
const LEASE_SECONDS: i32 = 5;
const STANDARD_BATCHES_PER_PRODUCER: usize = 30;
const FIFO_GROUPS: usize = 4;
const FIFO_MESSAGES_PER_GROUP: usize = 60;

/// Three nodes on one schema, each with its own (unused) data directory.
struct Cluster {
    schema: PostgresSchema,
    ports: Vec<u16>,
    nodes: Vec<Option<ServerProcess>>,
    _data_dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    fn start(schema: PostgresSchema) -> Self {
        let ports: Vec<u16> = (0..NODES).map(|_| free_port()).collect();
        let data_dirs: Vec<_> = (0..NODES).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut cluster = Self {
            schema,
            ports,
            nodes: (0..NODES).map(|_| None).collect(),
            _data_dirs: data_dirs,
        };
        for node in 0..NODES {
            cluster.start_node(node);
        }
        cluster
    }

    fn start_node(&mut self, node: usize) {
        self.nodes[node] = Some(ServerProcess::start(
            BINARY.as_ref(),
            self._data_dirs[node].path(),
            self.ports[node],
            &self.schema.serve_args(),
        ));
    }

    fn kill9(&mut self, node: usize) {
        self.nodes[node].take().expect("node is running").kill9();
    }

    fn url(&self, node: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[node])
    }

    fn clients(&self) -> Vec<Client> {
        (0..NODES).map(|node| sqs_client(&self.url(node))).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.iter_mut().filter_map(Option::take) {
            node.terminate();
        }
    }
}

/// Who received which message when, by message id (a standard send that
/// failed ambiguously and was retried may store the same body twice).
#[derive(Default)]
struct Ledger {
    receipts: HashMap<String, Vec<Instant>>,
    bodies: HashSet<String>,
    /// FIFO: message indexes per group, in the order consumers got them.
    groups: BTreeMap<String, Vec<usize>>,
}

/// Creates `orders` and `orders.fifo`, both with the short lease.
async fn create_queues(client: &Client) -> (String, String) {
    let mut urls = Vec::new();
    for (name, fifo) in [("orders", false), ("orders.fifo", true)] {
        let mut create = client.create_queue().queue_name(name).attributes(
            QueueAttributeName::VisibilityTimeout,
            LEASE_SECONDS.to_string(),
        );
        if fifo {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        urls.push(create.send().await.unwrap().queue_url.unwrap());
    }
    (urls.remove(0), urls.remove(0))
}

/// Sends until acknowledged, moving to the next node after a failure.
async fn send_batch(
    clients: &[Client],
    node: &mut usize,
    url: &str,
    entries: Vec<SendMessageBatchRequestEntry>,
) {
    loop {
        let sent = clients[*node]
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries.clone()))
            .send()
            .await;
        match sent {
            Ok(output) if output.failed().is_empty() => return,
            Ok(output) => panic!("batch entries failed: {:?}", output.failed()),
            Err(_) => {
                *node = (*node + 1) % NODES;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Sends `batches` in order, each until acknowledged, moving to the next
/// node between batches. On a FIFO queue (`group`) one producer per group
/// keeps the group's send order, and a retried batch carries the same
/// deduplication ids, so it is stored once.
async fn produce(
    clients: Arc<Vec<Client>>,
    url: String,
    mut node: usize,
    group: Option<String>,
    batches: Vec<Vec<String>>,
    acknowledged: Arc<Mutex<HashSet<String>>>,
) {
    for bodies in batches {
        let entries = bodies
            .iter()
            .enumerate()
            .map(|(entry, body)| {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(entry.to_string())
                    .message_body(body);
                match &group {
                    Some(group) => entry.message_group_id(group).message_deduplication_id(body),
                    None => entry,
                }
                .build()
                .unwrap()
            })
            .collect();
        send_batch(&clients, &mut node, &url, entries).await;
        acknowledged.lock().unwrap().extend(bodies);
        node = (node + 1) % NODES;
    }
}

/// Receives, records and deletes until `done`, moving to the next node
/// after a failure (its node was killed).
async fn consume(
    clients: Arc<Vec<Client>>,
    url: String,
    mut node: usize,
    ledger: Arc<Mutex<Ledger>>,
    done: Arc<AtomicBool>,
) {
    while !done.load(Ordering::Acquire) {
        let received = clients[node]
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await;
        let Ok(output) = received else {
            node = (node + 1) % NODES;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let received_at = Instant::now();
        {
            // The whole batch is noted as received now, before any delete:
            // the next message of a FIFO group cannot be delivered before
            // these are deleted, and a slow delete must not make a later
            // note look like an early second receive.
            let mut ledger = ledger.lock().unwrap();
            for message in output.messages() {
                let body = message.body().unwrap_or_default().to_owned();
                ledger
                    .receipts
                    .entry(message.message_id().unwrap_or_default().to_owned())
                    .or_default()
                    .push(received_at);
                if let Some(rest) = body.strip_prefix("f-") {
                    let (group, index) = rest.split_once('-').unwrap();
                    ledger
                        .groups
                        .entry(group.to_owned())
                        .or_default()
                        .push(index.parse().unwrap());
                }
                ledger.bodies.insert(body);
            }
        }
        for message in output.messages() {
            // A failed delete (the node died) only means a redelivery.
            let _ = clients[node]
                .delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_lose_nothing_keep_fifo_order_and_never_double_lease_across_a_kill() {
    let Some(schema) = PostgresSchema::new("the multi-node PostgreSQL store") else {
        return;
    };
    let mut cluster = Cluster::start(schema);
    let clients = Arc::new(cluster.clients());
    let (standard_url, fifo_url) = create_queues(&clients[0]).await;
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let done = Arc::new(AtomicBool::new(false));

    let mut producers = Vec::new();
    for producer in 0..NODES {
        let batches = (0..STANDARD_BATCHES_PER_PRODUCER)
            .map(|batch| {
                (0..10)
                    .map(|entry| format!("s-{producer}-{batch}-{entry}"))
                    .collect()
            })
            .collect();
        producers.push(tokio::spawn(produce(
            Arc::clone(&clients),
            standard_url.clone(),
            producer % NODES,
            None,
            batches,
            Arc::clone(&acknowledged),
        )));
    }
    for group in 0..FIFO_GROUPS {
        let batches = (0..FIFO_MESSAGES_PER_GROUP)
            .step_by(5)
            .map(|start| {
                (start..start + 5)
                    .map(|index| format!("f-{group}-{index}"))
                    .collect()
            })
            .collect();
        producers.push(tokio::spawn(produce(
            Arc::clone(&clients),
            fifo_url.clone(),
            group % NODES,
            Some(format!("g{group}")),
            batches,
            Arc::clone(&acknowledged),
        )));
    }
    let mut consumers = Vec::new();
    for node in 0..NODES {
        for url in [&standard_url, &fifo_url] {
            consumers.push(tokio::spawn(consume(
                Arc::clone(&clients),
                url.clone(),
                node,
                Arc::clone(&ledger),
                Arc::clone(&done),
            )));
        }
    }

    // A node chosen by the clock dies mid-traffic and comes back later.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let victim = 1 + std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize
        % (NODES - 1);
    eprintln!("killing node {victim} with SIGKILL");
    cluster.kill9(victim);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.start_node(victim);

    for producer in producers {
        producer.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert_eq!(
        acknowledged.len(),
        NODES * STANDARD_BATCHES_PER_PRODUCER * 10 + FIFO_GROUPS * FIFO_MESSAGES_PER_GROUP
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let missing = {
            let ledger = ledger.lock().unwrap();
            acknowledged.difference(&ledger.bodies).count()
        };
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged messages never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    done.store(true, Ordering::Release);
    for consumer in consumers {
        consumer.await.unwrap();
    }

    let ledger = ledger.lock().unwrap();
    // A second receive of one message only after its first lease ran out
    // (less a margin for the time between the lease starting on the server
    // and the client noting it).
    for (message_id, receipts) in &ledger.receipts {
        let mut receipts = receipts.clone();
        receipts.sort();
        for pair in receipts.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= Duration::from_secs(LEASE_SECONDS as u64) - Duration::from_millis(800),
                "message {message_id} was received twice {gap:?} apart, inside its {LEASE_SECONDS} s lease"
            );
        }
    }
    // Each group's messages first arrive in send order, none skipped.
    assert_eq!(ledger.groups.len(), FIFO_GROUPS);
    for (group, indexes) in &ledger.groups {
        let mut seen = HashSet::new();
        let first_arrivals: Vec<usize> = indexes
            .iter()
            .copied()
            .filter(|index| seen.insert(*index))
            .collect();
        assert_eq!(
            first_arrivals,
            (0..FIFO_MESSAGES_PER_GROUP).collect::<Vec<_>>(),
            "group {group} out of order"
        );
    }
    let redelivered = ledger
        .receipts
        .values()
        .filter(|receipts| receipts.len() > 1)
        .count();
    eprintln!(
        "{} messages acknowledged and received over {NODES} nodes; {redelivered} redelivered after the kill",
        acknowledged.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_node_wakes_when_another_node_takes_a_message() {
    let Some(schema) = PostgresSchema::new("cross-node long polling") else {
        return;
    };
    let cluster = Cluster::start(schema);
    let clients = cluster.clients();
    let url = clients[0]
        .create_queue()
        .queue_name("wake")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    // Without a cross-node wake-up a poller only finds a message at its
    // periodic recheck, a second later; woken, it answers at once.
    let mut latencies = Vec::new();
    for round in 0..5 {
        let poller = clients[1].clone();
        let poll_url = url.clone();
        let poll = tokio::spawn(async move {
            let output = poller
                .receive_message()
                .queue_url(&poll_url)
                .wait_time_seconds(10)
                .send()
                .await
                .unwrap();
            (Instant::now(), output.messages().len())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        clients[2]
            .send_message()
            .queue_url(&url)
            .message_body(format!("wake {round}"))
            .send()
            .await
            .unwrap();
        let sent_at = Instant::now();
        let (received_at, count) = poll.await.unwrap();
        assert_eq!(count, 1, "the long poll returned without the message");
        latencies.push(received_at.saturating_duration_since(sent_at));
    }
    latencies.sort();
    eprintln!("cross-node wake-up latencies: {latencies:?}");
    assert!(
        latencies[2] < Duration::from_millis(500),
        "median wake-up {:?}: pollers were not woken across nodes",
        latencies[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_task_survives_the_death_of_the_node_running_it() {
    let Some(schema) = PostgresSchema::new("move task failover") else {
        return;
    };
    let mut cluster = Cluster::start(schema);
    let clients = cluster.clients();
    let client = &clients[0];
    let dlq_url = ackbox_testkit::client::create_queue(client, "failover-dlq").await;
    let dlq_arn = ackbox_testkit::client::queue_arn(client, &dlq_url).await;
    // The dead-letter queue of this one, so a move task may take from it.
    let target_url = client
        .create_queue()
        .queue_name("failover-source")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#),
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    const MESSAGES: usize = 30;
    for start in (0..MESSAGES).step_by(10) {
        client
            .send_message_batch()
            .queue_url(&dlq_url)
            .set_entries(Some(
                (start..start + 10)
                    .map(|index| {
                        SendMessageBatchRequestEntry::builder()
                            .id(index.to_string())
                            .message_body(format!("dead {index}"))
                            .build()
                            .unwrap()
                    })
                    .collect(),
            ))
            .send()
            .await
            .unwrap();
    }
    let target_arn = ackbox_testkit::client::queue_arn(client, &target_url).await;
    client
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&target_arn)
        .max_number_of_messages_per_second(5)
        .send()
        .await
        .unwrap();
    // The node that started it runs it (it holds the lease); it dies with
    // most of the messages still to move.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    cluster.kill9(0);

    let survivor = &clients[1];
    let deadline = Instant::now() + Duration::from_secs(60);
    let task = loop {
        let tasks = survivor
            .list_message_move_tasks()
            .source_arn(&dlq_arn)
            .send()
            .await
            .unwrap();
        let task = tasks.results()[0].clone();
        if task.status() != Some("RUNNING") || Instant::now() > deadline {
            break task;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(task.status(), Some("COMPLETED"), "{task:?}");
    assert_eq!(task.approximate_number_of_messages_moved(), MESSAGES as i64);
    assert_eq!(
        ackbox_testkit::client::queue_depth(survivor, &target_url).await,
        MESSAGES
    );
    assert_eq!(
        ackbox_testkit::client::queue_depth(survivor, &dlq_url).await,
        0
    );
}

/// Each node keeps the topic definitions it read (a publish does not read
/// its topic from the database); a change on one node must reach the
/// others' caches, or a subscription made on one node would never get the
/// publishes another node takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_on_one_node_gets_the_publishes_another_node_takes() {
    let Some(schema) = PostgresSchema::new("topic changes across nodes") else {
        return;
    };
    let cluster = Cluster::start(schema);
    let sqs = cluster.clients();
    let sns: Vec<_> = (0..NODES)
        .map(|node| ackbox_testkit::client::sns_client(&cluster.url(node)))
        .collect();
    let topic = sns[0]
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let subscribe = |name: &'static str| {
        let (sqs, sns, topic) = (sqs[0].clone(), sns[0].clone(), topic.clone());
        async move {
            let url = ackbox_testkit::client::create_queue(&sqs, name).await;
            let arn = ackbox_testkit::client::queue_arn(&sqs, &url).await;
            let subscription = sns
                .subscribe()
                .topic_arn(&topic)
                .protocol("sqs")
                .endpoint(arn)
                .attributes("RawMessageDelivery", "true")
                .send()
                .await
                .unwrap()
                .subscription_arn
                .unwrap();
            (url, subscription)
        }
    };
    let (first, _) = subscribe("first").await;
    // Node 1 reads the topic, one subscription in it.
    sns[1]
        .publish()
        .topic_arn(&topic)
        .message("before")
        .send()
        .await
        .unwrap();
    assert_eq!(
        ackbox_testkit::client::queue_depth(&sqs[2], &first).await,
        1
    );

    let (second, _) = subscribe("second").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut published = 0;
    loop {
        sns[1]
            .publish()
            .topic_arn(&topic)
            .message(format!("after {published}"))
            .send()
            .await
            .unwrap();
        published += 1;
        if ackbox_testkit::client::queue_depth(&sqs[2], &second).await > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{published} publishes on node 1 over 10 s, none reached the subscription made on \
             node 0: node 1 never heard of it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("node 1 delivered to the new subscription from its publish number {published}");
}
