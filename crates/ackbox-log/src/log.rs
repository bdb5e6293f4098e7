//! Segment files: appending, recovering after a crash, reading a record back
//! and dropping segments nothing needs.
//!
//! A log is a directory of segments named by their number
//! (`00000000000000000001.log`, …). Each starts with a 24-byte header — magic,
//! format version, and the sequence floor (no message sequence number below
//! it may be handed out again, even once every record naming one is gone) —
//! followed by [frames](crate::frame). Only the newest segment is written.
//! A segment is fsync'd before the next one is created, and the directory
//! after a segment is created or removed, so after a crash only the newest
//! segment can end in a torn frame: [`Log::open`] cuts it there. Anything
//! invalid in an older segment is damage, and the log refuses to open rather
//! than silently lose acknowledged records.
//!
//! One file though it is long: appending, syncing, recovering and removing
//! segments make one crash argument, which holds only read together.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::disk::{Disk, DiskFile, RealDisk};
use crate::frame::{FrameRead, InvalidFrame, Payload, encode_frame, next_frame};

const MAGIC: &[u8; 8] = b"ACKBXLOG";
const FORMAT_VERSION: u32 = 1;
/// Magic, version, reserved, sequence floor.
pub const SEGMENT_HEADER_BYTES: u64 = 24;
const SEGMENT_SUFFIX: &str = ".log";

/// Where a record is: its segment's number, its frame's offset there and the
/// frame's length, so reading it back is one `pread`. Twelve bytes, as the
/// ledger keeps one per queued message: the log keeps segment numbers and
/// offsets within `u32` (segments of at most [`MAX_SEGMENT_BYTES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    /// The segment's number (its file name).
    pub segment: u32,
    /// The frame's byte offset within the segment file.
    pub offset: u32,
    /// The frame's length: header and payload.
    pub len: u32,
}

/// The largest [`LogOptions::segment_bytes`] honoured: offsets stay within
/// `u32` even after the append that fills a segment.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;

/// Segments no longer part of the log, whose files are still on disk.
#[derive(Debug)]
#[must_use = "detached segments stay on disk until removed"]
pub struct Detached {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    /// Oldest first.
    numbers: Vec<u64>,
}

impl Default for Detached {
    fn default() -> Self {
        Self {
            disk: RealDisk::shared(),
            dir: PathBuf::new(),
            numbers: Vec::new(),
        }
    }
}

impl Detached {
    /// How many segments.
    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// Adds `later`'s segments, all younger than these.
    pub fn extend(&mut self, later: Self) {
        if self.numbers.is_empty() {
            self.disk = later.disk;
            self.dir = later.dir;
        }
        self.numbers.extend(later.numbers);
    }

    /// Unlinks the segments' files, oldest first; how many.
    pub fn remove(self) -> Result<usize, LogError> {
        for number in &self.numbers {
            let path = segment_path(&self.dir, *number);
            self.disk.remove(&path).map_err(io_error("remove", &path))?;
            // Each removal durable before the next: a crash must leave a
            // prefix removed, never an older segment back (with sends whose
            // deletes were in a younger one that stayed removed).
            sync_dir(self.disk.as_ref(), &self.dir)?;
        }
        Ok(self.numbers.len())
    }
}

/// How a log is laid out.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// A segment takes no more appends once it is this long: smaller segments
    /// are reclaimed sooner once their messages are gone, larger ones mean
    /// fewer files.
    pub segment_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
        }
    }
}

/// Why the log failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file operation failed.
    #[error("{operation} {path}: {source}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// An older segment (one that was fsync'd whole before the next began) is
    /// not what was written: the log will not guess which records are lost.
    #[error("segment {segment} is damaged at byte {offset}: {reason}")]
    Damaged {
        /// The damaged segment's number.
        segment: u64,
        /// Where in it.
        offset: u64,
        /// What was found there.
        reason: String,
    },
    /// The disk is full: the append was not kept (the segment is cut back
    /// to its last whole record). The log takes appends again once there is
    /// room; nothing earlier is affected.
    #[error("no space left on the disk for {path}: {source}")]
    NoSpace {
        /// The file that could not grow.
        path: PathBuf,
        /// The system's error (`ENOSPC`, `EDQUOT`).
        source: io::Error,
    },
    /// An earlier write or fsync failed: what reached the disk is unknown
    /// (the kernel may have dropped the dirty pages), so the log takes
    /// nothing more until it is reopened and recovered.
    #[error("the log stopped taking writes after an earlier failure: {0}")]
    Poisoned(String),
    /// A group of records too large for one segment's offsets, or more
    /// segments than positions can number.
    #[error("the log cannot place {0}")]
    OutOfRange(&'static str),
    /// A record was asked for where none is.
    #[error("no record at segment {}, offset {}", .0.segment, .0.offset)]
    NoRecord(LogPosition),
    /// A record's visitor refused it during recovery.
    #[error("recovering the record at segment {}, offset {}: {reason}", .position.segment, .position.offset)]
    Replay {
        /// The record.
        position: LogPosition,
        /// Why the visitor refused it.
        reason: String,
    },
}

