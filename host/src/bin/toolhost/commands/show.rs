use crate::args::RegistryArgs;
use crate::output::print_json;
use anyhow::Result;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::ExitCode;
use toolhost::oci::{OciRef, annotations as ann};
use toolhost::tool::log_safe;

/// Describe a plugin in an OCI registry: name, version, author,
/// capabilities, declared latencies, digest (from the manifest's
/// annotations), then the signature inside the layer (pulled into the digest
/// cache) and whether this host trusts it. Exit 1 if this host would refuse it.
#[derive(Debug, clap::Args)]
pub struct Show {
    /// oci://HOST[:PORT]/REPO:TAG or oci://HOST[:PORT]/REPO@sha256:DIGEST.
    reference: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl Show {
    pub fn run(self) -> Result<ExitCode> {
        let r = OciRef::parse(&self.reference)?;
        let (policy, store) = self.registry.open(&r)?;
        let (digest, manifest) = store.manifest(&r)?;
        let a: BTreeMap<String, String> = manifest.annotations.clone().unwrap_or_default();
        let layer = &manifest.layers[0];
        // The signature decides, not the annotations: pull the layer (at the
        // digest just read) and check it.
        let fetched = store.fetch(&r.at_digest(&digest), None)?;
        let package = toolhost::package::parse(&fetched.bytes)?;
        let signature = package.verify(r.short_name());
        let name = match &signature {
            Ok(Some(v)) => v.manifest.name.clone(),
            _ => a.get(ann::TITLE).cloned().unwrap_or_else(|| r.short_name().to_string()),
        };
        let decision = policy.admit(&name, &fetched.bytes);
        // Annotations that disagree with the signed manifest.
        let mut disagree = Vec::new();
        if let Ok(Some(v)) = &signature {
            let m = &v.manifest;
            let checks = [
                (ann::TITLE, m.name.clone()),
                (ann::VERSION, m.version.clone()),
                (ann::AUTHORS, m.author.clone()),
                (ann::DESCRIPTION, m.description.clone()),
                (ann::CAPABILITIES, m.capabilities.join(",")),
                (ann::PUBLIC_KEY, v.public_key.clone()),
                (ann::KEY_ID, v.fingerprint()),
                (ann::COMPONENT_SHA256, toolhost::package::component_digest(&fetched.bytes).unwrap_or_default()),
            ];
            for (k, signed) in checks {
                if a.get(k).is_some_and(|claimed| *claimed != signed) {
                    disagree.push(k.to_string());
                }
            }
        }
        let get = |k: &str| a.get(k).map(|v| log_safe(v).into_owned());
        if self.json {
            print_json(&json!({
                "reference": r.to_string(),
                "digest": digest,
                "pinned": r.at_digest(&digest).to_string(),
                "layer": {"digest": layer.digest, "size": layer.size},
                "annotations": a,
                "signature": match &signature {
                    Ok(Some(v)) => json!({"valid": true, "manifest": v.manifest, "public_key": v.public_key, "key_id": v.fingerprint()}),
                    Ok(None) => json!({"valid": false, "reason": "not signed"}),
                    Err(e) => json!({"valid": false, "reason": e.to_string()}),
                },
                "annotations_disagree": disagree,
                "trusted": decision.is_ok(),
                "decision": match &decision { Ok((_, p)) => p.describe(), Err(e) => e.to_string() },
            }))?;
            return Ok(if decision.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!("reference:    {r}");
        println!("digest:       {digest}");
        println!("layer:        {} ({} bytes)", layer.digest, layer.size);
        println!("name:         {}", log_safe(&name));
        // Signed: the fields from the signed manifest. Otherwise only the
        // registry's word, and said so.
        match &signature {
            Ok(Some(v)) => {
                let m = &v.manifest;
                println!("version:      {}", log_safe(&m.version));
                println!("author:       {}", log_safe(&m.author));
                println!("description:  {}", log_safe(&m.description));
                let caps = if m.capabilities.is_empty() { "nothing".to_string() } else { m.capabilities.join(", ") };
                println!("asks for:     {caps}");
            }
            _ => {
                let claim = " (the registry's claim, not verified)";
                println!("version:      {}{claim}", or_dash(get(ann::VERSION)));
                println!("author:       {}{claim}", or_dash(get(ann::AUTHORS)));
                println!("description:  {}{claim}", or_dash(get(ann::DESCRIPTION)));
                let caps = get(ann::CAPABILITIES).filter(|c| !c.is_empty()).unwrap_or_else(|| "nothing".into());
                println!("asks for:     {caps}{claim}; `toolhost inspect` the pulled file for what it imports");
            }
        }
        let latencies: Vec<serde_json::Value> =
            a.get(ann::LATENCIES).and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
        let badges: BTreeMap<String, String> =
            a.get(ann::BADGE).and_then(|b| serde_json::from_str(b).ok()).unwrap_or_default();
        println!(
            "tools ({}, from the registry's annotations, not signed; `toolhost inspect` the pulled file for its own list):",
            latencies.len()
        );
        for t in &latencies {
            let tool = log_safe(t["name"].as_str().unwrap_or("?")).into_owned();
            let ms = |v: &serde_json::Value| v.as_u64().map_or("-".to_string(), |n| format!("{n} ms"));
            println!(
                "  {tool}  declared p50 {}  max {}  {}  badge {}",
                ms(&t["estimated_ms"]),
                ms(&t["max_ms"]),
                if t["idempotent"].as_bool() == Some(true) { "idempotent" } else { "not idempotent" },
                badges.get(&tool).map_or("-".to_string(), |b| log_safe(b).into_owned())
            );
        }
        match &signature {
            Ok(Some(v)) => {
                println!("signed by:    {} (key {}), signature valid", log_safe(&v.manifest.author), v.fingerprint())
            }
            Ok(None) => println!("signed by:    nobody (not signed)"),
            Err(e) => println!("signed by:    INVALID: {e}"),
        }
        if !disagree.is_empty() {
            println!(
                "  ! the annotations {} disagree with the signed manifest: believe the signature",
                disagree.join(", ")
            );
        }
        match &decision {
            Ok((_, p)) => println!("trusted here: yes: {}", p.describe()),
            Err(e) => println!("trusted here: no: {e}"),
        }
        Ok(if decision.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}
