//! A full disk under the log store's queues: sends fail (and say the disk
//! is full) without poisoning the log, nothing acknowledged before is
//! touched, and sends succeed again once there is room — no reopen — with
//! everything acknowledged surviving a power cut afterwards.

use std::path::PathBuf;
use std::sync::Arc;

use ackbox_log::disk::model::ModelDisk;
use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{Outgoing, StandardQueues};
use ackbox_log::record::Content;

fn open(disk: &ModelDisk, dir: &std::path::Path) -> StandardQueues {
    StandardQueues::open_on(
        Arc::new(disk.clone()),
        dir,
        LogOptions {
            segment_bytes: 1_000,
        },
        GroupCommitOptions::default(),
    )
    .map(|(queues, _)| queues)
    .expect("the log opens")
}

fn outgoing(body: &str) -> Vec<Outgoing> {
    vec![Outgoing {
        content: Content {
            body: body.to_owned(),
            ..Content::default()
        },
        sent_at: 1,
        visible_at: 1,
    }]
}

#[test]
fn a_full_disk_refuses_sends_until_there_is_room_and_loses_nothing() {
    let root = PathBuf::from("/full-disk");
    let dir = root.join("log");
    let disk = ModelDisk::new(&root);
    let queues = open(&disk, &dir);
    disk.fill_up_at(Some(5_000));
    let mut acknowledged = Vec::new();
    let refused = loop {
        let body = format!("message-{:04}-{}", acknowledged.len(), "x".repeat(60));
        match queues.send(1, outgoing(&body)) {
            Ok((_, lsn)) => {
                queues.commit().wait_durable(lsn).expect("a durable send");
                acknowledged.push(body);
            }
            Err(error) => break error,
        }
        assert!(acknowledged.len() < 1_000, "the disk never filled");
    };
    assert!(refused.is_no_space(), "not refused for space: {refused}");
    assert!(acknowledged.len() > 10, "{}", acknowledged.len());
    // Refused again, not poisoned: the same answer while the disk is full.
    for _ in 0..3 {
        let again = queues.send(1, outgoing("still full")).unwrap_err();
        assert!(again.is_no_space(), "{again}");
    }
    let bodies = |queues: &StandardQueues| -> Vec<String> {
        queues
            .peek(1, 0, usize::MAX)
            .expect("a peek")
            .into_iter()
            .map(|message| message.content.body)
            .collect()
    };
    assert_eq!(
        bodies(&queues),
        acknowledged,
        "what was acknowledged is untouched"
    );

    disk.fill_up_at(None);
    let (_, lsn) = queues
        .send(1, outgoing("after the disk had room again"))
        .expect("sends resume without a reopen");
    queues.commit().wait_durable(lsn).expect("a durable send");
    acknowledged.push("after the disk had room again".to_owned());
    assert_eq!(bodies(&queues), acknowledged);

    for seed in 0..50 {
        let after = disk.power_cut(seed);
        let recovered = open(&after, &dir);
        assert_eq!(bodies(&recovered), acknowledged, "seed {seed}");
        drop(recovered.close());
    }
    drop(queues.close());
}
