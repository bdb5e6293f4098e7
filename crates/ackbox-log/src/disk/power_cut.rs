//! What a power cut leaves of the changes made since the last sync — POSIX's
//! promise and no more (the model LazyFS implements). One definition for
//! every model of a disk: [`ModelDisk`](super::model::ModelDisk) here, and
//! the filesystem the power-loss tests mount for the real binary.
//!
//! - A file keeps its content as of its last sync, then none, all, or a
//!   prefix of the changes since, the last one of that prefix possibly torn
//!   at any byte ([`surviving_content`]).
//! - A directory keeps its entries as of its last sync, and each change
//!   since (an entry created, removed or replaced) is kept or lost on its
//!   own: nothing is owed for an unsynced directory, not even the order of
//!   its changes ([`surviving_entries`]).
//!
//! Every choice comes from a [`SplitMix`] seeded by the caller, so a cut
//! that finds a bug replays from its seed.

use std::collections::{BTreeMap, BTreeSet};

/// One change to a file's content since its last sync.
#[derive(Debug, Clone)]
pub enum Change {
    /// `bytes` written at `offset`.
    Write {
        /// Where the write starts.
        offset: u64,
        /// What it wrote.
        bytes: Vec<u8>,
    },
    /// The file truncated or extended to this length.
    SetLen(u64),
}

impl Change {
    /// Makes this change to `content`.
    pub fn apply(&self, content: &mut Vec<u8>) {
        match self {
            Self::Write { offset, bytes } => write_into(content, *offset, bytes),
            Self::SetLen(len) => content.resize(to_usize(*len), 0),
        }
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("a size this machine can hold")
}

/// Writes `bytes` into `content` at `offset`, extending it with zeros as a
/// write past the end of a file does.
pub fn write_into(content: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = to_usize(offset);
    let end = start + bytes.len();
    if content.len() < end {
        content.resize(end, 0);
    }
    content[start..end].copy_from_slice(bytes);
}

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..=bound`.
    pub fn up_to(&mut self, bound: u64) -> u64 {
        self.next_u64() % (bound + 1)
    }

    /// True once in `times`.
    pub fn one_in(&mut self, times: u64) -> bool {
        self.next_u64().is_multiple_of(times)
    }
}

/// What a power cut leaves of a file whose content was `durable` at its last
/// sync and has seen `since_sync` since.
pub fn surviving_content(durable: &[u8], since_sync: &[Change], rng: &mut SplitMix) -> Vec<u8> {
    let mut content = durable.to_vec();
    if since_sync.is_empty() {
        return content;
    }
    let kept = match rng.up_to(3) {
        0 => 0,
        1 => since_sync.len(),
        _ => to_usize(rng.up_to(since_sync.len() as u64)),
    };
    for change in &since_sync[..kept] {
        change.apply(&mut content);
    }
    if let Some(Change::Write { offset, bytes }) = since_sync.get(kept)
        && rng.one_in(2)
    {
        let torn = to_usize(rng.up_to(bytes.len() as u64));
        write_into(&mut content, *offset, &bytes[..torn]);
    }
    content
}

/// What a power cut leaves of a directory whose entries were `durable` at
/// its last sync and are `current` now.
pub fn surviving_entries<Name: Ord + Clone, Entry: Copy + Eq>(
    durable: &BTreeMap<Name, Entry>,
    current: &BTreeMap<Name, Entry>,
    rng: &mut SplitMix,
) -> BTreeMap<Name, Entry> {
    let mut entries = durable.clone();
    let names: BTreeSet<&Name> = durable.keys().chain(current.keys()).collect();
    for name in names {
        let (was, is) = (durable.get(name), current.get(name));
        if was == is || rng.one_in(2) {
            continue;
        }
        match is {
            Some(entry) => entries.insert(name.clone(), *entry),
            None => entries.remove(name),
        };
    }
    entries
}
