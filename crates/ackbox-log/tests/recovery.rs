//! The log's crash contract, through real files: what was appended and
//! fsync'd is found again by a fresh `open`; a torn tail is cut, never read;
//! damage in an older segment stops the open; sequence numbers never repeat;
//! compaction keeps every live message's state.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use ackbox_log::compaction::{CompactionPolicy, CompactionReport, compact, copy_forward};
use ackbox_log::group_commit::{GroupCommit, GroupCommitOptions};
use ackbox_log::ledger::{Ledger, MessageState};
use ackbox_log::log::{Log, LogError, LogOptions, LogPosition, Recovery};
use ackbox_log::record::{Content, Record, SentMessage};

const QUEUE: u64 = 3;

fn sent(seq: u64, body: &str) -> Record {
    Record::Sent(SentMessage {
        queue: QUEUE,
        seq,
        sent_at: 1_000,
        visible_at: 1_000,
        content: Content {
            message_id: format!("id-{seq}"),
            body: body.to_owned(),
            md5_of_body: "md5".to_owned(),
            sender_id: "me".to_owned(),
            ..Content::default()
        },
        ..SentMessage::default()
    })
}

fn lease(seq: u64, visible_at: i64, receive_count: u32) -> Record {
    Record::Leased {
        queue: QUEUE,
        seq,
        visible_at,
        receive_count,
        received_at: 1_500,
    }
}

/// Opens the log in `dir`, replaying it into a fresh ledger.
fn reopen(dir: &Path, options: LogOptions) -> Result<(Log, Ledger, Recovery), LogError> {
    Ledger::recover(dir, options)
}

fn append(log: &mut Log, ledger: &mut Ledger, records: &[Record]) -> Vec<LogPosition> {
    ledger.append_to(log, records).expect("an append")
}

fn send(log: &mut Log, ledger: &mut Ledger, count: u64) -> Vec<u64> {
    let seqs: Vec<u64> = ledger.allocate_seqs(count).collect();
    let records: Vec<Record> = seqs
        .iter()
        .map(|&seq| sent(seq, &format!("body {seq}")))
        .collect();
    append(log, ledger, &records);
    seqs
}

fn states(ledger: &Ledger, seqs: impl IntoIterator<Item = u64>) -> Vec<Option<(i64, u32)>> {
    seqs.into_iter()
        .map(|seq| {
            ledger
                .message(QUEUE, seq)
                .map(|state: &MessageState| (state.visible_at, state.receive_count))
        })
        .collect()
}

