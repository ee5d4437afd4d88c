use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;

/// Create a signing key pair for publishing plugins: NAME.key (secret,
/// mode 0600) and NAME.pub (goes into a host's trust.keys). Prints the
/// key's fingerprint (`ed25519:<16 hex digits> (NAME)`), as `verify`,
/// `show`, `inspect` and `grants` show it.
#[derive(Debug, clap::Args)]
pub struct Keygen {
    /// The author name written into every package signed with the key.
    name: String,
    /// Directory to write the files to.
    #[arg(long, value_name = "DIR", default_value = ".")]
    out: PathBuf,
}

impl Keygen {
    pub fn run(self) -> Result<ExitCode> {
        let key = toolhost::package::KeyPair::generate(&self.name)?;
        std::fs::create_dir_all(&self.out).with_context(|| format!("creating {}", self.out.display()))?;
        let stem = self.out.join(&self.name);
        key.save(&stem)?;
        println!(
            "wrote {} (secret: keep it private) and {}",
            stem.with_extension("key").display(),
            stem.with_extension("pub").display()
        );
        println!("key {}", key.public().fingerprint());
        println!(
            "Hosts that trust you add this to toolhost.yaml:\ntrust:\n  keys:\n    - name: {}\n      public_key: {}\n(or name the file: trust:\n  key_files: [{}])",
            self.name,
            key.public().public_key,
            stem.with_extension("pub").display()
        );
        Ok(ExitCode::SUCCESS)
    }
}