/// Whether `error` says the disk (or the user's quota) is full.
fn is_no_space(error: &io::Error) -> bool {
    /// `ENOSPC` and `EDQUOT` on Linux.
    const NO_SPACE: [i32; 2] = [28, 122];
    error
        .raw_os_error()
        .is_some_and(|code| NO_SPACE.contains(&code))
}

impl LogError {
    /// Whether the disk was full: the operation may succeed once space is
    /// freed.
    pub fn is_no_space(&self) -> bool {
        matches!(self, Self::NoSpace { .. })
    }
}

fn io_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |source| LogError::Io {
        operation,
        path: path.to_owned(),
        source,
    }
}

/// What [`Log::open`] found and repaired.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Records handed to the visitor.
    pub records: u64,
    /// The highest sequence floor in any segment header.
    pub seq_floor: u64,
    /// Where the newest segment was cut, if it ended in a torn frame.
    pub truncated: Option<Truncation>,
}

/// A torn tail cut off the newest segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The segment.
    pub segment: u64,
    /// Its new length: the end of its last whole frame.
    pub at: u64,
    /// Bytes dropped.
    pub dropped: u64,
    /// What was found at the cut.
    pub reason: InvalidFrame,
}

/// An open log: sealed segments for reading, the newest for appending.
#[derive(Debug)]
pub struct Log {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    options: LogOptions,
    sealed: BTreeMap<u64, Arc<dyn DiskFile>>,
    /// Each segment's sequence floor (from its header): no message numbered
    /// at or above a segment's floor is in an older segment.
    floors: BTreeMap<u64, u64>,
    active: Arc<dyn DiskFile>,
    active_segment: u64,
    active_len: u64,
    frames: Vec<u8>,
    poisoned: Option<String>,
}

impl Log {
    /// Opens (or creates) the log in `dir`, handing every record to `visit` in
    /// the order it was appended, and cuts a torn tail off the newest segment.
    pub fn open(
        dir: &Path,
        options: LogOptions,
        visit: impl FnMut(LogPosition, &[u8]) -> Result<(), String>,
    ) -> Result<(Self, Recovery), LogError> {
        Self::open_on(RealDisk::shared(), dir, options, visit)
    }