/// Compaction told to copy however much of a segment is live.
fn copy_anything() -> CompactionPolicy {
    CompactionPolicy {
        max_live_share: 1.0,
        ..CompactionPolicy::default()
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("the log directory")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn sends_leases_and_deletes_are_found_again_after_reopening() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    let seqs = send(&mut log, &mut ledger, 5);
    append(
        &mut log,
        &mut ledger,
        &[
            lease(seqs[0], 9_000, 1),
            Record::Deleted {
                queue: QUEUE,
                seq: seqs[1],
            },
            Record::VisibilityChanged {
                queue: QUEUE,
                seq: seqs[2],
                visible_at: 5_000,
            },
        ],
    );
    log.sync().expect("an fsync");
    let before = states(&ledger, seqs.iter().copied());
    drop(log);

    let (log, reopened, recovery) = reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!(recovery.records, 8);
    assert_eq!(recovery.truncated, None);
    assert_eq!(states(&reopened, seqs.iter().copied()), before);
    assert_eq!(
        reopened.deliverable(QUEUE, 1_000, 10),
        vec![seqs[3], seqs[4]]
    );
    assert_eq!(reopened.counts(QUEUE, 1_000).in_flight, 1);
    // The body comes back from the log, not from memory.
    let position = reopened
        .message(QUEUE, seqs[4])
        .expect("a live message")
        .position;
    let record = Record::decode(&log.read(position).expect("a record")).expect("a send");
    let Record::Sent(message) = record else {
        panic!("{record:?} is not a send");
    };
    assert_eq!(message.content.body, format!("body {}", seqs[4]));
}

#[test]
fn a_tail_torn_anywhere_is_cut_at_the_last_whole_record_and_the_log_goes_on() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    send(&mut log, &mut ledger, 3);
    log.sync().expect("an fsync");
    drop(log);
    let segment = segment_files(dir.path()).pop().expect("a segment");
    let durable = fs::read(&segment).expect("the segment");

    // What a crash mid-write can leave: the next two records cut at every byte.
    let mut torn_records = Vec::new();
    for seq in [4, 5] {
        // Two appends of one record each: two groups.
        ackbox_log::frame::encode_frame(&mut torn_records, &sent(seq, "lost"), false);
    }
    for cut in 1..torn_records.len() {
        let mut bytes = durable.clone();
        bytes.extend_from_slice(&torn_records[..cut]);
        fs::write(&segment, &bytes).expect("a torn segment");
        let (_, ledger, recovery) = reopen(dir.path(), LogOptions::default())
            .unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
        let whole = if cut >= torn_records.len() / 2 { 4 } else { 3 };
        assert_eq!(recovery.records, whole, "cut at {cut}");
        assert_eq!(ledger.len() as u64, whole, "cut at {cut}");
        let truncated = recovery.truncated.is_some();
        assert_eq!(truncated, cut != torn_records.len() / 2, "cut at {cut}");
    }

    // Garbage after the last record (a write whose pages never all landed).
    let mut bytes = durable.clone();
    bytes.extend_from_slice(&[0xAB; 100]);
    fs::write(&segment, &bytes).expect("a damaged tail");
    let (mut log, mut ledger, recovery) =
        reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!(
        recovery.truncated.map(|t| (t.at, t.dropped)),
        Some((durable.len() as u64, 100))
    );
    assert_eq!(
        fs::metadata(&segment).expect("the segment").len(),
        durable.len() as u64
    );
    // Appends go on from the cut, and survive the next reopen.
    send(&mut log, &mut ledger, 1);
    log.sync().expect("an fsync");
    drop(log);
    let (_, ledger, recovery) = reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!((recovery.records, recovery.truncated), (4, None));
    assert_eq!(ledger.len(), 4);
}

#[test]
fn damage_in_a_sealed_segment_stops_the_open() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = LogOptions { segment_bytes: 100 };
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a new log");
    for _ in 0..4 {
        send(&mut log, &mut ledger, 1);
    }
    log.sync().expect("an fsync");
    drop(log);
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    let mut bytes = fs::read(&files[0]).expect("the oldest segment");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    fs::write(&files[0], &bytes).expect("a damaged segment");
    match reopen(dir.path(), options) {
        Err(LogError::Damaged { segment: 1, .. }) => {}
        other => panic!("a damaged sealed segment was accepted: {other:?}"),
    }
}

#[test]
fn compaction_copies_live_messages_forward_and_sequence_numbers_never_repeat() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = LogOptions { segment_bytes: 100 };
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a new log");
    let seqs: Vec<u64> = (0..6)
        .flat_map(|_| send(&mut log, &mut ledger, 1))
        .collect();
    // The first message is received twice; all but it and the last are deleted.
    for receive_count in 1..=2 {
        append(
            &mut log,
            &mut ledger,
            &[lease(seqs[0], 7_000, receive_count)],
        );
    }
    let deletes: Vec<Record> = seqs[1..5]
        .iter()
        .map(|&seq| Record::Deleted { queue: QUEUE, seq })
        .collect();
    append(&mut log, &mut ledger, &deletes);

    let report = compact(&mut log, &mut ledger, copy_anything()).expect("a compaction");
    // A segment per send (a send fills one), one for both leases, one for
    // the deletes: everything before the copies' segments.
    assert_eq!(
        report,
        CompactionReport {
            copied: 2,
            removed: 8
        }
    );
    log.sync().expect("an fsync");
    let next_seq = ledger.next_seq();
    let before = states(&ledger, seqs.iter().copied());
    drop(log);

    let (_, mut reopened, _) = reopen(dir.path(), options).expect("a reopen");
    assert_eq!(states(&reopened, seqs.iter().copied()), before);
    assert_eq!(before[0], Some((7_000, 2)));
    assert!(reopened.allocate_seqs(1).start >= next_seq);

    // Everything deleted and compacted away: the floor in the newest segment's
    // header still keeps the numbers from repeating.
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a reopen");
    let all: Vec<Record> = [seqs[0], seqs[5]]
        .iter()
        .map(|&seq| Record::Deleted { queue: QUEUE, seq })
        .collect();
    append(&mut log, &mut ledger, &all);
    send(&mut log, &mut ledger, 1);
    let last = ledger.next_seq() - 1;
    append(
        &mut log,
        &mut ledger,
        &[Record::Deleted {
            queue: QUEUE,
            seq: last,
        }],
    );
    // Every append fills a 100-byte segment, so this one begins a segment
    // whose header carries the floor.
    append(
        &mut log,
        &mut ledger,
        &[Record::Purged {
            queue: QUEUE,
            through_seq: last,
        }],
    );
    assert!(ledger.is_empty());
    log.remove_segments_before(log.active_segment())
        .expect("a removal");
    log.sync().expect("an fsync");
    drop(log);
    let (_, mut reopened, recovery) = reopen(dir.path(), options).expect("a reopen");
    assert!(
        recovery.seq_floor > last,
        "floor {} after {last}",
        recovery.seq_floor
    );
    assert!(reopened.allocate_seqs(1).start > last);
}

