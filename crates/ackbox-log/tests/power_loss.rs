//! Power loss (invariant 1, ARCHITECTURE.md — no acknowledged send is lost — against
//! the disk as POSIX promises it, not as the page cache keeps it): the log
//! store's queues run on a model disk that keeps only what was synced
//! (file data up to its last sync, directory entries up to their
//! directory's last sync, unsynced writes lost or torn at any byte). A
//! random workload — sends, receives, deletes, visibility changes,
//! compactions and clean reopens, on segments small enough to roll and be
//! reclaimed often — runs with a power cut armed before a random change on
//! the disk; then the log is recovered from what the cut left, and:
//!
//! - it opens (a torn tail is trimmed; nothing else may be found damaged);
//! - every send acknowledged before the cut is there with its body, unless
//!   it was deleted (a delete is not synced on its own: a cut may undo the
//!   latest ones, which delivers those messages again — never loses them);
//! - a delete made durable before the cut (by a later send's sync) stays;
//! - nothing is there that was never sent;
//! - every send — a batch to one queue or a fan-out to both, one append —
//!   is there whole or not at all (its deleted messages aside).
//!
//! `ACKBOX_POWER_CUTS` sets how many cuts (default 2,000);
//! `ACKBOX_POWER_CUT_SEED` replays one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ackbox_log::compaction::CompactionPolicy;
use ackbox_log::disk::model::ModelDisk;
use ackbox_log::group_commit::GroupCommitOptions;
use ackbox_log::log::LogOptions;
use ackbox_log::queues::{Deleted, Outgoing, ReceiveRequest, StandardQueues};
use ackbox_log::record::Content;

const QUEUES: u64 = 2;

/// A deterministic generator: a failing cut replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn open(disk: &ModelDisk, dir: &Path) -> StandardQueues {
    StandardQueues::open_on(
        Arc::new(disk.clone()),
        dir,
        // A few sends fill a segment: rolls and reclaims happen all the time.
        LogOptions { segment_bytes: 600 },
        GroupCommitOptions::default(),
    )
    .map(|(queues, _)| queues)
    .expect("the log opens")
}

/// What the workload did that recovery must answer for.
#[derive(Debug, Default)]
struct Acknowledged {
    /// Sends acknowledged (durable) before the cut: seq → (queue, body).
    sends: BTreeMap<u64, (u64, String)>,
    /// Every body ever sent, acknowledged or not.
    bodies: BTreeSet<String>,
    /// Every send's messages, acknowledged or not: one append each.
    appends: Vec<Vec<u64>>,
    /// Messages whose delete was issued before the cut.
    deleted: BTreeSet<u64>,
    /// Messages whose delete was durable before the cut: a send appended
    /// after it was acknowledged, and the log syncs in order.
    durably_deleted: BTreeSet<u64>,
}

/// One run: a workload on a fresh disk with a cut armed before change
/// number `cut_at`; what was acknowledged before the cut, and the disk the
/// cut left.
fn run(seed: u64, cut_at: u64) -> (Acknowledged, ModelDisk, u64) {
    let mut rng = Rng(seed);
    let root = PathBuf::from("/power-loss");
    let dir = root.join("data").join("log");
    let disk = ModelDisk::new(&root);
    disk.cut_before_operation(cut_at, seed);
    let mut queues = open(&disk, &dir);
    let mut acknowledged = Acknowledged::default();
    let mut leases: Vec<(u64, u64, u32)> = Vec::new();
    // Deletes issued since the last send: the next acknowledged send makes
    // them durable.
    let mut recent_deletes: Vec<u64> = Vec::new();
    let mut now = 1_000;
    for step in 0..rng.below(40) + 10 {
        now += 1;
        let queue = rng.below(QUEUES);
        match rng.below(10) {
            0..=3 => {
                let count = rng.below(3) + 1;
                let bodies: Vec<String> = (0..count)
                    .map(|index| format!("{seed}-{step}-{index}"))
                    .collect();
                acknowledged.bodies.extend(bodies.iter().cloned());
                let outgoing = |bodies: &[String]| -> Vec<Outgoing> {
                    bodies
                        .iter()
                        .map(|body| Outgoing {
                            content: Content {
                                body: body.clone(),
                                ..Content::default()
                            },
                            sent_at: now,
                            visible_at: now,
                        })
                        .collect()
                };
                // A topic's fan-out: the same messages to every queue.
                let targets: Vec<u64> = if rng.below(2) == 0 {
                    vec![queue]
                } else {
                    (0..QUEUES).collect()
                };
                let sends = targets
                    .iter()
                    .map(|&target| (target, outgoing(&bodies)))
                    .collect();
                let (seqs, lsn) = queues.send_to_each(sends).expect("a send");
                acknowledged
                    .appends
                    .push(seqs.iter().flatten().copied().collect());
                let covered = std::mem::take(&mut recent_deletes);
                queues.commit().wait_durable(lsn).expect("a durable send");
                // Acknowledged only if the sync that made it durable came
                // before the cut.
                if disk.trapped().is_none() {
                    for (target, target_seqs) in targets.into_iter().zip(seqs) {
                        for (seq, body) in target_seqs.into_iter().zip(&bodies) {
                            acknowledged.sends.insert(seq, (target, body.clone()));
                        }
                    }
                    acknowledged.durably_deleted.extend(covered);
                }
            }
            4..=5 => {
                let request = ReceiveRequest {
                    max: rng.below(3) as usize + 1,
                    visibility_ms: rng.below(3) as i64,
                    dead_letter: None,
                    expire_sent_at_or_before: None,
                };
                let received = queues.receive(queue, now, &request).expect("a receive");
                leases.extend(
                    received.deliveries.iter().map(|delivery| {
                        (queue, delivery.message.seq, delivery.message.receive_count)
                    }),
                );
            }
            6..=7 if !leases.is_empty() => {
                let (queue, seq, lease) =
                    leases.swap_remove(rng.below(leases.len() as u64) as usize);
                let outcome = queues
                    .delete(queue, &[(seq, lease)], now)
                    .expect("a delete");
                acknowledged.deleted.insert(seq);
                if outcome == [Deleted::Deleted] {
                    recent_deletes.push(seq);
                }
            }
            8 if !leases.is_empty() => {
                let (queue, seq, lease) = leases[rng.below(leases.len() as u64) as usize];
                queues
                    .change_visibility(queue, (seq, lease), now + rng.below(3) as i64, now)
                    .expect("a visibility change");
            }
            8 => {
                queues
                    .compact(CompactionPolicy {
                        max_live_share: 1.0,
                        ..CompactionPolicy::default()
                    })
                    .expect("a compaction");
            }
            _ => {
                if rng.below(4) == 0 {
                    drop(queues.close());
                    queues = open(&disk, &dir);
                    leases.clear();
                } else {
                    queues
                        .compact(CompactionPolicy::default())
                        .expect("a compaction");
                }
            }
        }
        if disk.trapped().is_some() && rng.below(4) == 0 {
            // The process is dead; what it does from here on is moot.
            break;
        }
    }
    let operations = disk.operations();
    drop(queues.close());
    let after = disk.trapped().unwrap_or_else(|| disk.power_cut(seed));
    (acknowledged, after, operations)
}