    /// [`Log::open`] on `disk`.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        dir: &Path,
        options: LogOptions,
        mut visit: impl FnMut(LogPosition, &[u8]) -> Result<(), String>,
    ) -> Result<(Self, Recovery), LogError> {
        let options = LogOptions {
            segment_bytes: options.segment_bytes.min(MAX_SEGMENT_BYTES),
        };
        create_dir_durably(disk.as_ref(), dir).map_err(io_error("create", dir))?;
        let mut numbers = segment_numbers(disk.as_ref(), dir)?;
        let mut recovery = Recovery::default();
        // A crash between creating the newest segment and fsyncing its header
        // leaves a file no longer than a header and without one; nothing in
        // it was acknowledged. (A bad header with frames after it is damage.)
        if let Some(&newest) = numbers.last() {
            let path = segment_path(dir, newest);
            // A header and one byte past it tell; the whole segment is read
            // once, below.
            let start = disk.read(&path).map_err(io_error("read", &path))?;
            let start = &start[..start.len().min(SEGMENT_HEADER_BYTES as usize + 1)];
            if torn_at_creation(start) && numbers.len() > 1 {
                disk.remove(&path).map_err(io_error("remove", &path))?;
                sync_dir(disk.as_ref(), dir)?;
                numbers.pop();
            }
        }
        let Some(&newest) = numbers.last() else {
            let log = Self::create(disk, dir, options, 1, 0)?;
            return Ok((log, recovery));
        };
        let mut sealed = BTreeMap::new();
        let mut floors = BTreeMap::new();
        let mut active_len = SEGMENT_HEADER_BYTES;
        for &number in &numbers {
            let path = segment_path(dir, number);
            let mut bytes = disk.read(&path).map_err(io_error("read", &path))?;
            let is_newest = number == newest;
            let seq_floor = match read_header(&bytes) {
                Some(floor) => floor,
                None if is_newest && torn_at_creation(&bytes) => {
                    // The only segment, torn before its header reached the disk.
                    bytes.clear();
                    write_header(&mut bytes, 0);
                    disk.open(&path)
                        .and_then(|file| {
                            file.set_len(0)?;
                            file.write_all_at(&bytes, 0)?;
                            file.sync_data()
                        })
                        .map_err(io_error("write", &path))?;
                    0
                }
                None => {
                    return Err(LogError::Damaged {
                        segment: number,
                        offset: 0,
                        reason: "not an ackbox log segment header".to_owned(),
                    });
                }
            };
            recovery.seq_floor = recovery.seq_floor.max(seq_floor);
            floors.insert(number, seq_floor);
            let end = walk_segment(number, &bytes, is_newest, |position, payload| {
                visit(position, payload).map_err(|reason| LogError::Replay { position, reason })?;
                recovery.records += 1;
                Ok(())
            })?;
            let offset = match end {
                SegmentEnd::Whole => bytes.len(),
                SegmentEnd::TornTail { at, reason } => {
                    let file = disk.open(&path).map_err(io_error("open", &path))?;
                    file.set_len(at as u64)
                        .and_then(|()| file.sync_data())
                        .map_err(io_error("truncate", &path))?;
                    recovery.truncated = Some(Truncation {
                        segment: number,
                        at: at as u64,
                        dropped: (bytes.len() - at) as u64,
                        reason,
                    });
                    at
                }
            };
            if is_newest {
                active_len = offset as u64;
            } else {
                let file = disk.open(&path).map_err(io_error("open", &path))?;
                sealed.insert(number, file);
            }
        }
        let path = segment_path(dir, newest);
        let active = disk.open(&path).map_err(io_error("open", &path))?;
        let log = Self {
            disk,
            dir: dir.to_owned(),
            options,
            sealed,
            floors,
            active,
            active_segment: newest,
            active_len,
            frames: Vec::new(),
            poisoned: None,
        };
        Ok((log, recovery))
    }

    fn create(
        disk: Arc<dyn Disk>,
        dir: &Path,
        options: LogOptions,
        number: u64,
        seq_floor: u64,
    ) -> Result<Self, LogError> {
        let active = create_segment(disk.as_ref(), dir, number, seq_floor)?;
        Ok(Self {
            disk,
            dir: dir.to_owned(),
            options,
            sealed: BTreeMap::new(),
            floors: BTreeMap::from([(number, seq_floor)]),
            active,
            active_segment: number,
            active_len: SEGMENT_HEADER_BYTES,
            frames: Vec::new(),
            poisoned: None,
        })
    }

    /// Appends `payloads` as one write and one group, in order, and returns
    /// where each starts. Nothing is durable until [`Log::sync`] returns;
    /// after a crash, recovery finds all of them or none (see
    /// [`frame`](crate::frame)).
    ///
    /// `seq_floor` is the next sequence number the caller would hand out: a
    /// segment begun by this append records it, so that numbers are never
    /// reused once the segments naming them are gone.
    pub fn append<P: Payload>(
        &mut self,
        payloads: impl IntoIterator<Item = P>,
        seq_floor: u64,
    ) -> Result<Vec<LogPosition>, LogError> {
        self.check_poisoned()?;
        self.frames.clear();
        let mut frames = Vec::new();
        let mut payloads = payloads.into_iter().peekable();
        while let Some(payload) = payloads.next() {
            let start = self.frames.len();
            encode_frame(&mut self.frames, &payload, payloads.peek().is_some());
            frames.push((start, self.frames.len() - start));
        }
        let size = self.frames.len() as u64;
        if SEGMENT_HEADER_BYTES + size > u64::from(u32::MAX) {
            return Err(LogError::OutOfRange("a group of records over 4 GiB"));
        }
        if self.active_len >= self.options.segment_bytes
            || self.active_len + size > u64::from(u32::MAX)
        {
            self.roll(seq_floor)?;
        }
        let segment = u32::try_from(self.active_segment)
            .map_err(|_| LogError::OutOfRange("a segment numbered beyond u32"))?;
        let positions = frames
            .into_iter()
            .map(|(start, len)| LogPosition {
                segment,
                // Within u32: checked against the segment's length above.
                offset: (self.active_len + start as u64) as u32,
                len: len as u32,
            })
            .collect();
        if let Err(error) = self.active.write_all_at(&self.frames, self.active_len) {
            return Err(self.failed_write(error));
        }
        self.active_len += self.frames.len() as u64;
        Ok(positions)
    }

    /// Makes everything appended so far durable (`fdatasync`).
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.check_poisoned()?;
        if let Err(error) = self.active.sync_data() {
            return Err(self.poison("fsync", error));
        }
        Ok(())
    }

    /// Seals the newest segment (fsync'd whole first, so that only the newest
    /// can ever hold a torn frame) and begins the next.
    fn roll(&mut self, seq_floor: u64) -> Result<(), LogError> {
        self.sync()?;
        let next = self.active_segment + 1;
        let active = match create_segment(self.disk.as_ref(), &self.dir, next, seq_floor) {
            Ok(file) => file,
            Err(LogError::Io { path, source, .. }) if is_no_space(&source) => {
                // The segment may exist half made; gone, it leaves the log as
                // it was, and the next append tries again.
                let removed = if self.disk.exists(&path) {
                    self.disk
                        .remove(&path)
                        .and_then(|()| self.disk.sync_dir(&self.dir))
                } else {
                    Ok(())
                };
                return Err(match removed {
                    Ok(()) => LogError::NoSpace { path, source },
                    Err(error) => self.poison("remove a half-made segment", error),
                });
            }
            Err(error) => {
                self.poisoned = Some(error.to_string());
                return Err(error);
            }
        };
        let sealed = std::mem::replace(&mut self.active, active);
        self.sealed.insert(self.active_segment, sealed);
        self.floors.insert(next, seq_floor);
        self.active_segment = next;
        self.active_len = SEGMENT_HEADER_BYTES;
        Ok(())
    }

    /// Reads back the record that starts at `position`, checking its checksum.
    pub fn read(&self, position: LogPosition) -> Result<Vec<u8>, LogError> {
        let mut records = self.read_many(&[position])?;
        Ok(records.pop().unwrap_or_default())
    }

    /// Reads back several records, each checked; records that lie close
    /// together in one segment (a receive's messages usually were sent
    /// together) are read with one `pread`.
    pub fn read_many(&self, positions: &[LogPosition]) -> Result<Vec<Vec<u8>>, LogError> {
        // Bytes between two records worth reading through rather than paying
        // another system call.
        const GAP: u64 = 4096;
        let mut order: Vec<usize> = (0..positions.len()).collect();
        order.sort_unstable_by_key(|&index| positions[index]);
        let mut records = vec![Vec::new(); positions.len()];
        let mut run_start = 0;
        while run_start < order.len() {
            let first = positions[order[run_start]];
            let mut end = u64::from(first.offset) + u64::from(first.len);
            let mut run_end = run_start + 1;
            while let Some(&next) = order.get(run_end).map(|&index| &positions[index]) {
                if next.segment != first.segment || u64::from(next.offset) > end + GAP {
                    break;
                }
                end = end.max(u64::from(next.offset) + u64::from(next.len));
                run_end += 1;
            }
            let file = self.segment_file(first)?;
            let mut bytes = vec![0; (end - u64::from(first.offset)) as usize];
            self.read_at(file.as_ref(), &mut bytes, first)?;
            for &index in &order[run_start..run_end] {
                let position = positions[index];
                let start = (position.offset - first.offset) as usize;
                let frame = &bytes[start..start + position.len as usize];
                records[index] = checked_payload(frame, position)?.to_vec();
            }
            run_start = run_end;
        }
        Ok(records)
    }

    /// Fills `bytes` from `position` on; a read past the segment's end means
    /// no record is there.
    fn read_at(
        &self,
        file: &dyn DiskFile,
        bytes: &mut [u8],
        position: LogPosition,
    ) -> Result<(), LogError> {
        file.read_exact_at(bytes, u64::from(position.offset))
            .map_err(|source| match source.kind() {
                io::ErrorKind::UnexpectedEof => LogError::NoRecord(position),
                _ => LogError::Io {
                    operation: "read",
                    path: segment_path(&self.dir, u64::from(position.segment)),
                    source,
                },
            })
    }

    fn segment_file(&self, position: LogPosition) -> Result<&Arc<dyn DiskFile>, LogError> {
        if u64::from(position.segment) == self.active_segment {
            Ok(&self.active)
        } else {
            self.sealed
                .get(&u64::from(position.segment))
                .ok_or(LogError::NoRecord(position))
        }
    }

    /// Removes every sealed segment numbered below `segment` (never the one
    /// being appended to). The caller has made sure no live record is in them.
    pub fn remove_segments_before(&mut self, segment: u64) -> Result<usize, LogError> {
        self.detach_segments_before(segment).remove()
    }

    /// Forgets every sealed segment numbered below `segment` (never the one
    /// being appended to), leaving their files for [`Detached::remove`]:
    /// unlinking a segment of 64 MiB and syncing the directory takes tens of
    /// milliseconds, which need not hold the log. The caller has made sure
    /// no live record is in them; until they are removed, a reopen replays
    /// them again, which is harmless.
    pub fn detach_segments_before(&mut self, segment: u64) -> Detached {
        let numbers: Vec<u64> = self.sealed.range(..segment).map(|(&n, _)| n).collect();
        for number in &numbers {
            self.sealed.remove(number);
            self.floors.remove(number);
        }
        Detached {
            disk: Arc::clone(&self.disk),
            dir: self.dir.clone(),
            numbers,
        }
    }

    /// The sequence floor `segment`'s header records.
    pub fn seq_floor_of(&self, segment: u64) -> Option<u64> {
        self.floors.get(&segment).copied()
    }

    /// Bytes in the segment being appended to.
    pub fn active_len(&self) -> u64 {
        self.active_len
    }

    /// Another handle on the segment being appended to, for a thread that
    /// fsyncs it while appends go on.
    pub fn active_file(&self) -> Arc<dyn DiskFile> {
        Arc::clone(&self.active)
    }

    /// The segment being appended to.
    pub fn active_segment(&self) -> u64 {
        self.active_segment
    }

    /// The numbers of every segment, oldest first.
    pub fn segments(&self) -> Vec<u64> {
        let mut numbers: Vec<u64> = self.sealed.keys().copied().collect();
        numbers.push(self.active_segment);
        numbers
    }

    fn check_poisoned(&self) -> Result<(), LogError> {
        match &self.poisoned {
            Some(reason) => Err(LogError::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// A write that failed: for want of space, the segment is cut back to its
    /// last whole record and the log goes on; otherwise what reached the
    /// disk is unknown, and the log is poisoned.
    fn failed_write(&mut self, source: io::Error) -> LogError {
        if is_no_space(&source) && self.active.set_len(self.active_len).is_ok() {
            return LogError::NoSpace {
                path: segment_path(&self.dir, self.active_segment),
                source,
            };
        }
        self.poison("write", source)
    }

    fn poison(&mut self, operation: &'static str, source: io::Error) -> LogError {
        let error = LogError::Io {
            operation,
            path: segment_path(&self.dir, self.active_segment),
            source,
        };
        self.poisoned = Some(error.to_string());
        error
    }
}

/// How a segment's frames end.
enum SegmentEnd {
    /// At the end of its bytes, on a frame boundary.
    Whole,
    /// In a torn frame at byte `at` (the newest segment only): what a crash
    /// mid-write leaves.
    TornTail { at: usize, reason: InvalidFrame },
}

/// Hands every frame of segment `number` (header already read) to `visit`, in
/// order, a group's only once its last frame is read, and says how the
/// frames end. Bad bytes, or a group without its last frame, end the newest
/// segment as a torn tail unless intact frames follow them; anywhere else
/// they are damage.
fn walk_segment(
    number: u64,
    bytes: &[u8],
    is_newest: bool,
    mut visit: impl FnMut(LogPosition, &[u8]) -> Result<(), LogError>,
) -> Result<SegmentEnd, LogError> {
    let segment =
        u32::try_from(number).map_err(|_| LogError::OutOfRange("a segment numbered beyond u32"))?;
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    // The frames of the group being read, held until its last one is.
    let mut group: Vec<(LogPosition, &[u8])> = Vec::new();
    loop {
        let group_start = group
            .first()
            .map_or(offset, |(position, _)| position.offset as usize);
        match next_frame(&bytes[offset..]) {
            FrameRead::Frame {
                payload,
                len,
                continues,
            } => {
                let position = LogPosition {
                    segment,
                    offset: u32::try_from(offset).map_err(|_| {
                        LogError::OutOfRange("a record beyond 4 GiB into a segment")
                    })?,
                    len: len as u32,
                };
                group.push((position, payload));
                if !continues {
                    for (position, payload) in group.drain(..) {
                        visit(position, payload)?;
                    }
                }
                offset += len;
            }
            FrameRead::End if group.is_empty() => return Ok(SegmentEnd::Whole),
            FrameRead::End => {
                // Appends never span segments (a segment rolls before an
                // append), so only a torn write leaves a group open.
                let reason = InvalidFrame::UnfinishedGroup {
                    frames: group.len(),
                };
                return if is_newest {
                    Ok(SegmentEnd::TornTail {
                        at: group_start,
                        reason,
                    })
                } else {
                    Err(LogError::Damaged {
                        segment: number,
                        offset: group_start as u64,
                        reason: reason.to_string(),
                    })
                };
            }
            FrameRead::Invalid(reason) => {
                // A torn tail ends the segment; intact records after the bad
                // bytes mean they are damage in the middle of it, and cutting
                // there would drop records that were written whole (and maybe
                // acknowledged).
                let intact_after = intact_run_to_end(bytes, offset + 1);
                return match intact_after {
                    None if is_newest => Ok(SegmentEnd::TornTail {
                        at: group_start,
                        reason,
                    }),
                    None => Err(LogError::Damaged {
                        segment: number,
                        offset: offset as u64,
                        reason: reason.to_string(),
                    }),
                    Some((at, records)) => Err(LogError::Damaged {
                        segment: number,
                        offset: offset as u64,
                        reason: format!(
                            "{reason}, yet {records} intact record(s) follow from byte {at} to \
                             the end: damage in the middle of the segment, not a torn tail"
                        ),
                    }),
                };
            }
        }
    }
}

/// What [`check`] found in one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentCheck {
    /// The segment's number.
    pub segment: u64,
    /// Whole records read before its end (or the damage).
    pub records: u64,
    /// The file's length.
    pub bytes: u64,
    /// How its records end.
    pub state: SegmentState,
}

/// How a checked segment's records end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentState {
    /// Every byte is a whole record.
    Whole,
    /// A crash's torn tail, which the next open cuts at `at`.
    TornTail {
        /// Where the last whole record ends.
        at: u64,
        /// What was found there.
        reason: InvalidFrame,
    },
    /// Damage: the log will not open until a person looks.
    Damaged {
        /// Where.
        offset: u64,
        /// What was found there.
        reason: String,
    },
}