#[test]
fn group_commit_answers_every_appender_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Small segments, so appends roll while the flusher syncs.
    let options = LogOptions {
        segment_bytes: 4096,
    };
    let (log, _, _) = reopen(dir.path(), options).expect("a new log");
    let commit = GroupCommit::start(log, GroupCommitOptions::default()).expect("a flusher");
    let producers = 4;
    let batches = 50;
    // Each producer's last batch: where it went, and the first seq in it.
    let last_batches: Vec<(Vec<LogPosition>, u64)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|producer| {
                let commit = &commit;
                scope.spawn(move || {
                    let mut last = (Vec::new(), 0);
                    let mut last_lsn = 0;
                    for batch in 0..batches {
                        let base = 1 + (producer * batches + batch) * 10;
                        let payloads: Vec<Vec<u8>> = (base..base + 10)
                            .map(|seq| sent(seq, "durable").to_bytes())
                            .collect();
                        let (positions, lsn) = commit
                            .append(payloads.iter().map(Vec::as_slice), base + 10)
                            .expect("an append");
                        assert_eq!(positions.len(), 10);
                        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
                        assert!(lsn > last_lsn, "LSNs only grow");
                        last_lsn = lsn;
                        last = (positions.clone(), base);
                        // Sends wait for the disk; every other batch stands for
                        // leases and deletes, which do not.
                        if batch % 2 == 0 {
                            commit.wait_durable(lsn).expect("a durable batch");
                            // The sync covered the segment this batch went to,
                            // however many rolls came since the flusher began.
                            let segment = positions[0].segment;
                            assert!(
                                commit.synced_segment() >= u64::from(segment),
                                "segment {segment} unsynced"
                            );
                        }
                    }
                    last
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a producer"))
            .collect()
    });
    // Records are read back while the flusher runs, across the rolls.
    for (positions, base) in &last_batches {
        let seqs: Vec<u64> = commit
            .read_log()
            .read_many(positions)
            .expect("the records")
            .iter()
            .map(|bytes| match Record::decode(bytes).expect("a record") {
                Record::Sent(message) => message.seq,
                other => panic!("{other:?} is not a send"),
            })
            .collect();
        assert_eq!(seqs, (*base..base + 10).collect::<Vec<_>>());
    }
    drop(commit.close());
    let (_, ledger, recovery) = reopen(dir.path(), options).expect("a reopen");
    let expected = producers * batches * 10;
    assert_eq!(recovery.records, expected);
    assert_eq!(ledger.len() as u64, expected);
    assert_eq!(ledger.next_seq(), expected + 1);
}

#[test]
fn a_waiter_for_what_is_already_durable_is_answered_at_once() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (log, _, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    let commit = GroupCommit::start(log, GroupCommitOptions::default()).expect("a flusher");
    commit.wait_durable(0).expect("nothing to wait for");
    let payload = sent(1, "one").to_bytes();
    let (_, lsn) = commit.append([payload.as_slice()], 2).expect("an append");
    commit.wait_durable(lsn).expect("a durable append");
    // The second wait finds it synced without another fsync's help.
    let (answer, answered) = mpsc::channel();
    commit.when_durable(
        lsn,
        Box::new(move |result| {
            let _ = answer.send(result.is_ok());
        }),
    );
    assert_eq!(answered.try_recv(), Ok(true));
}

