use crate::args::RuntimeArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::tool::Provider as _;

/// Sign a component: appends a manifest (name, version, author,
/// description, the capabilities its imports ask for, its sha256) and an
/// ed25519 signature, as a custom section. Replaces an earlier signature.
#[derive(Debug, clap::Args)]
pub struct Sign {
    /// The component file.
    file: PathBuf,
    /// The secret key file from `toolhost keygen`.
    #[arg(long, value_name = "FILE.key")]
    key: PathBuf,
    /// Plugin version.
    #[arg(long, value_name = "SEMVER", default_value = "0.1.0")]
    version: String,
    /// One-line description [default: the tools it provides].
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Write the package here instead of replacing FILE.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl Sign {
    pub fn run(self) -> Result<ExitCode> {
        let key = toolhost::package::KeyPair::load(&self.key)?;
        let bytes = std::fs::read(&self.file).with_context(|| format!("reading {}", self.file.display()))?;
        let name = toolhost::runtime::plugin_name_from_path(self.output.as_deref().unwrap_or(&self.file));
        // Load it (no grants) to read what it imports and provides: the
        // manifest states what the author built.
        let runtime = self.runtime.builder()?.runtime()?;
        let component = toolhost::package::parse(&bytes)?.component;
        let compiled = runtime.compile(&name, component)?;
        let caps: Vec<String> = toolhost::capabilities::CAPABILITIES
            .imported(&compiled.imports)
            .names()
            .into_iter()
            .map(str::to_string)
            .collect();
        let description = match self.description {
            Some(d) => d,
            None => match runtime.instantiate_compiled(compiled, Default::default()) {
                Ok(p) => format!("tools: {}", p.tools().iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")),
                Err(_) => String::new(),
            },
        };
        let (package, manifest) = key.sign(&bytes, &name, &self.version, &description, caps)?;
        let out = self.output.unwrap_or_else(|| self.file.clone());
        let tmp = out.with_extension("wasm.signing");
        std::fs::write(&tmp, &package)
            .and_then(|()| std::fs::rename(&tmp, &out))
            .with_context(|| format!("writing {}", out.display()))?;
        println!("signed {} as {} {} by {}", out.display(), manifest.name, manifest.version, manifest.author);
        println!("  sha256 {}", manifest.sha256);
        println!(
            "  asks for: {}",
            if manifest.capabilities.is_empty() { "nothing".into() } else { manifest.capabilities.join(", ") }
        );
        Ok(ExitCode::SUCCESS)
    }
}
