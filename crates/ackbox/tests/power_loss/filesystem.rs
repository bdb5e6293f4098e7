//! The model [`Disk`] served to the kernel as a filesystem in userspace, so
//! that the real binary, and SQLite inside it, write to a disk that can
//! lose power.
//!
//! Writes go through to the model as they are made (no writeback cache,
//! which would hold them in the kernel, where a cut of the model cannot
//! reach) yet through the page cache (not `direct_io`), since SQLite maps
//! its WAL index (`-shm`) into memory. `fsync` and `fdatasync` reach the
//! model on files and on directories: a filesystem that answered them
//! `ENOSYS` would have the kernel report every later one a success. Locks
//! are not served: the kernel keeps POSIX and `flock` locks itself, which
//! is all one machine needs.
//!
//! [`MountedDisk::cut_power`] takes the disk away at one instant: from then
//! on every request fails with `EIO`, as a disk without power answers
//! nothing, so no sync issued after the cut can succeed.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

use super::disk::{Attributes, Disk, Kind, Refusal};

/// How long the kernel may trust an answer: nothing changes the model but
/// the kernel's own requests, and each cut comes with a new mount.
const TTL: Duration = Duration::from_secs(60);

/// The disk, or `None` once its power is cut.
type Power = Arc<Mutex<Option<Disk>>>;

fn lock(power: &Power) -> MutexGuard<'_, Option<Disk>> {
    power.lock().unwrap_or_else(PoisonError::into_inner)
}

fn errno(refusal: Refusal) -> Errno {
    match refusal {
        Refusal::NotFound => Errno::ENOENT,
        Refusal::Exists => Errno::EEXIST,
        Refusal::NotADirectory => Errno::ENOTDIR,
        Refusal::IsADirectory => Errno::EISDIR,
        Refusal::NotEmpty => Errno::ENOTEMPTY,
    }
}

fn file_attr(attributes: Attributes, request: &Request) -> FileAttr {
    let (kind, nlink) = match attributes.kind {
        Kind::File => (FileType::RegularFile, 1),
        Kind::Directory => (FileType::Directory, 2),
    };
    FileAttr {
        ino: INodeNo(attributes.ino),
        size: attributes.size,
        blocks: attributes.size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: attributes.mode,
        nlink,
        uid: request.uid(),
        gid: request.gid(),
        rdev: 0,
        blksize: 4_096,
        flags: 0,
    }
}

/// Mode bits without the file type.
fn permissions(mode: u32) -> u16 {
    u16::try_from(mode & 0o7777).unwrap_or(0o644)
}

/// Called with the disk as it stands just before each sync of a file or a
/// directory, under the disk's lock: a cut there is one a sync did not
/// prevent.
pub(crate) type BeforeSync = Box<dyn Fn(&Disk) + Send + Sync>;

/// The filesystem the kernel talks to.
struct PowerCutFilesystem {
    power: Power,
    before_sync: Option<BeforeSync>,
}

impl PowerCutFilesystem {
    /// Runs `operation` on the disk; `EIO` once the power is cut.
    fn on_disk<T>(
        &self,
        operation: impl FnOnce(&mut Disk) -> Result<T, Refusal>,
    ) -> Result<T, Errno> {
        let mut power = lock(&self.power);
        let disk = power.as_mut().ok_or(Errno::EIO)?;
        operation(disk).map_err(errno)
    }

    fn sync(&self, ino: INodeNo) -> Result<(), Errno> {
        self.on_disk(|disk| {
            if let Some(before_sync) = &self.before_sync {
                before_sync(disk);
            }
            disk.sync(ino.0)
        })
    }

    fn reply_entry(&self, request: &Request, reply: ReplyEntry, found: Result<Attributes, Errno>) {
        match found {
            Ok(attributes) => reply.entry(&TTL, &file_attr(attributes, request), Generation(0)),
            Err(error) => reply.error(error),
        }
    }

    fn reply_empty(reply: ReplyEmpty, done: Result<(), Errno>) {
        match done {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }
}

impl Filesystem for PowerCutFilesystem {
    fn lookup(&self, request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.on_disk(|disk| disk.lookup(parent.0, name));
        self.reply_entry(request, reply, found);
    }

    fn getattr(&self, request: &Request, ino: INodeNo, _: Option<FileHandle>, reply: ReplyAttr) {
        match self.on_disk(|disk| disk.attributes(ino.0)) {
            Ok(attributes) => reply.attr(&TTL, &file_attr(attributes, request)),
            Err(error) => reply.error(error),
        }
    }

    fn setattr(
        &self,
        request: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let changed = self.on_disk(|disk| {
            if let Some(size) = size {
                disk.set_len(ino.0, size)?;
            }
            if let Some(mode) = mode {
                disk.set_mode(ino.0, permissions(mode))?;
            }
            disk.attributes(ino.0)
        });
        match changed {
            Ok(attributes) => reply.attr(&TTL, &file_attr(attributes, request)),
            Err(error) => reply.error(error),
        }
    }

    fn mkdir(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let made =
            self.on_disk(|disk| disk.create(parent.0, name, Kind::Directory, permissions(mode)));
        self.reply_entry(request, reply, made);
    }

    fn unlink(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::reply_empty(
            reply,
            self.on_disk(|disk| disk.remove(parent.0, name, Kind::File)),
        );
    }

    fn rmdir(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::reply_empty(
            reply,
            self.on_disk(|disk| disk.remove(parent.0, name, Kind::Directory)),
        );
    }

    fn rename(
        &self,
        _: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        Self::reply_empty(
            reply,
            self.on_disk(|disk| {
                disk.rename((parent.0, name), (new_parent.0, new_name), no_replace)
            }),
        );
    }

