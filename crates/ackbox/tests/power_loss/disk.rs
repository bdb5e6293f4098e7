//! A disk that loses power, held by inode as a filesystem serves it — the
//! model of `ackbox_log::disk::model`, which tests the log store's own I/O,
//! here under everything the real binary writes (SQLite's database, WAL and
//! WAL index, the lock file, the receipt key, the log's segments).
//!
//! What a file holds is durable only up to its last sync (`fsync` or
//! `fdatasync`); an entry created, removed or renamed in a directory is
//! durable only once that directory is synced. [`Disk::power_cut`] returns
//! the disk as a cut at that instant could leave it, chosen by a seed, by
//! the rules both models share (`ackbox_log::disk::power_cut`). A directory
//! whose own entry did not survive is gone, and everything in it; a file
//! removed but not synced away may be back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};

pub(crate) use ackbox_log::disk::power_cut::SplitMix;
use ackbox_log::disk::power_cut::{Change, surviving_content, surviving_entries};

/// An inode number, as the kernel knows it.
pub(crate) type Ino = u64;

/// The root directory's inode: it exists, durably, on every disk.
pub(crate) const ROOT: Ino = 1;

/// Why an operation was refused (the errno a filesystem answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    NotFound,
    Exists,
    NotADirectory,
    IsADirectory,
    NotEmpty,
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Directory,
}

/// What `stat` reports of a node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attributes {
    pub(crate) ino: Ino,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) mode: u16,
}

/// The disk: every node ever made since the last cut, reachable or not, so
/// that an open file outlives its name and a cut can bring back a removed
/// entry with the content it had.
#[derive(Debug, Clone)]
pub(crate) struct Disk {
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
    syncs: u64,
    /// Syncs by the synced file's (or directory's) name: SQLite syncs its
    /// database file only when it checkpoints (or creates it), and a cut
    /// in a checkpoint is worth knowing to have happened.
    syncs_by_name: BTreeMap<OsString, u64>,
}

#[derive(Debug, Clone)]
enum Node {
    File(File),
    Directory(Directory),
}

#[derive(Debug, Clone, Default)]
struct File {
    /// The content as programs see it.
    current: Vec<u8>,
    /// The content as of the last sync.
    durable: Vec<u8>,
    /// What changed since the last sync, in order.
    since_sync: Vec<Change>,
    mode: u16,
}

#[derive(Debug, Clone, Default)]
struct Directory {
    /// The entries as programs see them.
    current: BTreeMap<OsString, Ino>,
    /// The entries as of the directory's last sync.
    durable: BTreeMap<OsString, Ino>,
    mode: u16,
}

impl Default for Disk {
    fn default() -> Self {
        let root = Directory {
            mode: 0o755,
            ..Directory::default()
        };
        Self {
            nodes: HashMap::from([(ROOT, Node::Directory(root))]),
            next_ino: ROOT + 1,
            syncs: 0,
            syncs_by_name: BTreeMap::new(),
        }
    }
}

impl Disk {
    /// File and directory syncs so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Syncs so far of files or directories named `name`.
    pub(crate) fn syncs_of(&self, name: &str) -> u64 {
        self.syncs_by_name
            .get(OsStr::new(name))
            .copied()
            .unwrap_or(0)
    }

    fn name_of(&self, ino: Ino) -> Option<&OsString> {
        self.nodes.values().find_map(|node| match node {
            Node::Directory(directory) => directory
                .current
                .iter()
                .find_map(|(name, &child)| (child == ino).then_some(name)),
            Node::File(_) => None,
        })
    }

    pub(crate) fn attributes(&self, ino: Ino) -> Result<Attributes, Refusal> {
        Ok(match self.nodes.get(&ino).ok_or(Refusal::NotFound)? {
            Node::File(file) => Attributes {
                ino,
                kind: Kind::File,
                size: file.current.len() as u64,
                mode: file.mode,
            },
            Node::Directory(directory) => Attributes {
                ino,
                kind: Kind::Directory,
                size: directory.current.len() as u64,
                mode: directory.mode,
            },
        })
    }