/// Recovers from `disk` and checks it against what was acknowledged.
fn check(seed: u64, acknowledged: &Acknowledged, disk: &ModelDisk) {
    let dir = PathBuf::from("/power-loss/data/log");
    let (queues, _) = StandardQueues::open_on(
        Arc::new(disk.clone()),
        &dir,
        LogOptions { segment_bytes: 600 },
        GroupCommitOptions::default(),
    )
    .unwrap_or_else(|error| panic!("seed {seed}: recovery failed: {error}"));
    let mut present: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for queue in 0..QUEUES {
        for message in queues.peek(queue, 0, usize::MAX).expect("a peek") {
            present.insert(message.seq, (queue, message.content.body));
        }
    }
    for (seq, (queue, body)) in &acknowledged.sends {
        if acknowledged.deleted.contains(seq) {
            continue;
        }
        assert_eq!(
            present.get(seq),
            Some(&(*queue, body.clone())),
            "seed {seed}: acknowledged send {seq} ({body}) lost"
        );
    }
    for (seq, (_, body)) in &present {
        assert!(
            acknowledged.bodies.contains(body),
            "seed {seed}: message {seq} ({body:?}) was never sent"
        );
        assert!(
            !acknowledged.durably_deleted.contains(seq),
            "seed {seed}: message {seq} ({body}) came back though its delete was durable"
        );
    }
    for append in &acknowledged.appends {
        let undeleted: Vec<u64> = append
            .iter()
            .copied()
            .filter(|seq| !acknowledged.deleted.contains(seq))
            .collect();
        let kept = undeleted
            .iter()
            .filter(|seq| present.contains_key(seq))
            .count();
        assert!(
            kept == 0 || kept == undeleted.len(),
            "seed {seed}: {kept} of the {} messages sent together ({undeleted:?}) survived",
            undeleted.len()
        );
    }
    drop(queues.close());
}

#[test]
fn no_acknowledged_send_is_lost_to_a_power_cut_at_any_point() {
    let cuts: u64 = std::env::var("ACKBOX_POWER_CUTS")
        .ok()
        .and_then(|cuts| cuts.parse().ok())
        .unwrap_or(2_000);
    let seeds: Vec<u64> = match std::env::var("ACKBOX_POWER_CUT_SEED") {
        Ok(seed) => vec![seed.parse().expect("a numeric seed")],
        Err(_) => (0..cuts).collect(),
    };
    let mut acknowledged_sends = 0;
    let mut cut_mid_run = 0;
    for seed in seeds {
        // A dry run counts the changes the workload makes; the cut comes
        // before a random one of them (or after the last).
        let (_, _, operations) = run(seed, u64::MAX);
        let cut_at = Rng(seed ^ 0xC0FFEE).below(operations + 1);
        let (acknowledged, after, _) = run(seed, cut_at);
        acknowledged_sends += acknowledged.sends.len();
        cut_mid_run += u64::from(cut_at < operations);
        check(seed, &acknowledged, &after);
    }
    println!("{cut_mid_run} power cuts mid-run, {acknowledged_sends} acknowledged sends checked");
    assert!(
        cut_mid_run > 0 && acknowledged_sends > 0,
        "the cuts tested nothing"
    );
}
