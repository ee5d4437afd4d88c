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
    /// The plugin's name, its identity on every host: grants, the lock file
    /// and replacement key on it, and the package loads only from a file
    /// named NAME.wasm [default: FILE's stem].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Write the package here instead of replacing FILE. Its file name must
    /// be NAME.wasm: writing elsewhere never renames a plugin.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl Sign {
    pub fn run(self) -> Result<ExitCode> {
        let key = toolhost::package::KeyPair::load(&self.key)?;
        let bytes = std::fs::read(&self.file).with_context(|| format!("reading {}", self.file.display()))?;
        let name = self.name.clone().unwrap_or_else(|| toolhost::runtime::plugin_name_from_path(&self.file));
        if !toolhost::tool::valid_tool_name(&name) {
            anyhow::bail!("{name:?} is not a valid plugin name (letters, digits, '_' and '-', 1 to 64 of them)");
        }
        if let Some(out) = &self.output {
            let stem = toolhost::runtime::plugin_name_from_path(out);
            if stem != name {
                anyhow::bail!(
                    "{} would hold plugin {name:?}, which loads only from a file named {name}.wasm; \
                     write it there, or sign it under another name with --name {stem}",
                    out.display()
                );
            }
        }
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
