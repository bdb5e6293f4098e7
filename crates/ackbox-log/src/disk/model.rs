//! A disk that loses power: what a file holds is durable only up to its last
//! sync, and a file created or removed is durable only once its directory
//! is synced — POSIX's promise, and no more (the model LazyFS implements).
//!
//! [`ModelDisk::power_cut`] returns the disk as a power cut at that instant
//! could leave it, chosen by a seed: every directory as of its last sync,
//! each entry created or removed since kept or lost on its own; every file
//! as of its last sync plus some prefix of what was written to it since,
//! the last write of that prefix possibly torn at any byte. A directory
//! whose own entry did not survive is gone, and everything in it. A file
//! removed but not synced away may be back.
//!
//! [`ModelDisk::cut_before_operation`] arms the same cut to happen just
//! before a chosen change (any write, sync, creation or removal), so a test
//! can cut the power in the middle of anything, and still run on to see
//! what was acknowledged before it.
//!
//! [`ModelDisk::fill_up_at`] makes writes fail with `ENOSPC` once the disk
//! holds that many bytes.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::power_cut::{Change, SplitMix, surviving_content, surviving_entries};
use super::{Disk, DiskFile};

/// `ENOSPC`, as the kernel reports a full disk.
const NO_SPACE: i32 = 28;

/// An in-memory disk that can lose power. Clones share one disk.
#[derive(Debug, Clone)]
pub struct ModelDisk {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default, Clone)]
struct State {
    dirs: BTreeMap<PathBuf, Directory>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// Writes that would take the live files past this many bytes fail.
    capacity: Option<u64>,
    /// Syncs of files and directories so far.
    syncs: u64,
    /// Changes made so far (writes, syncs, creations, removals): a cut
    /// point can be any of them.
    operations: u64,
    /// Cut the power just before this operation, with this seed.
    trap: Option<(u64, u64)>,
    /// What the trap's cut left.
    trapped: Option<Box<State>>,
}

#[derive(Debug, Default, Clone)]
struct Directory {
    /// The entries as programs see them.
    current: BTreeMap<String, Entry>,
    /// The entries as of the directory's last sync.
    durable: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Debug, Default, Clone)]
struct Inode {
    /// The content as programs see it.
    current: Vec<u8>,
    /// The content as of the last sync.
    durable: Vec<u8>,
    /// What changed since the last sync, in order.
    since_sync: Vec<Change>,
}

fn split(path: &Path) -> io::Result<(&Path, String)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name.to_string_lossy().into_owned())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no entry", path.display()),
        )),
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl ModelDisk {
    /// An empty disk whose root directory (and its ancestors) exist and are
    /// durable.
    pub fn new(root: &Path) -> Self {
        let mut state = State::default();
        state.dirs.insert(root.to_owned(), Directory::default());
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes fail with `ENOSPC` once the live files would hold more than
    /// `bytes`; `None` lifts the limit.
    pub fn fill_up_at(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// File and directory syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// The disk as a power cut now could leave it, chosen by `seed`; this
    /// disk goes on unchanged (its writers are the crashed process's).
    pub fn power_cut(&self, seed: u64) -> Self {
        Self::from_state(cut(&self.lock(), seed))
    }

    /// Arms a power cut (as [`ModelDisk::power_cut`] with `seed`) just
    /// before change number `operation` (counting from 0); read what it
    /// left with [`ModelDisk::trapped`].
    pub fn cut_before_operation(&self, operation: u64, seed: u64) {
        let mut state = self.lock();
        state.trap = Some((operation, seed));
        state.trapped = None;
        state.check_trap();
    }

    /// What the armed cut left, once it happened.
    pub fn trapped(&self) -> Option<Self> {
        self.lock()
            .trapped
            .as_ref()
            .map(|state| Self::from_state((**state).clone()))
    }

    /// Changes made so far.
    pub fn operations(&self) -> u64 {
        self.lock().operations
    }

    fn from_state(state: State) -> Self {
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }
}

/// The state a power cut leaves, chosen by `seed`.
fn cut(state: &State, seed: u64) -> State {
    let mut rng = SplitMix(seed);
    let mut after = State {
        next_inode: state.next_inode,
        ..State::default()
    };
    // Directories that survive: reachable from a root through durable
    // entries. Roots are those without a parent in the model.
    let mut pending: Vec<PathBuf> = state
        .dirs
        .keys()
        .filter(|dir| {
            dir.parent()
                .is_none_or(|parent| !state.dirs.contains_key(parent))
        })
        .cloned()
        .collect();
    while let Some(dir) = pending.pop() {
        let Some(directory) = state.dirs.get(&dir) else {
            continue;
        };
        let entries = surviving_entries(&directory.durable, &directory.current, &mut rng);
        for (name, entry) in &entries {
            match entry {
                Entry::Dir => pending.push(dir.join(name)),
                Entry::File(inode) => {
                    if after.inodes.contains_key(inode) {
                        continue;
                    }
                    let Some(file) = state.inodes.get(inode) else {
                        continue;
                    };
                    let content = surviving_content(&file.durable, &file.since_sync, &mut rng);
                    after.inodes.insert(
                        *inode,
                        Inode {
                            durable: content.clone(),
                            current: content,
                            since_sync: Vec::new(),
                        },
                    );
                }
            }
        }
        after.dirs.insert(
            dir,
            Directory {
                current: entries.clone(),
                durable: entries,
            },
        );
    }
    after
}

impl State {
    /// Counts a change about to be made, cutting the power first if the
    /// armed trap says so.
    fn operation(&mut self) {
        self.check_trap();
        self.operations += 1;
    }

    fn check_trap(&mut self) {
        if let Some((operation, seed)) = self.trap
            && self.operations >= operation
            && self.trapped.is_none()
        {
            self.trapped = Some(Box::new(cut(self, seed)));
        }
    }

    fn live_bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        self.dirs
            .values()
            .flat_map(|dir| dir.current.values())
            .filter_map(|entry| match entry {
                Entry::File(inode) if seen.insert(*inode) => self.inodes.get(inode),
                _ => None,
            })
            .map(|inode| inode.current.len() as u64)
            .sum()
    }

    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let (parent, name) = split(path)?;
        self.dirs
            .get(parent)
            .and_then(|dir| dir.current.get(&name))
            .copied()
            .ok_or_else(|| not_found(path))
    }
}

