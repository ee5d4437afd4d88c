use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::scaffold::{Lang, Template};

/// Create a new plugin project that builds with one command, anywhere, and
/// passes `toolhost inspect --allow-unsigned`: Rust (the default), JavaScript,
/// TypeScript or Python, with the language's toolhost SDK vendored in it.
#[derive(Debug, clap::Args)]
pub struct New {
    /// Plugin name (lowercase letters, digits, '-', '_').
    name: String,
    /// Where to create it.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// The language: rust (cargo), js or ts (Node.js >= 20, componentize-js
    /// or -qjs, pinned npm packages), python (Python >= 3.10, componentize-py).
    #[arg(long, value_name = "LANG", default_value = "rust", value_parser = parse_lang)]
    lang: Lang,
    /// Start from a tool that calls a JSON API through wasi:http, its base
    /// URL from config and its key from a secret.
    #[arg(long)]
    http: bool,
}

fn parse_lang(s: &str) -> Result<Lang, String> {
    match s.to_ascii_lowercase().as_str() {
        "rust" | "rs" => Ok(Lang::Rust),
        "js" | "javascript" => Ok(Lang::Js),
        "ts" | "typescript" => Ok(Lang::Ts),
        "python" | "py" => Ok(Lang::Python),
        _ => Err(format!("{s:?} is not a language toolhost scaffolds: use rust, js, ts or python")),
    }
}

impl New {
    pub fn run(self) -> Result<ExitCode> {
        let template = if self.http { Template::Http } else { Template::Plain };
        let project = toolhost::scaffold::new_project(&self.dir, &self.name, self.lang, template)?;
        let wasm = toolhost::scaffold::component_path_of(&project, &self.name, self.lang);
        println!("created {}", project.display());
        println!("build it:   (cd {} && {})", project.display(), self.lang.build_command());
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
