use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// Create a new plugin project (Rust, with the toolhost SDK) that builds
/// with one command, anywhere, and passes `toolhost inspect --allow-unsigned`.
#[derive(Debug, clap::Args)]
pub struct New {
    /// Plugin name (lowercase letters, digits, '-', '_').
    name: String,
    /// Where to create it.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Start from a tool that calls a JSON API through wasi:http, its base
    /// URL from config and its key from a secret.
    #[arg(long)]
    http: bool,
}

impl New {
    pub fn run(self) -> Result<ExitCode> {
        let template = if self.http { toolhost::scaffold::Template::Http } else { toolhost::scaffold::Template::Plain };
        let project = toolhost::scaffold::new_plugin_from(&self.dir, &self.name, template)?;
        let wasm = toolhost::scaffold::component_path(&project, &self.name);
        println!("created {}", project.display());
        println!(
            "build it:   (cd {} && cargo build --release --target {})",
            project.display(),
            toolhost::scaffold::TARGET
        );
        println!("check it:   toolhost inspect --allow-unsigned {}   (not signed yet)", wasm.display());
        println!("load it:    toolhost plugin add {}   (into a running `toolhost serve`)", wasm.display());
        if self.http {
            println!(
                "then:       grant it plugins.grants.{n}.http and set its key: toolhost secret set {n} api_key < key.txt (see its README)",
                n = self.name
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