impl Disk for ModelDisk {
    fn exists(&self, path: &Path) -> bool {
        let state = self.lock();
        state.dirs.contains_key(path) || state.entry(path).is_ok()
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.operation();
        let (parent, name) = split(dir)?;
        let parent = state
            .dirs
            .get_mut(parent)
            .ok_or_else(|| not_found(parent))?;
        if parent.current.contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                dir.display().to_string(),
            ));
        }
        parent.current.insert(name, Entry::Dir);
        state.dirs.insert(dir.to_owned(), Directory::default());
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.lock();
        let directory = state.dirs.get(dir).ok_or_else(|| not_found(dir))?;
        Ok(directory.current.keys().cloned().collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.lock();
        match state.entry(path)? {
            Entry::File(inode) => Ok(state.inodes[&inode].current.clone()),
            Entry::Dir => Err(io::Error::other(format!(
                "{} is a directory",
                path.display()
            ))),
        }
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = self.lock();
        state.operation();
        let (parent, name) = split(path)?;
        let inode = state.next_inode;
        let directory = state
            .dirs
            .get_mut(parent)
            .ok_or_else(|| not_found(parent))?;
        if directory.current.contains_key(&name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                path.display().to_string(),
            ));
        }
        directory.current.insert(name, Entry::File(inode));
        state.next_inode += 1;
        state.inodes.insert(inode, Inode::default());
        Ok(Arc::new(ModelFile {
            disk: self.clone(),
            inode,
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn DiskFile>> {
        match self.lock().entry(path)? {
            Entry::File(inode) => Ok(Arc::new(ModelFile {
                disk: self.clone(),
                inode,
            })),
            Entry::Dir => Err(io::Error::other(format!(
                "{} is a directory",
                path.display()
            ))),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.operation();
        let (parent, name) = split(path)?;
        let directory = state
            .dirs
            .get_mut(parent)
            .ok_or_else(|| not_found(parent))?;
        match directory.current.remove(&name) {
            Some(Entry::File(_)) => Ok(()),
            Some(entry) => {
                directory.current.insert(name, entry);
                Err(io::Error::other(format!(
                    "{} is a directory",
                    path.display()
                )))
            }
            None => Err(not_found(path)),
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.operation();
        let directory = state.dirs.get_mut(dir).ok_or_else(|| not_found(dir))?;
        directory.durable = directory.current.clone();
        state.syncs += 1;
        Ok(())
    }
}

/// An open file of a [`ModelDisk`].
#[derive(Debug)]
struct ModelFile {
    disk: ModelDisk,
    inode: u64,
}

impl ModelFile {
    fn change(&self, change: Change) -> io::Result<()> {
        let mut state = self.disk.lock();
        state.operation();
        if let (Some(capacity), Change::Write { offset, bytes }) = (state.capacity, &change) {
            let current = state.inodes[&self.inode].current.len() as u64;
            let growth = (offset + bytes.len() as u64).saturating_sub(current);
            if state.live_bytes() + growth > capacity {
                return Err(io::Error::from_raw_os_error(NO_SPACE));
            }
        }
        let inode = state
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("a file of another disk"))?;
        change.apply(&mut inode.current);
        inode.since_sync.push(change);
        Ok(())
    }
}

impl DiskFile for ModelFile {
    fn read_exact_at(&self, bytes: &mut [u8], offset: u64) -> io::Result<()> {
        let state = self.disk.lock();
        let content = &state.inodes[&self.inode].current;
        let end = offset as usize + bytes.len();
        let Some(source) = content.get(offset as usize..end) else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ));
        };
        bytes.copy_from_slice(source);
        Ok(())
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.change(Change::Write {
            offset,
            bytes: bytes.to_vec(),
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.disk.lock();
        state.operation();
        state.syncs += 1;
        let inode = state
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::other("a file of another disk"))?;
        inode.durable = inode.current.clone();
        inode.since_sync.clear();
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change(Change::SetLen(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        PathBuf::from("/model")
    }

    #[test]
    fn an_unsynced_file_or_entry_may_be_gone_after_a_cut_and_a_synced_one_stays() {
        let disk = ModelDisk::new(&root());
        let dir = root().join("data");
        crate::log::create_dir_durably(&disk, &dir).unwrap();
        let kept = disk.create_new(&dir.join("kept")).unwrap();
        kept.write_all_at(b"durable", 0).unwrap();
        kept.sync_data().unwrap();
        disk.sync_dir(&dir).unwrap();
        let unsynced_entry = disk.create_new(&dir.join("no-entry")).unwrap();
        unsynced_entry.write_all_at(b"data", 0).unwrap();
        unsynced_entry.sync_data().unwrap();
        kept.write_all_at(b" and more", 7).unwrap();
        let mut entry_lost = false;
        for seed in 0..64 {
            let after = disk.power_cut(seed);
            let names = after.list(&dir).unwrap();
            assert!(names.contains(&"kept".to_owned()), "seed {seed}: {names:?}");
            entry_lost |= !names.contains(&"no-entry".to_owned());
            let content = after.read(&dir.join("kept")).unwrap();
            assert!(content.starts_with(b"durable"), "seed {seed}: {content:?}");
            assert!(
                b"durable and more".starts_with(&content),
                "seed {seed}: {content:?}"
            );
        }
        assert!(
            entry_lost,
            "an entry never synced into its directory always survived"
        );
        // Across seeds, the unsynced tail is lost, kept and torn.
        let lengths: std::collections::BTreeSet<usize> = (0..64)
            .map(|seed| disk.power_cut(seed).read(&dir.join("kept")).unwrap().len())
            .collect();
        assert!(
            lengths.contains(&7) && lengths.contains(&16) && lengths.len() > 2,
            "{lengths:?}"
        );
    }

    #[test]
    fn a_directory_never_synced_into_its_parent_may_be_gone_with_its_files() {
        let disk = ModelDisk::new(&root());
        let dir = root().join("unsynced");
        disk.create_dir(&dir).unwrap();
        let file = disk.create_new(&dir.join("segment")).unwrap();
        file.write_all_at(b"acknowledged", 0).unwrap();
        file.sync_data().unwrap();
        disk.sync_dir(&dir).unwrap();
        let gone = (0..32)
            .filter(|&seed| {
                let after = disk.power_cut(seed);
                let survived = after.list(&dir).is_ok();
                if survived {
                    // Whatever survives of it is what was synced into it.
                    assert_eq!(after.read(&dir.join("segment")).unwrap(), b"acknowledged");
                }
                !survived
            })
            .count();
        assert!(
            gone > 0,
            "a directory never synced into its parent always survived"
        );
    }

    #[test]
    fn a_removal_not_synced_away_may_come_back_and_a_full_disk_refuses_writes() {
        let disk = ModelDisk::new(&root());
        let file = disk.create_new(&root().join("old")).unwrap();
        file.write_all_at(b"old", 0).unwrap();
        file.sync_data().unwrap();
        disk.sync_dir(&root()).unwrap();
        disk.remove(&root().join("old")).unwrap();
        let back = (0..32)
            .filter(|&seed| disk.power_cut(seed).read(&root().join("old")).is_ok())
            .count();
        assert!(0 < back && back < 32, "back after {back} of 32 cuts");
        disk.sync_dir(&root()).unwrap();
        assert!((0..32).all(|seed| disk.power_cut(seed).read(&root().join("old")).is_err()));

        let file = disk.create_new(&root().join("new")).unwrap();
        disk.fill_up_at(Some(10));
        file.write_all_at(b"0123456789", 0).unwrap();
        let full = file.write_all_at(b"!", 10).unwrap_err();
        assert_eq!(full.raw_os_error(), Some(NO_SPACE));
        disk.fill_up_at(None);
        file.write_all_at(b"!", 10).unwrap();
    }
}