/// Reads every segment of the log in `dir` without changing anything (a
/// torn tail is reported, not cut) and says what is readable where.
pub fn check(dir: &Path) -> Result<Vec<SegmentCheck>, LogError> {
    let disk = RealDisk;
    let numbers = segment_numbers(&disk, dir)?;
    let newest = numbers.last().copied();
    let mut checks = Vec::with_capacity(numbers.len());
    for number in numbers {
        let path = segment_path(dir, number);
        let bytes = disk.read(&path).map_err(io_error("read", &path))?;
        let is_newest = Some(number) == newest;
        let mut records = 0;
        let state = if read_header(&bytes).is_none() {
            if is_newest && torn_at_creation(&bytes) {
                SegmentState::TornTail {
                    at: 0,
                    reason: InvalidFrame::ShortHeader {
                        available: bytes.len(),
                    },
                }
            } else {
                SegmentState::Damaged {
                    offset: 0,
                    reason: "not an ackbox log segment header".to_owned(),
                }
            }
        } else {
            match walk_segment(number, &bytes, is_newest, |_, _| {
                records += 1;
                Ok(())
            }) {
                Ok(SegmentEnd::Whole) => SegmentState::Whole,
                Ok(SegmentEnd::TornTail { at, reason }) => SegmentState::TornTail {
                    at: at as u64,
                    reason,
                },
                Err(LogError::Damaged { offset, reason, .. }) => {
                    SegmentState::Damaged { offset, reason }
                }
                Err(error) => return Err(error),
            }
        };
        checks.push(SegmentCheck {
            segment: number,
            records,
            bytes: bytes.len() as u64,
            state,
        });
    }
    Ok(checks)
}