#[test]
fn a_segment_torn_before_its_header_landed_is_dropped() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    send(&mut log, &mut ledger, 2);
    log.sync().expect("an fsync");
    drop(log);
    let next = dir.path().join(format!("{:020}.log", 2));
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&next)
        .expect("a new segment file");
    file.write_all(b"ACKB").expect("a torn header");
    drop(file);
    let (mut log, mut ledger, recovery) =
        reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!(recovery.records, 2);
    assert!(!next.exists());
    assert_eq!(log.active_segment(), 1);
    send(&mut log, &mut ledger, 1);
    assert_eq!(ledger.len(), 3);
}

#[test]
fn records_read_together_come_back_in_the_order_asked_across_segments() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Three sends per segment, so the positions span segments and runs.
    let options = LogOptions { segment_bytes: 250 };
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a new log");
    let seqs: Vec<u64> = (0..4)
        .flat_map(|_| send(&mut log, &mut ledger, 3))
        .collect();
    assert!(log.segments().len() >= 4, "{:?}", log.segments());
    let mut asked: Vec<u64> = seqs.iter().rev().step_by(2).copied().collect();
    asked.push(seqs[0]);
    let positions: Vec<LogPosition> = asked
        .iter()
        .map(|&seq| ledger.message(QUEUE, seq).expect("a live message").position)
        .collect();
    let bodies: Vec<String> = log
        .read_many(&positions)
        .expect("the records")
        .iter()
        .map(|bytes| match Record::decode(bytes).expect("a record") {
            Record::Sent(message) => message.content.body,
            other => panic!("{other:?} is not a send"),
        })
        .collect();
    let expected: Vec<String> = asked.iter().map(|seq| format!("body {seq}")).collect();
    assert_eq!(bodies, expected);
    // A position that does not frame a record is refused, not misread.
    let mut wrong = positions[0];
    wrong.offset += 1;
    assert!(matches!(
        log.read_many(&[wrong]),
        Err(LogError::NoRecord(_))
    ));
    assert!(matches!(log.read(wrong), Err(LogError::NoRecord(_))));
}

#[test]
fn compaction_leaves_a_live_backlog_alone_and_frees_what_one_straggler_pins() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Ten sends of a batch fill a segment.
    let options = LogOptions { segment_bytes: 700 };
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a new log");
    let batches: Vec<Vec<u64>> = (0..4).map(|_| send(&mut log, &mut ledger, 10)).collect();
    let first_segments = log.segments();
    assert_eq!(
        compact(&mut log, &mut ledger, CompactionPolicy::default()).expect("a compaction"),
        CompactionReport::default(),
        "a live backlog was rewritten"
    );
    assert_eq!(log.segments(), first_segments);

    // All but one message of the first batch and all of the second go: the
    // straggler (a tenth of its segment) is copied, and both segments freed.
    let straggler = batches[0][3];
    let gone: Vec<Record> = batches[0]
        .iter()
        .chain(&batches[1])
        .filter(|&&seq| seq != straggler)
        .map(|&seq| Record::Deleted { queue: QUEUE, seq })
        .collect();
    append(&mut log, &mut ledger, &gone);
    let report = compact(&mut log, &mut ledger, CompactionPolicy::default()).expect("a compaction");
    assert_eq!(
        report,
        CompactionReport {
            copied: 1,
            removed: 2
        }
    );
    let live = states(&ledger, batches.concat());
    drop(log);
    let (_, reopened, _) = reopen(dir.path(), options).expect("a reopen");
    assert_eq!(states(&reopened, batches.concat()), live);
    assert_eq!(reopened.len(), 21);
}

