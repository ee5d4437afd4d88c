use crate::args::ConfigArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::HostBuilder;

/// Pin the digest of every plugin the config loads (plugins.files,
/// plugins.dir, --plugin) in the lock file; a different file is then
/// refused. A registry plugin (oci://) is resolved now and pinned by its
/// manifest digest too: it is then pulled at that digest only.
#[derive(Debug, clap::Args)]
pub struct Lock {
    /// Pin this plugin file too (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm|oci://...")]
    plugins: Vec<PathBuf>,
    #[command(flatten)]
    config: ConfigArgs,
}

impl Lock {
    pub fn run(self) -> Result<ExitCode> {
        let builder = HostBuilder::new(self.config.load()?).plugins(self.plugins);
        let path = builder.lock_path();
        let mut files = builder.plugin_files();
        if let Some(dir) = builder.plugins_dir() {
            files.extend(toolhost::plugin_files(&dir).unwrap_or_default());
        }
        let mut lock = toolhost::package::LockFile::default();
        let store = builder.oci_store()?;
        for f in &files {
            if let Some(text) = f.to_str().filter(|t| toolhost::oci::is_reference(t)) {
                let r = toolhost::oci::OciRef::parse(text)?;
                let fetched = store.fetch(&r, None)?;
                let package = toolhost::package::parse(&fetched.bytes)?;
                let verified = package.verify(r.short_name())?;
                let name = verified.as_ref().map_or_else(|| r.short_name().to_string(), |v| v.manifest.name.clone());
                lock.plugins.insert(
                    name,
                    toolhost::package::LockEntry {
                        sha256: toolhost::package::component_digest(&fetched.bytes)?,
                        version: verified.map(|v| v.manifest.version),
                        source: Some(r.to_string()),
                        digest: Some(fetched.digest.clone()),
                    },
                );
                continue;
            }
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let package = toolhost::package::parse(&bytes)?;
            let version = package.verify("").ok().flatten().map(|v| v.manifest.version);
            lock.plugins.insert(
                toolhost::runtime::plugin_name_from_path(f),
                toolhost::package::LockEntry {
                    sha256: toolhost::package::component_digest(&bytes)?,
                    version,
                    source: None,
                    digest: None,
                },
            );
        }
        lock.write(&path)?;
        println!("pinned {} plugin(s) in {}", lock.plugins.len(), path.display());
        Ok(ExitCode::SUCCESS)
    }
}
