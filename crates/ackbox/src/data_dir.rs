//! Where the embedded store lives when `--data-dir` is not given.
//!
//! `./ackbox-data` for someone trying ackbox from a project directory;
//! under systemd, the unit's `StateDirectory=` (systemd passes it as
//! `$STATE_DIRECTORY`, `/var/lib/ackbox`); and never the root directory,
//! which is where a service started without a working directory would
//! otherwise write its queues — there `serve` and `store` refuse, naming
//! the flag.

use std::path::{Path, PathBuf};

use anyhow::bail;

/// The data directory of a quick start, relative to where it runs.
pub(crate) const QUICK_START: &str = "./ackbox-data";

/// `given`, or the default for where the process runs; see the module.
pub(crate) fn resolve(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    default_for(
        given,
        std::env::var_os("STATE_DIRECTORY").as_deref(),
        &std::env::current_dir()?,
    )
}

fn default_for(
    given: Option<PathBuf>,
    state_directory: Option<&std::ffi::OsStr>,
    working_directory: &Path,
) -> anyhow::Result<PathBuf> {
    if let Some(given) = given {
        return Ok(given);
    }
    // One path per StateDirectory= entry, colon-separated: the first is ours.
    if let Some(state) = state_directory.and_then(|paths| std::env::split_paths(paths).next())
        && !state.as_os_str().is_empty()
    {
        return Ok(state);
    }
    if working_directory.parent().is_none() {
        bail!(
            "no --data-dir (ACKBOX_DATA_DIR) was given and the working directory is {}: ackbox \
             will not keep its queues there. Name a directory with --data-dir, or run it from \
             systemd with StateDirectory=ackbox (deploy/ackbox.service)",
            working_directory.display()
        );
    }
    Ok(PathBuf::from(QUICK_START))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn a_given_directory_wins_then_systemd_s_then_the_quick_start_s_but_never_the_root() {
        let project = Path::new("/home/dev/shop");
        let given = Some(PathBuf::from("/srv/queues"));
        let systemd = Some(OsStr::new("/var/lib/ackbox:/var/lib/other"));
        assert_eq!(
            default_for(given.clone(), systemd, Path::new("/")).unwrap(),
            PathBuf::from("/srv/queues")
        );
        assert_eq!(
            default_for(None, systemd, Path::new("/")).unwrap(),
            PathBuf::from("/var/lib/ackbox")
        );
        assert_eq!(
            default_for(None, None, project).unwrap(),
            PathBuf::from(QUICK_START)
        );
        let refusal = default_for(None, Some(OsStr::new("")), Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            refusal.contains("--data-dir") && refusal.contains("StateDirectory"),
            "{refusal}"
        );
    }
}
