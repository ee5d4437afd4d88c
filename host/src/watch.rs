//! Hot loading from a directory: a `.wasm` file dropped into the plugins
//! directory is loaded, a replaced one is swapped in, a removed one is
//! unloaded, while the host serves. Events are debounced (editors and `cp`
//! write in several steps); a file that fails to load (half written, corrupt,
//! refused by the trust policy) leaves the running version serving and is
//! logged with the reason. Drop files in with a rename for an atomic swap.

use crate::Host;
use crate::host::{is_plugin_file, plugin_files};
use notify::{RecursiveMode, Watcher as _};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long the watcher waits for a burst of events to settle.
const SETTLE: Duration = Duration::from_millis(200);

/// A running directory watch; dropping it stops watching.
pub struct DirWatch {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

/// Keeps the host in step with `dir`. With `load_existing`, loads the files
/// there now; without, takes them as already loaded (so removing one
/// unloads it).
pub fn watch_dir(host: Arc<Host>, dir: &Path, load_existing: bool) -> Result<DirWatch, notify::Error> {
    std::fs::create_dir_all(dir).map_err(notify::Error::io)?;
    let dir = dir.canonicalize().map_err(notify::Error::io)?;
    let mut loaded: HashMap<String, PathBuf> = HashMap::new();
    for p in plugin_files(&dir).map_err(notify::Error::io)? {
        if load_existing {
            apply(&host, &p, &mut loaded);
        } else {
            loaded.insert(crate::runtime::plugin_name_from_path(&p), p);
        }
    }
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // Only changes count: the watcher's own reads of a file (open,
        // access, close without writing) must not trigger another read.
        if let Ok(ev) = res.as_ref()
            && !is_change(&ev.kind)
        {
            return;
        }
        if let Ok(ev) = res {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    tracing::info!(dir = %dir.display(), "watching the plugins directory");
    std::thread::Builder::new()
        .name("toolhost-watch".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = BTreeSet::from([first]);
                while let Ok(p) = rx.recv_timeout(SETTLE) {
                    batch.insert(p);
                }
                for p in batch.into_iter().filter(|p| is_plugin_file(p)) {
                    apply(&host, &p, &mut loaded);
                }
            }
        })
        .map_err(notify::Error::io)?;
    Ok(DirWatch { _watcher: watcher })
}

/// Whether an event can mean a file's content or presence changed.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(notify::event::ModifyKind::Metadata(_)) => false,
        _ => true,
    }
}

fn apply(host: &Host, path: &Path, loaded: &mut HashMap<String, PathBuf>) {
    let name = crate::runtime::plugin_name_from_path(path);
    if path.exists() {
        match host.install_plugin_file(path) {
            Ok(i) => {
                tracing::info!(
                    plugin = %crate::tool::log_safe(&i.name),
                    tools = i.tools.len(),
                    replaced = i.replaced.is_some(),
                    "hot-loaded {:?}",
                    path
                );
                loaded.insert(name, path.to_path_buf());
            }
            Err(e) => {
                tracing::error!(file = ?path, "not loaded (the running version, if any, keeps serving): {}", crate::tool::log_safe(&e.to_string()))
            }
        }
    } else if loaded.get(&name).is_some_and(|p| p == path) {
        match host.uninstall_plugin(&name) {
            Ok(()) => {
                tracing::info!(plugin = %crate::tool::log_safe(&name), "unloaded: {path:?} was removed");
                loaded.remove(&name);
            }
            Err(e) => tracing::error!(plugin = %crate::tool::log_safe(&name), "unloading failed: {e}"),
        }
    }
}
