use crate::args::ConfigArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::HostBuilder;

/// Pin the digest of every plugin file the config loads (plugins.files,
/// plugins.dir, --plugin) in the lock file; a different file is then refused.
#[derive(Debug, clap::Args)]
pub struct Lock {
    /// Pin this plugin file too (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm")]
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
        for f in &files {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let package = toolhost::package::parse(&bytes)?;
            let version = package.verify("").ok().flatten().map(|v| v.manifest.version);
            lock.plugins.insert(
                toolhost::runtime::plugin_name_from_path(f),
                toolhost::package::LockEntry { sha256: toolhost::package::component_digest(&bytes)?, version },
            );
        }
        lock.write(&path)?;
        println!("pinned {} plugin(s) in {}", lock.plugins.len(), path.display());
        Ok(ExitCode::SUCCESS)
    }
}