#[test]
fn a_crash_between_copying_forward_and_removing_keeps_one_message_with_its_latest_state() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    let seqs = send(&mut log, &mut ledger, 2);
    append(&mut log, &mut ledger, &[lease(seqs[0], 4_000, 1)]);
    // The copies are appended and fsync'd; the crash comes before removal.
    let state = *ledger.message(QUEUE, seqs[0]).expect("a live message");
    let record = log.read(state.position).expect("a record");
    let copy = copy_forward(&ledger, QUEUE, seqs[0], state.position, &record).expect("a copy");
    append(&mut log, &mut ledger, &[copy]);
    // A lease after the copy must still count.
    append(&mut log, &mut ledger, &[lease(seqs[0], 9_000, 2)]);
    log.sync().expect("an fsync");
    let before = states(&ledger, seqs.iter().copied());
    drop(log);
    let (_, reopened, _) = reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!(reopened.len(), 2);
    assert_eq!(states(&reopened, seqs.iter().copied()), before);
    assert_eq!(before[0], Some((9_000, 2)));
    assert_eq!(reopened.deliverable(QUEUE, 1_000, 10), vec![seqs[1]]);
}

#[test]
fn a_dead_letter_move_cut_anywhere_leaves_the_message_in_exactly_one_queue() {
    const DEAD_LETTERS: u64 = 9;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    let seq = send(&mut log, &mut ledger, 1)[0];
    log.sync().expect("an fsync");
    drop(log);
    let segment = segment_files(dir.path()).pop().expect("a segment");
    let durable = fs::read(&segment).expect("the segment");

    let Record::Sent(mut moved) = sent(seq + 1, &format!("body {seq}")) else {
        unreachable!("sent() builds a send");
    };
    moved.queue = DEAD_LETTERS;
    moved.dead_letter_source_arn = Some("arn:source".to_owned());
    let mut frame = Vec::new();
    let record = Record::Moved {
        from_queue: QUEUE,
        from_seq: seq,
        to: moved,
    };
    ackbox_log::frame::encode_frame(&mut frame, &record, false);
    for cut in 0..=frame.len() {
        let mut bytes = durable.clone();
        bytes.extend_from_slice(&frame[..cut]);
        fs::write(&segment, &bytes).expect("a cut segment");
        let (_, ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a reopen");
        let in_source = ledger.message(QUEUE, seq).is_some();
        let in_dead_letters = ledger.message(DEAD_LETTERS, seq + 1).is_some();
        assert!(
            in_source != in_dead_letters,
            "cut at {cut}: source {in_source}, dead letters {in_dead_letters}"
        );
        assert_eq!(in_dead_letters, cut == frame.len(), "cut at {cut}");
    }
}

/// One append is one group (a topic's fan-out, a send and its archive
/// copy): a power cut that tears its write between two frames, where each
/// frame on its own is whole, keeps none of it.
#[test]
fn a_group_torn_anywhere_is_kept_whole_or_not_at_all() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    send(&mut log, &mut ledger, 3);
    log.sync().expect("an fsync");
    let segment = segment_files(dir.path()).pop().expect("a segment");
    let durable = fs::read(&segment).expect("the segment");
    let group: Vec<Record> = (4..=6).map(|seq| sent(seq, "fan-out copy")).collect();
    ledger.append_to(&mut log, &group).expect("a group append");
    log.sync().expect("an fsync");
    drop(log);
    let whole = fs::read(&segment).expect("the segment");
    let frames = &whole[durable.len()..];

    for cut in 0..=frames.len() {
        let mut bytes = durable.clone();
        bytes.extend_from_slice(&frames[..cut]);
        fs::write(&segment, &bytes).expect("a torn segment");
        let (mut log, mut ledger, recovery) = reopen(dir.path(), LogOptions::default())
            .unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
        let kept = if cut == frames.len() { 6 } else { 3 };
        assert_eq!(ledger.len() as u64, kept, "cut at {cut}");
        assert_eq!(recovery.records, kept, "cut at {cut}");
        assert_eq!(
            recovery.truncated.map(|truncation| truncation.at),
            (cut != 0 && cut != frames.len()).then_some(durable.len() as u64),
            "cut at {cut}: the segment is cut back to before the group"
        );
        // What is appended next is its own group: no frame of the torn one
        // is left to be completed by it.
        send(&mut log, &mut ledger, 1);
        log.sync().expect("an fsync");
        drop(log);
        let (_, ledger, _) = reopen(dir.path(), LogOptions::default())
            .unwrap_or_else(|error| panic!("cut at {cut}, appended after: {error}"));
        assert_eq!(
            ledger.len() as u64,
            kept + 1,
            "cut at {cut}, appended after"
        );
    }
}

