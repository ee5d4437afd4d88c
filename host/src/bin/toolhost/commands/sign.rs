use crate::args::ConfigArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::tool::Provider as _;

/// Sign a component: appends a manifest (name, version, author,
/// description, the capabilities its imports ask for, its sha256, and what
/// it asks of the operator: origins, secrets, memory) and a signature over
/// it, as a custom section. Replaces an earlier signature.
///
/// Three ways to sign, one of them required. --key FILE.key: an ed25519 key
/// from `toolhost keygen`, which hosts trust in trust.keys. --sigstore:
/// keyless, through Sigstore: a short-lived certificate from Fulcio for your
/// OIDC identity, logged in Rekor; hosts trust the identity and its issuer
/// in trust.publishers. --sigstore-key FILE: Sigstore with your own ECDSA
/// P-256 key (PEM), logged in Rekor; hosts trust its public key
/// (trust.publishers, key_file).
///
/// Keyless signing needs an OIDC identity token with audience `sigstore`:
/// --identity-token or $SIGSTORE_ID_TOKEN, or, in a GitHub Actions job with
/// `id-token: write`, the job's own (found by itself). The public-good
/// instance (fulcio.sigstore.dev, rekor.sigstore.dev) is the default;
/// --fulcio-url and --rekor-url name another. The bundle is checked against
/// the trusted root before the file is written, when the root is known:
/// the public-good one, or trust.sigstore.trusted_root.
///
/// What a plugin asks for is shown by `inspect` and `verify`; the operator
/// decides. A host holds a plugin whose manifest names a secret not set
/// (`toolhost secret set`), and a new version asking to reach an origin
/// the running one did not ask for and its grants do not cover.
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Sign {
    /// The component file.
    file: PathBuf,
    /// The secret key file from `toolhost keygen` (ed25519).
    #[arg(long, value_name = "FILE.key", required_unless_present_any = ["sigstore", "sigstore_key"], conflicts_with_all = ["sigstore", "sigstore_key"])]
    key: Option<PathBuf>,
    /// Sign keyless through Sigstore, as your OIDC identity.
    #[arg(long, conflicts_with = "sigstore_key")]
    sigstore: bool,
    /// Sign through Sigstore with this ECDSA P-256 private key (PEM), logged
    /// in Rekor.
    #[arg(long, value_name = "FILE.pem")]
    sigstore_key: Option<PathBuf>,
    /// The OIDC identity token for --sigstore (audience `sigstore`).
    #[arg(long, value_name = "JWT", env = "SIGSTORE_ID_TOKEN", hide_env_values = true)]
    identity_token: Option<String>,
    /// Fulcio, for --sigstore.
    #[arg(long, value_name = "URL", default_value = toolhost::sigstore_signing::PUBLIC_FULCIO)]
    fulcio_url: String,
    /// Rekor, for --sigstore and --sigstore-key.
    #[arg(long, value_name = "URL", default_value = toolhost::sigstore_signing::PUBLIC_REKOR)]
    rekor_url: String,
    /// The author named in the manifest, for Sigstore signatures [default:
    /// the token's email (keyless), the key file's stem (keyed)].
    #[arg(long, value_name = "NAME")]
    author: Option<String>,
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
    /// An origin it sends HTTP requests to, as a grant names it
    /// (`https://api.open-meteo.com`, `https://*.wikipedia.org`); repeat
    /// for each.
    #[arg(long = "http-host", value_name = "ORIGIN")]
    http_hosts: Vec<String>,
    /// A secret it needs (`toolhost secret set PLUGIN NAME`); repeat for
    /// each. A host holds it until each is set.
    #[arg(long = "secret", value_name = "NAME")]
    secrets: Vec<String>,
    /// Memory per call it needs, MiB (the operator decides:
    /// `plugins.limits.<plugin>.memory_mib`).
    #[arg(long, value_name = "MIB")]
    memory_mib: Option<usize>,
    #[command(flatten)]
    config: ConfigArgs,
    /// Where compiled components are cached [default: $TOOLHOST_CACHE_DIR, $XDG_CACHE_HOME/toolhost or ~/.cache/toolhost].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

impl Sign {
    pub fn run(self) -> Result<ExitCode> {
        let key = self.key.as_deref().map(toolhost::package::KeyPair::load).transpose()?;
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
        let mut builder = toolhost::HostBuilder::new(self.config.load()?);
        // Read with the memory it asks for, when more than the config's.
        let limits = &mut builder.config_mut().limits;
        limits.memory_mib = limits.memory_mib.max(self.memory_mib);
        let cache = self.cache_dir.clone().map_or(toolhost::CacheChoice::Default, toolhost::CacheChoice::Dir);
        let builder = builder.cache(cache);
        let runtime = builder.runtime()?;
        let component = toolhost::package::parse(&bytes)?.component;
        let compiled = runtime.compile(&name, component)?;
        // What it asks for, as `inspect` says it: its imports, less those
        // that expose nothing without a grant (the standard library's
        // environment and filesystem), which are inert, not asks.
        let own = toolhost::capabilities::CAPABILITIES.review(&compiled.imports, Default::default());
        let caps: Vec<String> = own.asks.names().into_iter().map(str::to_string).collect();
        let imports_http =
            toolhost::capabilities::CAPABILITIES.imported(&compiled.imports).contains(toolhost::tool::Capability::Http);
        let mut http_hosts = Vec::new();
        for h in &self.http_hosts {
            toolhost::tool::origin::HttpGrant::parse(h).map_err(|e| anyhow::anyhow!("--http-host {h:?}: {e}"))?;
            http_hosts.push(h.trim().trim_end_matches('/').to_string());
        }
        if !http_hosts.is_empty() && !imports_http {
            anyhow::bail!(
                "--http-host: {} does not import wasi:http, so it can reach no origin; leave --http-host out",
                self.file.display()
            );
        }
        if http_hosts.is_empty() && imports_http {
            eprintln!(
                "note: it imports wasi:http; name the origins it reaches with --http-host so reviewers and hosts see them"
            );
        }
        for s in &self.secrets {
            toolhost::secrets::check_name("--secret", s)?;
        }
        if self.memory_mib == Some(0) {
            anyhow::bail!("--memory-mib must be at least 1");
        }
        let asks = toolhost::package::Asks { http_hosts, secrets: self.secrets.clone(), memory_mib: self.memory_mib };
        let description = match self.description.clone() {
            Some(d) => d,
            None => match runtime.instantiate_compiled(compiled, Default::default()) {
                Ok(p) => format!("tools: {}", p.tools().iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")),
                Err(_) => String::new(),
            },
        };
        let (package, manifest) = match &key {
            Some(key) => key.sign_with_asks(&bytes, &name, &self.version, &description, caps, asks)?,
            None => self.sign_sigstore(&builder, &bytes, &name, &description, caps, asks)?,
        };
        let out = self.output.unwrap_or_else(|| self.file.clone());
        let tmp = out.with_extension("wasm.signing");
        std::fs::write(&tmp, &package)
            .and_then(|()| std::fs::rename(&tmp, &out))
            .with_context(|| format!("writing {}", out.display()))?;
        println!("signed {} as {} {} by {}", out.display(), manifest.name, manifest.version, manifest.author);
        if let Ok(Some(v)) = toolhost::package::parse(&package).and_then(|p| p.verify(&name))
            && let Some(b) = &v.bundle
        {
            let entry = &b.verification_material.tlog_entries[0];
            println!("  through Sigstore: logged in {} at index {}", self.rekor_url, entry.log_index);
        }
        println!("  component sha256 {}", manifest.sha256);
        println!(
            "  asks for: {}",
            if manifest.capabilities.is_empty() { "nothing".into() } else { manifest.capabilities.join(", ") }
        );
        if !own.inert.is_empty() {
            println!("  inert:    {} (imported, but nothing is exposed without a grant)", own.inert.names().join(", "));
        }
        for ask in manifest.asks_in_words() {
            println!("  asks {ask}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl Sign {
    /// The manifest signed through Sigstore (keyless or keyed).
    fn sign_sigstore(
        &self,
        builder: &toolhost::HostBuilder,
        bytes: &[u8],
        name: &str,
        description: &str,
        caps: Vec<String>,
        asks: toolhost::package::Asks,
    ) -> Result<(Vec<u8>, toolhost::package::Manifest)> {
        use toolhost::sigstore_signing as signing;
        let at = signing::Instance { fulcio: self.fulcio_url.clone(), rekor: self.rekor_url.clone() };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (manifest, text, bundle) = match &self.sigstore_key {
            Some(file) => {
                let pem = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
                let key = signing::SigningKey::from_pem(&pem, &file.display().to_string())?;
                let author = self.author.clone().unwrap_or_else(|| toolhost::runtime::plugin_name_from_path(file));
                let (manifest, text) =
                    toolhost::package::Manifest::prepare(bytes, name, &self.version, &author, description, caps, asks)?;
                let bundle = rt.block_on(signing::sign_with_key(text.as_bytes(), &key, &at))?;
                (manifest, text, bundle)
            }
            None => {
                let token = match &self.identity_token {
                    Some(t) => t.trim().to_string(),
                    None => rt.block_on(signing::ambient_token())?.ok_or_else(|| {
                        anyhow::anyhow!(
                            "--sigstore needs an OIDC identity token (audience `sigstore`): pass --identity-token or set SIGSTORE_ID_TOKEN; in GitHub Actions, give the job `permissions: id-token: write`"
                        )
                    })?,
                };
                let claims = signing::TokenClaims::read(&token)?;
                let author = self.author.clone().unwrap_or_else(|| claims.identity().to_string());
                let (manifest, text) =
                    toolhost::package::Manifest::prepare(bytes, name, &self.version, &author, description, caps, asks)?;
                let bundle = rt.block_on(signing::sign_keyless(text.as_bytes(), &token, &at))?;
                (manifest, text, bundle)
            }
        };
        // Checked before anything is written, when the instance's root is known.
        // Keyed signing uses Rekor only.
        let keyed = self.sigstore_key.is_some();
        let public = (keyed || at.fulcio == signing::PUBLIC_FULCIO) && at.rekor == signing::PUBLIC_REKOR;
        if public || builder.config().trust.sigstore.trusted_root.is_some() {
            let root = builder.trust()?.sigstore_root();
            toolhost::sigstore::verify(&bundle, text.as_bytes(), &root).map_err(|e| {
                // Another root explains an untrusted log or chain, not an expired certificate.
                let hint = !public
                    && matches!(
                        e,
                        toolhost::sigstore::SigstoreError::Log(_) | toolhost::sigstore::SigstoreError::Certificate(_)
                    );
                anyhow::anyhow!(
                    "the bundle Sigstore returned does not verify, so hosts would refuse it: {e}{}",
                    if hint { " (is trust.sigstore.trusted_root this instance's root?)" } else { "" }
                )
            })?;
        } else {
            eprintln!(
                "note: not checked here: no trusted root for {} (set trust.sigstore.trusted_root to check before writing)",
                if keyed { &at.rekor } else { &at.fulcio }
            );
        }
        Ok((toolhost::package::with_sigstore(bytes, &text, bundle)?, manifest))
    }
}