/// The first offset at or after `from` where intact frames run to the very
/// end of `bytes`, and how many there are. Such a run after bad bytes cannot
/// be a torn write's leftovers: a tear ends the segment.
fn intact_run_to_end(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    (from..bytes.len()).find_map(|start| {
        let mut offset = start;
        let mut records = 0;
        loop {
            match next_frame(&bytes[offset..]) {
                FrameRead::Frame { len, .. } => {
                    offset += len;
                    records += 1;
                }
                FrameRead::End if records > 0 => return Some((start, records)),
                FrameRead::End | FrameRead::Invalid(_) => return None,
            }
        }
    })
}

/// The payload of `frame`, which must be exactly one whole, intact frame.
fn checked_payload(frame: &[u8], position: LogPosition) -> Result<&[u8], LogError> {
    match next_frame(frame) {
        FrameRead::Frame { payload, len, .. } if len == frame.len() => Ok(payload),
        FrameRead::Frame { .. } | FrameRead::End | FrameRead::Invalid(_) => {
            Err(LogError::NoRecord(position))
        }
    }
}

/// The file of segment `number` in `dir`.
pub fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}{SEGMENT_SUFFIX}"))
}

fn segment_numbers(disk: &dyn Disk, dir: &Path) -> Result<Vec<u64>, LogError> {
    let mut numbers = Vec::new();
    for name in disk.list(dir).map_err(io_error("list", dir))? {
        let Some(number) = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|stem| stem.parse::<u64>().ok())
        else {
            continue;
        };
        numbers.push(number);
    }
    numbers.sort_unstable();
    Ok(numbers)
}

