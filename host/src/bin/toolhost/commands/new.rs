use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// Create a new plugin project (Rust, with the toolhost SDK) that builds
/// with one command, anywhere, and passes `toolhost inspect`.
#[derive(Debug, clap::Args)]
pub struct New {
    /// Plugin name (lowercase letters, digits, '-', '_').
    name: String,
    /// Where to create it.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

impl New {
    pub fn run(self) -> Result<ExitCode> {
        let project = toolhost::scaffold::new_plugin(&self.dir, &self.name)?;
        let wasm = toolhost::scaffold::component_path(&project, &self.name);
        println!("created {}", project.display());
        println!(
            "build it:   (cd {} && cargo build --release --target {})",
            project.display(),
            toolhost::scaffold::TARGET
        );
        println!("check it:   toolhost inspect {}", wasm.display());
        println!("load it:    toolhost plugin add {}   (into a running `toolhost serve`)", wasm.display());
        Ok(ExitCode::SUCCESS)
    }
}
