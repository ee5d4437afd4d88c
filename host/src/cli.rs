//! Subcommands of the `toolhost` binary. `anyhow` lives here, at the edge.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use toolhost::Host;
use toolhost::registry::RegisteredTool;
use toolhost::runtime::{CompileCache, Limits, Runtime};
use toolhost::tool::{CallContext, Content, ToolOutput};

/// A WebAssembly plugin host for sandboxed LLM tools.
///
/// toolhost runs tools compiled to WASI preview-2 components (the built-in
/// dice roller and SRD rules lookup, plus any plugin you load) under hard
/// limits: fuel, an epoch deadline, memory and output caps, deny-by-default
/// capabilities.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    host: HostArgs,
    #[command(subcommand)]
    command: Command,
}

/// Options that shape the host every subcommand starts.
#[derive(Debug, Args)]
struct HostArgs {
    /// Load this plugin component too (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm", global = true)]
    plugins: Vec<PathBuf>,
    /// Do not load the built-in plugins.
    #[arg(long, global = true)]
    no_builtins: bool,
    /// Where compiled components are cached [default: $TOOLHOST_CACHE_DIR, $XDG_CACHE_HOME/toolhost or ~/.cache/toolhost].
    #[arg(long, value_name = "DIR", global = true)]
    cache_dir: Option<PathBuf>,
    /// Compile every component afresh and cache nothing.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Fuel (about one unit per wasm instruction) per call; 0 disables metering.
    #[arg(long, value_name = "UNITS", global = true)]
    fuel: Option<u64>,
    /// Linear memory limit per call, in MiB.
    #[arg(long, value_name = "MIB", global = true)]
    memory_mib: Option<usize>,
    /// Ceiling on any call's deadline, in milliseconds.
    #[arg(long, value_name = "MS", global = true)]
    timeout_ceiling_ms: Option<u64>,
    /// Floor under any call's deadline, in milliseconds (tools declaring less get this).
    #[arg(long, value_name = "MS", global = true)]
    timeout_floor_ms: Option<u64>,
    /// Largest result a call may return, in bytes.
    #[arg(long, value_name = "BYTES", global = true)]
    max_output_bytes: Option<usize>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every tool with its declared latency and arguments.
    Tools {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool and print its result on stdout.
    ///
    /// Exit status 0 on success; 1 with a message on stderr on any error
    /// (unknown tool, invalid arguments, tool failure, limit hit).
    Call {
        /// Tool name, as `toolhost tools` lists it.
        tool: String,
        /// Arguments as a JSON object; `-` reads them from stdin.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Print the whole result as JSON: every content block and the call's cost.
        #[arg(long)]
        json: bool,
    },
    /// Show what a component is before loading it: digest, size, the
    /// interfaces it imports (what it asks for), its exports and its tools.
    Inspect {
        /// The component file.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl HostArgs {
    fn limits(&self) -> Limits {
        let mut l = Limits::default();
        if let Some(f) = self.fuel {
            l.fuel = (f > 0).then_some(f);
        }
        if let Some(m) = self.memory_mib {
            l.memory_bytes = m << 20;
        }
        if let Some(ms) = self.timeout_ceiling_ms {
            l.timeout_ceiling = Duration::from_millis(ms);
        }
        if let Some(ms) = self.timeout_floor_ms {
            l.timeout_floor = Duration::from_millis(ms);
        }
        if let Some(b) = self.max_output_bytes {
            l.output_bytes = b;
        }
        l
    }

    fn runtime(&self) -> Result<Runtime> {
        let root = (!self.no_cache).then(|| self.cache_dir.clone().unwrap_or_else(CompileCache::default_root));
        Runtime::new(self.limits(), root.as_deref()).map_err(|e| anyhow::anyhow!("cannot start the wasm engine: {e:#}"))
    }

    fn host(&self) -> Result<Host> {
        let host = Host::new(self.runtime()?);
        if !self.no_builtins {
            host.add_builtins().context("loading the built-in plugins")?;
        }
        for p in &self.plugins {
            host.add_plugin_file(p)?;
        }
        Ok(host)
    }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Tools { json } => tools(&cli.host.host()?, json),
        Command::Call { tool, arguments, json } => call(&cli.host.host()?, &tool, &arguments, json),
        Command::Inspect { file, json } => inspect(&cli.host, &file, json),
    }
}

/// "expression*, seed": the argument names, required ones starred.
fn arg_summary(schema: &Value) -> String {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else { return String::new() };
    props
        .keys()
        .map(|k| if required.contains(&k.as_str()) { format!("{k}*") } else { k.clone() })
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(v: Option<u32>) -> String {
    v.map_or("-".into(), |v| format!("{v}ms"))
}

fn tool_json(t: &RegisteredTool) -> Value {
    json!({
        "name": t.def.name,
        "provider": t.provider.name(),
        "kind": t.provider.kind(),
        "description": t.def.description,
        "input_schema": t.def.input_schema,
        "estimated_duration_ms": t.def.meta.estimated_duration_ms,
        "max_duration_ms": t.def.meta.max_duration_ms,
        "idempotent": t.def.meta.idempotent,
        "cacheable_seconds": t.def.meta.cacheable_seconds,
    })
}

fn tools(host: &Host, as_json: bool) -> Result<ExitCode> {
    let catalog = host.registry().snapshot();
    if as_json {
        let list: Vec<Value> = catalog.tools().map(|t| tool_json(t)).collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 5]> = catalog
        .tools()
        .map(|t| {
            [
                t.def.name.clone(),
                t.provider.name().to_string(),
                ms(t.def.meta.estimated_duration_ms),
                ms(t.def.meta.max_duration_ms),
                arg_summary(&t.def.input_schema),
            ]
        })
        .collect();
    print_table(&["TOOL", "PROVIDER", "P50", "MAX", "ARGUMENTS (* required)"], &rows);
    Ok(ExitCode::SUCCESS)
}

fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn content_json(c: &Content) -> Value {
    use base64::Engine as _;
    let encode = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    match c {
        Content::Text(t) => json!({"type": "text", "text": t}),
        Content::Json(v) => json!({"type": "json", "json": v}),
        Content::Image { mime_type, data } => json!({"type": "image", "mime_type": mime_type, "data": encode(data)}),
        Content::Audio { mime_type, data } => json!({"type": "audio", "mime_type": mime_type, "data": encode(data)}),
    }
}

fn call(host: &Host, tool: &str, arguments: &str, as_json: bool) -> Result<ExitCode> {
    let raw = if arguments == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading arguments from stdin")?;
        s
    } else {
        arguments.to_string()
    };
    let args: Value = serde_json::from_str(&raw).with_context(|| format!("arguments are not valid JSON: {raw}"))?;
    let out: ToolOutput = host.call(tool, &args, &CallContext::default())?;
    if as_json {
        let v = json!({
            "content": out.content.iter().map(content_json).collect::<Vec<_>>(),
            "duration_ms": out.stats.duration.as_secs_f64() * 1000.0,
            "fuel_used": out.stats.fuel_used,
            "peak_memory_bytes": out.stats.peak_memory_bytes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    match &out.content[..] {
        [Content::Json(v)] => println!("{}", serde_json::to_string(v)?),
        blocks if blocks.iter().all(|b| matches!(b, Content::Text(_))) => {
            for b in blocks {
                if let Content::Text(t) = b {
                    println!("{t}");
                }
            }
        }
        blocks => println!("{}", serde_json::to_string(&blocks.iter().map(content_json).collect::<Vec<_>>())?),
    }
    Ok(ExitCode::SUCCESS)
}

fn inspect(args: &HostArgs, file: &std::path::Path, as_json: bool) -> Result<ExitCode> {
    let runtime = args.runtime()?;
    let name = toolhost::runtime::plugin_name_from_path(file);
    let bytes = toolhost::runtime::read_bounded(file, runtime.limits().max_component_bytes)
        .map_err(|kind| toolhost::runtime::LoadError { plugin: name.clone(), kind })?;
    let compiled = runtime.compile(&name, &bytes)?;
    let (digest, size) = (compiled.digest.clone(), compiled.size);
    let (imports, exports) = (compiled.imports.clone(), compiled.exports.clone());
    let loaded = runtime.instantiate_compiled(compiled);
    let (tools, error) = match &loaded {
        Ok(p) => (toolhost::tool::Provider::tools(p).to_vec(), None),
        Err(e) => (Vec::new(), Some(e.kind.to_string())),
    };
    if as_json {
        let v = json!({
            "file": file.display().to_string(),
            "name": name,
            "sha256": digest,
            "size": size,
            "imports": imports,
            "exports": exports,
            "loadable": error.is_none(),
            "error": error,
            "tools": tools.iter().map(|t| json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "estimated_duration_ms": t.meta.estimated_duration_ms,
                "max_duration_ms": t.meta.max_duration_ms,
                "idempotent": t.meta.idempotent,
                "cacheable_seconds": t.meta.cacheable_seconds,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("file:    {}", file.display());
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
                println!(
                    "  {}  p50 {}  max {}  {}{}  args: {}",
                    t.name,
                    ms(t.meta.estimated_duration_ms),
                    ms(t.meta.max_duration_ms),
                    if t.meta.idempotent { "idempotent" } else { "not idempotent" },
                    if t.meta.cacheable_seconds > 0 {
                        format!(", cacheable {}s", t.meta.cacheable_seconds)
                    } else {
                        String::new()
                    },
                    arg_summary(&t.input_schema)
                );
                println!("      {}", t.description);
            }
        }
    }
    match error {
        Some(e) if !as_json => bail!("{name} cannot be loaded: {e}"),
        Some(_) => Ok(ExitCode::FAILURE),
        None => Ok(ExitCode::SUCCESS),
    }
}