    fn open(&self, _: &Request, ino: INodeNo, _: OpenFlags, reply: ReplyOpen) {
        match self.on_disk(|disk| disk.attributes(ino.0)) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(error) => reply.error(error),
        }
    }

    fn create(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.on_disk(|disk| disk.create(parent.0, name, Kind::File, permissions(mode))) {
            Ok(attributes) => reply.created(
                &TTL,
                &file_attr(attributes, request),
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(error) => reply.error(error),
        }
    }

    fn read(
        &self,
        _: &Request,
        ino: INodeNo,
        _: FileHandle,
        offset: u64,
        size: u32,
        _: OpenFlags,
        _: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.on_disk(|disk| disk.read(ino.0, offset, size).map(<[u8]>::to_vec)) {
            Ok(bytes) => reply.data(&bytes),
            Err(error) => reply.error(error),
        }
    }

    fn write(
        &self,
        _: &Request,
        ino: INodeNo,
        _: FileHandle,
        offset: u64,
        data: &[u8],
        _: WriteFlags,
        _: OpenFlags,
        _: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.on_disk(|disk| disk.write(ino.0, offset, data)) {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            Err(error) => reply.error(error),
        }
    }

    fn flush(&self, _: &Request, _: INodeNo, _: FileHandle, _: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _: &Request, ino: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        Self::reply_empty(reply, self.sync(ino));
    }

    fn readdir(
        &self,
        _: &Request,
        ino: INodeNo,
        _: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.on_disk(|disk| disk.entries(ino.0)) {
            Ok(entries) => entries,
            Err(error) => {
                reply.error(error);
                return;
            }
        };
        let dots = [
            (OsStr::new(".").to_owned(), ino.0, Kind::Directory),
            (OsStr::new("..").to_owned(), ino.0, Kind::Directory),
        ];
        let listed = dots.into_iter().chain(entries).enumerate();
        for (index, (name, child, kind)) in listed.skip(usize::try_from(offset).unwrap_or(0)) {
            let kind = match kind {
                Kind::File => FileType::RegularFile,
                Kind::Directory => FileType::Directory,
            };
            if reply.add(INodeNo(child), index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _: &Request, ino: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        Self::reply_empty(reply, self.sync(ino));
    }

    fn statfs(&self, _: &Request, _: INodeNo, reply: ReplyStatfs) {
        if lock(&self.power).is_none() {
            reply.error(Errno::EIO);
            return;
        }
        let blocks = 1 << 24;
        reply.statfs(blocks, blocks, blocks, 1 << 20, 1 << 20, 4_096, 255, 4_096);
    }
}

/// A [`Disk`] mounted at a directory, until it is unmounted or dropped.
pub(crate) struct MountedDisk {
    power: Power,
    session: Option<BackgroundSession>,
    mount_point: PathBuf,
}

impl MountedDisk {
    /// Serves `disk` at `mount_point` (an empty directory).
    pub(crate) fn mount(disk: Disk, mount_point: &Path) -> io::Result<Self> {
        Self::mount_watched(disk, mount_point, None)
    }

    /// As [`MountedDisk::mount`], calling `before_sync` before every sync.
    pub(crate) fn mount_watched(
        disk: Disk,
        mount_point: &Path,
        before_sync: Option<BeforeSync>,
    ) -> io::Result<Self> {
        let power = Arc::new(Mutex::new(Some(disk)));
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("ackbox-power-loss".to_owned()),
            MountOption::NoDev,
            MountOption::NoSuid,
            MountOption::NoAtime,
        ];
        // The server's writer, flusher and checkpointer ask at once.
        config.n_threads = Some(2);
        let filesystem = PowerCutFilesystem {
            power: Arc::clone(&power),
            before_sync,
        };
        let session = fuser::spawn_mount(filesystem, mount_point, &config)?;
        Ok(Self {
            power,
            session: Some(session),
            mount_point: mount_point.to_owned(),
        })
    }

    /// Looks at the disk; `None` once its power is cut.
    pub(crate) fn inspect<T>(&self, look: impl FnOnce(&Disk) -> T) -> Option<T> {
        lock(&self.power).as_ref().map(look)
    }

    /// Cuts the power now: the disk as the cut left it (chosen by `seed`);
    /// the mount answers `EIO` from here on.
    ///
    /// # Panics
    /// When the power was already cut.
    pub(crate) fn cut_power(&self, seed: u64) -> Disk {
        let live = lock(&self.power).take().expect("the power is on");
        live.power_cut(seed)
    }

    /// Unmounts, once nothing has a file open on the mount, and waits for
    /// the filesystem's threads: the kernel's page cache of this mount goes
    /// with it.
    ///
    /// # Panics
    /// When the mount stays busy.
    pub(crate) fn unmount(mut self) {
        self.unmount_now().expect("the power-cut disk unmounts");
    }

    fn unmount_now(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // A process killed a moment ago may still be letting go of its files.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut lazily = false;
        loop {
            let mut umount = Command::new("umount");
            if lazily {
                umount.arg("--lazy");
            }
            let output = umount.arg(&self.mount_point).output()?;
            if output.status.success() {
                break;
            }
            if lazily {
                return Err(io::Error::other(format!(
                    "umount {}: {}",
                    self.mount_point.display(),
                    String::from_utf8_lossy(&output.stderr)
                )));
            }
            lazily = Instant::now() > deadline;
            std::thread::sleep(Duration::from_millis(20));
        }
        session.join()
    }
}

impl Drop for MountedDisk {
    fn drop(&mut self) {
        if let Err(error) = self.unmount_now() {
            eprintln!("{}: {error}", self.mount_point.display());
        }
    }
}
