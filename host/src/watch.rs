//! Hot loading from a directory: a `.wasm` file dropped into the plugins
//! directory is loaded, a replaced one is swapped in, a removed one is
//! unloaded, while the host serves. Drop files in with a rename for an
//! atomic swap.
//!
//! Events are debounced by `notify-debouncer-mini` (editors and `cp` write
//! in several steps): a file is looked at once it has been quiet for
//! [`SETTLE`]. Looking at a file is one `stat`: its identity (device,
//! inode, size, modification and change times) is compared with the one
//! last seen, and only a file whose identity changed is read. So the
//! watcher's own reads, and anyone else's, never cause another read; a file
//! that failed to load (half written, corrupt, refused by the trust policy)
//! is logged once and not read again until it changes; and a plugin the
//! operator removed with `toolhost plugin remove` stays removed while its
//! file is unchanged (see [`crate::changes`]). With nothing happening in
//! the directory the watcher blocks: no timer, no reads.

use crate::Installer;
use crate::changes::FileStamp;
use crate::{is_plugin_file, plugin_files};
use notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, DebouncedEventKind, Debouncer};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a file must be quiet before it is looked at.
pub const SETTLE: Duration = Duration::from_millis(200);

/// A running directory watch; dropping it stops watching.
pub struct DirWatch {
    _debouncer: Debouncer<notify::RecommendedWatcher>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

/// What the watcher knows of the directory.
#[derive(Debug, Default)]
struct Seen {
    /// Plugins loaded from a file of the directory.
    loaded: HashMap<String, PathBuf>,
    /// Each file's identity when it was last looked at (loaded or not).
    files: HashMap<PathBuf, FileStamp>,
    /// Files read so far (for the tests' and the log's sake).
    reads: u64,
}

/// Keeps the host in step with `dir`. With `load_existing`, loads the files
/// there now; without, takes them as the host has them (loaded, refused or
/// removed by the operator: none is read again until it changes).
pub fn watch_dir(installer: Arc<Installer>, dir: &Path, load_existing: bool) -> Result<DirWatch, notify::Error> {
    std::fs::create_dir_all(dir).map_err(notify::Error::io)?;
    let dir = dir.canonicalize().map_err(notify::Error::io)?;
    let host = installer.clone();
    let mut seen = Seen::default();
    for p in plugin_files(&dir).map_err(notify::Error::io)? {
        if load_existing {
            seen.apply(&host, &p);
        } else {
            let name = crate::runtime::plugin_name_from_path(&p);
            if host.host().pipeline().registry().snapshot().provider(&name).is_some() {
                seen.loaded.insert(name, p.clone());
            }
            if let Some(stamp) = FileStamp::of(&p) {
                seen.files.insert(p, stamp);
            }
        }
    }
    let config = notify_debouncer_mini::Config::default().with_timeout(SETTLE).with_batch_mode(true);
    let mut debouncer = notify_debouncer_mini::new_debouncer_opt::<_, notify::RecommendedWatcher>(
        config,
        move |res: DebounceEventResult| match res {
            Ok(events) => {
                // A file still being written (`AnyContinuous`) is looked at
                // once it is quiet; each path once per batch, in order.
                let paths: BTreeSet<PathBuf> = events
                    .into_iter()
                    .filter(|e| e.kind == DebouncedEventKind::Any && is_plugin_file(&e.path))
                    .map(|e| e.path)
                    .collect();
                for p in paths {
                    seen.apply(&host, &p);
                }
            }
            Err(e) => tracing::warn!("watching the plugins directory: {e}"),
        },
    )?;
    debouncer.watcher().watch(&dir, RecursiveMode::NonRecursive)?;
    tracing::info!(dir = %dir.display(), "watching the plugins directory");
    Ok(DirWatch { _debouncer: debouncer })
}

impl Seen {
    fn apply(&mut self, installer: &Installer, path: &Path) {
        // Its records name the plugins directory as who asked.
        let actor = crate::audit::Actor::new(format!("plugins directory {}", path.display()), "watch");
        crate::audit::acting(actor, || self.apply_as_watch(installer, path));
    }

    fn apply_as_watch(&mut self, installer: &Installer, path: &Path) {
        let host = installer.host();
        let name = crate::runtime::plugin_name_from_path(path);
        let Some(stamp) = FileStamp::of(path) else {
            self.files.remove(path);
            if self.loaded.get(&name).is_some_and(|p| p == path) {
                self.loaded.remove(&name);
                if host.pipeline().registry().snapshot().provider(&name).is_none() {
                    return; // already removed by the operator
                }
                match installer.uninstall_plugin(&name) {
                    Ok(()) => tracing::info!(plugin = %crate::tool::log_safe(&name), "unloaded: {path:?} was removed"),
                    Err(e) => tracing::error!(plugin = %crate::tool::log_safe(&name), "unloading failed: {e}"),
                }
            }
            return;
        };
        if self.files.get(path) == Some(&stamp) {
            return; // unchanged since it was last looked at: not read again
        }
        self.files.insert(path.to_path_buf(), stamp);
        if installer.runtime_changes().is_removed(&name, Some(path)) {
            tracing::info!(plugin = %crate::tool::log_safe(&name), "not loaded: removed by `toolhost plugin remove` (add it again, or change {path:?}, to undo)");
            return;
        }
        self.reads += 1;
        match installer.install_plugin_file(path) {
            Ok(i) => {
                tracing::info!(
                    plugin = %crate::tool::log_safe(&i.name),
                    tools = i.tools.len(),
                    replaced = i.replaced.is_some(),
                    reads = self.reads,
                    "hot-loaded {:?}",
                    path
                );
                self.loaded.insert(name, path.to_path_buf());
            }
            Err(e) => {
                tracing::error!(file = ?path, "not loaded (the running version, if any, keeps serving; the file is read again when it changes): {}", crate::tool::log_safe(&e.to_string()))
            }
        }
    }
}