fn write_header(out: &mut Vec<u8>, seq_floor: u64) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&seq_floor.to_le_bytes());
}

/// Whether a segment's bytes are what a crash during its creation leaves:
/// no more than a header's length, and not a header.
fn torn_at_creation(bytes: &[u8]) -> bool {
    bytes.len() <= SEGMENT_HEADER_BYTES as usize && read_header(bytes).is_none()
}

/// The header's sequence floor, or `None` when `bytes` do not start with a
/// header of this format.
fn read_header(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..SEGMENT_HEADER_BYTES as usize)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    let (version, rest) = rest.split_at(4);
    if magic != MAGIC || version != FORMAT_VERSION.to_le_bytes() {
        return None;
    }
    Some(u64::from_le_bytes(rest[4..12].try_into().ok()?))
}

fn create_segment(
    disk: &dyn Disk,
    dir: &Path,
    number: u64,
    seq_floor: u64,
) -> Result<Arc<dyn DiskFile>, LogError> {
    let path = segment_path(dir, number);
    let file = disk.create_new(&path).map_err(io_error("create", &path))?;
    let mut header = Vec::with_capacity(SEGMENT_HEADER_BYTES as usize);
    write_header(&mut header, seq_floor);
    file.write_all_at(&header, 0)
        .and_then(|()| file.sync_data())
        .map_err(io_error("write", &path))?;
    sync_dir(disk, dir)?;
    Ok(file)
}

fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<(), LogError> {
    disk.sync_dir(dir).map_err(io_error("fsync", dir))
}

/// Creates `dir` and whatever of its ancestors is missing, syncing each new
/// entry into its parent, the outermost first: a directory entry is durable
/// only once the directory holding it is synced, and a log whose directory
/// a power cut can take is no more durable than its directory.
pub fn create_dir_durably(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|path| !path.as_os_str().is_empty() && !disk.exists(path))
        .collect();
    for path in missing.into_iter().rev() {
        match disk.create_dir(path) {
            // Another process may make it meanwhile; the parent is synced
            // below either way.
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        disk.sync_dir(parent)?;
    }
    Ok(())
}
