use crate::args::RuntimeArgs;
use crate::output::{arg_summary, dur, ms, print_json, tier_name};
use anyhow::{Result, bail};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::Host;
use toolhost::budget::{Budget, Tier};
use toolhost::calibrate::{self, ProbeOutcome};
use toolhost::report::{BudgetReport, ToolDeclaration};

/// Show what a component is before loading it: digest, size, the
/// interfaces it imports (what it asks for), its exports, its tools, and
/// a speed badge measured by probing its idempotent tools.
#[derive(Debug, clap::Args)]
pub struct Inspect {
    /// The component file.
    file: PathBuf,
    /// Probes per idempotent tool for the speed badge (0: declared values only).
    #[arg(long, default_value_t = 5, value_name = "N")]
    probes: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Serialize)]
struct InspectedTool {
    #[serde(flatten)]
    declaration: ToolDeclaration,
    budget: BudgetReport,
    probe_note: Option<String>,
}

#[derive(Serialize)]
struct Report {
    file: String,
    name: String,
    sha256: String,
    size: usize,
    imports: Vec<String>,
    exports: Vec<String>,
    loadable: bool,
    error: Option<String>,
    tools: Vec<InspectedTool>,
}

impl Inspect {
    pub fn run(self) -> Result<ExitCode> {
        let builder = self.runtime.builder()?;
        let runtime = builder.runtime()?;
        let name = toolhost::runtime::plugin_name_from_path(&self.file);
        let bytes = toolhost::runtime::read_bounded(&self.file, runtime.limits().max_component_bytes)
            .map_err(|kind| toolhost::runtime::LoadError { plugin: name.clone(), kind })?;
        let compiled = runtime.compile(&name, &bytes)?;
        let (digest, size) = (compiled.digest.clone(), compiled.size);
        let (imports, exports) = (compiled.imports.clone(), compiled.exports.clone());
        let cfg = self.runtime.config.load()?;
        let host = Host::with_budget(runtime.clone(), Budget::new(cfg.budget.clone(), Vec::new()));
        let loaded =
            runtime.instantiate_compiled(compiled, Default::default()).map_err(|e| e.kind.to_string()).and_then(|p| {
                host.registry().add(Arc::new(p)).map_err(|e| e.to_string())?;
                Ok(())
            });
        let error = loaded.err();
        let probed =
            if error.is_none() && self.probes > 0 { calibrate::calibrate(&host, self.probes) } else { Vec::new() };
        let catalog = host.registry().snapshot();
        let tools: Vec<InspectedTool> = catalog
            .tools()
            .map(|t| {
                let probe_note = probed.iter().find(|p| p.tool == t.def.name).and_then(|p| match &p.outcome {
                    ProbeOutcome::Probed(_) => None,
                    ProbeOutcome::Skipped(why) => Some(format!("not probed: {why}")),
                    ProbeOutcome::Failed(why) => Some(format!("probe failed: {why}")),
                });
                InspectedTool {
                    declaration: (&t.def).into(),
                    budget: (&host.budget().status(&t.def)).into(),
                    probe_note,
                }
            })
            .collect();
        if self.json {
            print_json(&Report {
                file: self.file.display().to_string(),
                name: name.clone(),
                sha256: digest,
                size,
                imports,
                exports,
                loadable: error.is_none(),
                error: error.clone(),
                tools,
            })?;
            return Ok(if error.is_some() { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        }
        println!("file:    {}", self.file.display());
        println!("sha256:  {digest}");
        println!("size:    {size} bytes");
        println!("imports ({}):", imports.len());
        for i in &imports {
            println!("  {i}");
        }
        println!("exports ({}):", exports.len());
        for e in &exports {
            println!("  {e}");
        }
        if tools.is_empty() {
            println!("tools:   none");
        } else {
            println!("tools ({}):", tools.len());
            for t in &tools {
                let (d, b) = (&t.declaration, &t.budget);
                println!(
                    "  {}  p50 {}  max {}  {}{}  args: {}",
                    d.name,
                    ms(d.estimated_duration_ms),
                    ms(d.max_duration_ms),
                    if d.idempotent { "idempotent" } else { "not idempotent" },
                    if d.cacheable_seconds > 0 {
                        format!(", cacheable {}s", d.cacheable_seconds)
                    } else {
                        String::new()
                    },
                    arg_summary(&d.input_schema)
                );
                let probe_p50 = b.probe_p50_ms.map(|p| std::time::Duration::from_secs_f64(p / 1e3));
                println!(
                    "      tier {} ({}), badge {}, {}{}",
                    tier_name(b.tier),
                    b.tier_source,
                    b.badge.as_deref().unwrap_or("-"),
                    Tier::compatibility(b.tier),
                    probe_p50.map(|p| format!(", probed p50 {}", dur(Some(p)))).unwrap_or_default()
                );
                if let Some(n) = &t.probe_note {
                    println!("      {n}");
                }
                println!("      {}", d.description);
            }
        }
        match error {
            Some(e) => bail!("{name} cannot be loaded: {e}"),
            None => Ok(ExitCode::SUCCESS),
        }
    }
}