    pub(crate) fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Attributes, Refusal> {
        let ino = *self
            .directory(parent)?
            .current
            .get(name)
            .ok_or(Refusal::NotFound)?;
        self.attributes(ino)
    }

    /// The entries of `ino`, in name order.
    pub(crate) fn entries(&self, ino: Ino) -> Result<Vec<(OsString, Ino, Kind)>, Refusal> {
        Ok(self
            .directory(ino)?
            .current
            .iter()
            .map(|(name, &child)| {
                let kind = match self.nodes.get(&child) {
                    Some(Node::Directory(_)) => Kind::Directory,
                    _ => Kind::File,
                };
                (name.clone(), child, kind)
            })
            .collect())
    }

    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        kind: Kind,
        mode: u16,
    ) -> Result<Attributes, Refusal> {
        if self.directory(parent)?.current.contains_key(name) {
            return Err(Refusal::Exists);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let node = match kind {
            Kind::File => Node::File(File {
                mode,
                ..File::default()
            }),
            Kind::Directory => Node::Directory(Directory {
                mode,
                ..Directory::default()
            }),
        };
        self.nodes.insert(ino, node);
        self.directory_mut(parent)?
            .current
            .insert(name.to_owned(), ino);
        self.attributes(ino)
    }

    /// Removes the entry `name` of `parent`: a file's (`unlink`) or an
    /// empty directory's (`rmdir`). The node stays for whoever has it open.
    pub(crate) fn remove(&mut self, parent: Ino, name: &OsStr, kind: Kind) -> Result<(), Refusal> {
        let found = self.lookup(parent, name)?;
        match (kind, found.kind) {
            (Kind::File, Kind::Directory) => return Err(Refusal::IsADirectory),
            (Kind::Directory, Kind::File) => return Err(Refusal::NotADirectory),
            (Kind::Directory, Kind::Directory) if found.size > 0 => {
                return Err(Refusal::NotEmpty);
            }
            _ => {}
        }
        self.directory_mut(parent)?.current.remove(name);
        Ok(())
    }

    /// Moves an entry, replacing what the new name held unless
    /// `no_replace`; the two directories change, each durable only once
    /// synced.
    pub(crate) fn rename(
        &mut self,
        from: (Ino, &OsStr),
        to: (Ino, &OsStr),
        no_replace: bool,
    ) -> Result<(), Refusal> {
        let moving = self.lookup(from.0, from.1)?;
        self.directory(to.0)?;
        if from == to {
            return Ok(());
        }
        if let Ok(replaced) = self.lookup(to.0, to.1) {
            match (moving.kind, replaced.kind) {
                _ if no_replace => return Err(Refusal::Exists),
                (Kind::File, Kind::Directory) => return Err(Refusal::IsADirectory),
                (Kind::Directory, Kind::File) => return Err(Refusal::NotADirectory),
                (Kind::Directory, Kind::Directory) if replaced.size > 0 => {
                    return Err(Refusal::NotEmpty);
                }
                _ => {}
            }
        }
        self.directory_mut(from.0)?.current.remove(from.1);
        self.directory_mut(to.0)?
            .current
            .insert(to.1.to_owned(), moving.ino);
        Ok(())
    }

    pub(crate) fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], Refusal> {
        let content = &self.file(ino)?.current;
        let start = usize::try_from(offset).map_or(content.len(), |start| start.min(content.len()));
        let end = (start + size as usize).min(content.len());
        Ok(&content[start..end])
    }

    pub(crate) fn write(&mut self, ino: Ino, offset: u64, bytes: &[u8]) -> Result<(), Refusal> {
        self.change(
            ino,
            Change::Write {
                offset,
                bytes: bytes.to_vec(),
            },
        )
    }

    pub(crate) fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), Refusal> {
        self.change(ino, Change::SetLen(len))
    }

    /// Mode bits are metadata the model does not lose: they survive as set.
    pub(crate) fn set_mode(&mut self, ino: Ino, mode: u16) -> Result<(), Refusal> {
        match self.nodes.get_mut(&ino).ok_or(Refusal::NotFound)? {
            Node::File(file) => file.mode = mode,
            Node::Directory(directory) => directory.mode = mode,
        }
        Ok(())
    }

    fn change(&mut self, ino: Ino, change: Change) -> Result<(), Refusal> {
        let file = self.file_mut(ino)?;
        change.apply(&mut file.current);
        file.since_sync.push(change);
        Ok(())
    }

    /// `fsync`, `fdatasync`: a file's content, or a directory's entries,
    /// become durable (a file's own entry does not: its directory's sync
    /// makes that durable).
    pub(crate) fn sync(&mut self, ino: Ino) -> Result<(), Refusal> {
        if let Some(name) = self.name_of(ino).cloned() {
            *self.syncs_by_name.entry(name).or_default() += 1;
        }
        match self.nodes.get_mut(&ino).ok_or(Refusal::NotFound)? {
            Node::File(file) => {
                // Applied rather than copied: a sync of a large WAL after one
                // small commit costs the commit, not the WAL.
                for change in file.since_sync.drain(..) {
                    change.apply(&mut file.durable);
                }
            }
            Node::Directory(directory) => directory.durable = directory.current.clone(),
        }
        self.syncs += 1;
        Ok(())
    }

    /// The disk as a power cut now could leave it, chosen by `seed`: all of
    /// it durable, nothing pending.
    pub(crate) fn power_cut(&self, seed: u64) -> Self {
        let mut rng = SplitMix(seed);
        let mut after = Self {
            nodes: HashMap::new(),
            next_ino: self.next_ino,
            syncs: 0,
            syncs_by_name: BTreeMap::new(),
        };
        let mut pending = vec![ROOT];
        while let Some(ino) = pending.pop() {
            let Some(Node::Directory(directory)) = self.nodes.get(&ino) else {
                continue;
            };
            let mut entries = surviving_entries(&directory.durable, &directory.current, &mut rng);
            entries.retain(|_, child| match self.nodes.get(child) {
                // A directory is reached through one entry at most (a rename
                // half kept could show it twice); a file may be reached
                // through two, as a hard link.
                Some(Node::Directory(_)) => {
                    let first = !after.nodes.contains_key(child) && !pending.contains(child);
                    if first {
                        pending.push(*child);
                    }
                    first
                }
                Some(Node::File(file)) => {
                    if !after.nodes.contains_key(child) {
                        let content = surviving_content(&file.durable, &file.since_sync, &mut rng);
                        after.nodes.insert(
                            *child,
                            Node::File(File {
                                durable: content.clone(),
                                current: content,
                                since_sync: Vec::new(),
                                mode: file.mode,
                            }),
                        );
                    }
                    true
                }
                None => false,
            });
            after.nodes.insert(
                ino,
                Node::Directory(Directory {
                    current: entries.clone(),
                    durable: entries,
                    mode: directory.mode,
                }),
            );
        }
        after
    }

    fn directory(&self, ino: Ino) -> Result<&Directory, Refusal> {
        match self.nodes.get(&ino).ok_or(Refusal::NotFound)? {
            Node::Directory(directory) => Ok(directory),
            Node::File(_) => Err(Refusal::NotADirectory),
        }
    }

    fn directory_mut(&mut self, ino: Ino) -> Result<&mut Directory, Refusal> {
        match self.nodes.get_mut(&ino).ok_or(Refusal::NotFound)? {
            Node::Directory(directory) => Ok(directory),
            Node::File(_) => Err(Refusal::NotADirectory),
        }
    }

    fn file(&self, ino: Ino) -> Result<&File, Refusal> {
        match self.nodes.get(&ino).ok_or(Refusal::NotFound)? {
            Node::File(file) => Ok(file),
            Node::Directory(_) => Err(Refusal::IsADirectory),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut File, Refusal> {
        match self.nodes.get_mut(&ino).ok_or(Refusal::NotFound)? {
            Node::File(file) => Ok(file),
            Node::Directory(_) => Err(Refusal::IsADirectory),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> &OsStr {
        OsStr::new(text)
    }

    fn content(disk: &Disk, parent: Ino, file: &str) -> Option<Vec<u8>> {
        let found = disk.lookup(parent, name(file)).ok()?;
        Some(disk.read(found.ino, 0, u32::MAX).unwrap().to_vec())
    }

    #[test]
    fn a_synced_file_in_a_synced_directory_survives_and_its_unsynced_tail_is_lost_kept_or_torn() {
        let mut disk = Disk::default();
        let dir = disk
            .create(ROOT, name("data"), Kind::Directory, 0o755)
            .unwrap();
        disk.sync(ROOT).unwrap();
        let file = disk
            .create(dir.ino, name("wal"), Kind::File, 0o644)
            .unwrap();
        disk.write(file.ino, 0, b"durable").unwrap();
        disk.sync(file.ino).unwrap();
        disk.sync(dir.ino).unwrap();
        disk.write(file.ino, 7, b" and more").unwrap();
        let mut lengths = BTreeSet::new();
        for seed in 0..64 {
            let after = disk.power_cut(seed);
            let data = after.lookup(ROOT, name("data")).unwrap();
            let kept = content(&after, data.ino, "wal").unwrap();
            assert!(kept.starts_with(b"durable"), "seed {seed}: {kept:?}");
            assert!(b"durable and more".starts_with(&kept), "seed {seed}");
            lengths.insert(kept.len());
        }
        assert!(
            lengths.contains(&7) && lengths.contains(&16) && lengths.len() > 2,
            "{lengths:?}"
        );
    }

    #[test]
    fn an_entry_never_synced_into_its_directory_may_be_gone_with_everything_under_it() {
        let mut disk = Disk::default();
        let dir = disk
            .create(ROOT, name("data"), Kind::Directory, 0o755)
            .unwrap();
        let file = disk.create(dir.ino, name("db"), Kind::File, 0o644).unwrap();
        disk.write(file.ino, 0, b"acknowledged").unwrap();
        disk.sync(file.ino).unwrap();
        disk.sync(dir.ino).unwrap();
        let gone = (0..32)
            .filter(|&seed| {
                let after = disk.power_cut(seed);
                match after.lookup(ROOT, name("data")) {
                    Ok(data) => {
                        assert_eq!(
                            content(&after, data.ino, "db").as_deref(),
                            Some(&b"acknowledged"[..])
                        );
                        false
                    }
                    Err(_) => true,
                }
            })
            .count();
        assert!(0 < gone && gone < 32, "gone after {gone} of 32 cuts");
    }

    #[test]
    fn a_rename_or_removal_not_synced_away_may_be_undone_and_a_synced_one_stays() {
        let mut disk = Disk::default();
        let partial = disk
            .create(ROOT, name("key.partial"), Kind::File, 0o600)
            .unwrap();
        disk.write(partial.ino, 0, b"secret").unwrap();
        disk.sync(partial.ino).unwrap();
        disk.sync(ROOT).unwrap();
        disk.rename((ROOT, name("key.partial")), (ROOT, name("key")), false)
            .unwrap();
        let outcomes: BTreeSet<(bool, bool)> = (0..32)
            .map(|seed| {
                let after = disk.power_cut(seed);
                (
                    content(&after, ROOT, "key").is_some(),
                    content(&after, ROOT, "key.partial").is_some(),
                )
            })
            .collect();
        // Each name's change is kept or lost on its own: either, both or
        // neither name may be there.
        assert_eq!(outcomes.len(), 4, "{outcomes:?}");
        disk.sync(ROOT).unwrap();
        for seed in 0..32 {
            let after = disk.power_cut(seed);
            assert_eq!(
                content(&after, ROOT, "key").as_deref(),
                Some(&b"secret"[..])
            );
            assert_eq!(content(&after, ROOT, "key.partial"), None);
        }
    }
}