#[test]
fn a_damaged_header_with_records_after_it_stops_the_open() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    send(&mut log, &mut ledger, 2);
    log.sync().expect("an fsync");
    drop(log);
    let segment = segment_files(dir.path()).pop().expect("a segment");
    let mut bytes = fs::read(&segment).expect("the segment");
    bytes[0] ^= 0xFF;
    fs::write(&segment, &bytes).expect("a damaged header");
    match reopen(dir.path(), LogOptions::default()) {
        Err(LogError::Damaged { offset: 0, .. }) => {}
        other => panic!("acknowledged records behind a damaged header were dropped: {other:?}"),
    }
}

#[test]
fn a_purge_left_to_the_sweep_survives_compaction_copying_what_it_covers() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = LogOptions {
        segment_bytes: 1024,
    };
    let (mut log, mut ledger, _) = reopen(dir.path(), options).expect("a new log");
    let purged = send(&mut log, &mut ledger, 12);
    let through_seq = *purged.last().expect("a message");
    append(
        &mut log,
        &mut ledger,
        &[Record::Purged {
            queue: QUEUE,
            through_seq,
        }],
    );
    // Later sends, gone again, roll the log past the purge's segment.
    let later: Vec<Record> = send(&mut log, &mut ledger, 12)
        .into_iter()
        .map(|seq| Record::Deleted { queue: QUEUE, seq })
        .collect();
    append(&mut log, &mut ledger, &later);
    // Copy everything live forward: the segments holding the sends and the
    // purge's record go.
    let report = compact(&mut log, &mut ledger, copy_anything()).expect("a compaction");
    assert_eq!(report.copied, 12);
    assert!(report.removed > 0, "{report:?}");
    drop(log);

    let (_, reopened, _) = reopen(dir.path(), options).expect("a reopen");
    assert_eq!(reopened.queue_len(QUEUE), 12);
    assert_eq!(
        reopened.purge_marks().collect::<Vec<_>>(),
        vec![(QUEUE, through_seq)],
        "the copies came back without the purge that covers them"
    );
}

#[test]
fn damage_in_the_middle_of_the_newest_segment_stops_the_open_and_names_the_byte() {
    // A torn tail ends the segment; bad bytes with whole records after them
    // are damage, and cutting there would drop records written whole.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut log, mut ledger, _) = reopen(dir.path(), LogOptions::default()).expect("a new log");
    let positions: Vec<LogPosition> = (0..4)
        .map(|index| {
            let seq = ledger.allocate_seqs(1).start;
            append(
                &mut log,
                &mut ledger,
                &[sent(seq, &format!("body {index}"))],
            )[0]
        })
        .collect();
    log.sync().expect("an fsync");
    drop(log);
    let segment = segment_files(dir.path()).pop().expect("the newest segment");
    let damaged = u64::from(positions[1].offset) + 10;
    let mut bytes = fs::read(&segment).expect("the segment");
    bytes[damaged as usize] ^= 0xFF;
    fs::write(&segment, &bytes).expect("the damaged segment");
    let refused = reopen(dir.path(), LogOptions::default()).err();
    let Some(LogError::Damaged {
        segment: number,
        offset,
        reason,
    }) = refused
    else {
        panic!("damage in the middle was not named: {refused:?}");
    };
    assert_eq!(number, u64::from(positions[1].segment));
    assert_eq!(
        offset,
        u64::from(positions[1].offset),
        "the damaged record's start"
    );
    assert!(reason.contains("2 intact record(s) follow"), "{reason}");
    assert_eq!(
        fs::read(&segment).expect("the segment"),
        bytes,
        "nothing was cut"
    );

    // The same bytes torn off the end instead are a torn tail: cut, and the
    // log goes on.
    bytes.truncate(damaged as usize + 1);
    fs::write(&segment, &bytes).expect("a torn segment");
    let (_, reopened, recovery) = reopen(dir.path(), LogOptions::default()).expect("a reopen");
    assert_eq!(recovery.records, 1);
    assert!(recovery.truncated.is_some());
    assert_eq!(reopened.len(), 1);
}
