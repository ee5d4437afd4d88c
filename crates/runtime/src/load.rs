//! Loading a plugin: why a component is refused ([`LoadError`]), where its
//! compiled code comes from (the build, the compile cache, or Cranelift
//! now), the checks against the `tool` world and the grants, and the tools
//! it lists.

use crate::bindings::{CONTRACT_VERSION, PluginPre, TOOL_INTERFACE};
use crate::capabilities::{self, CAPABILITIES};
use crate::plugin::{self, Compiled, WasmPlugin};
use crate::tiered::Code;
use crate::{CodeKind, CompileMode, FairSlots, Grants, Runtime, private};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use toolhost_types::{CallError, ToolDef};
use wasmtime::component::Component;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load plugin {plugin:?}: {kind}{}", grant_key(plugin, kind))]
pub struct LoadError {
    /// The plugin (file or built-in name) that failed.
    pub plugin: String,
    /// What was wrong.
    pub kind: LoadErrorKind,
}

/// For a capability not granted, the config key that grants it.
fn grant_key(plugin: &str, kind: &LoadErrorKind) -> String {
    match kind {
        LoadErrorKind::NotGranted { grant, .. } => format!(" (plugins.grants.{plugin}.{grant} grants it)"),
        _ => String::new(),
    }
}

/// What was wrong with a component.
#[derive(Debug, thiserror::Error)]
pub enum LoadErrorKind {
    /// The file could not be read.
    #[error("cannot read file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is larger than the operator allows.
    #[error("file is {size} bytes, over the {limit} byte limit for components")]
    TooLarge {
        /// File size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a regular file (a FIFO, device, socket or directory).
    #[error("not a regular file (FIFOs, devices and sockets are never read as plugins)")]
    NotAFile,
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    /// A core module, not a component.
    #[error(
        "this is a core WebAssembly module, not a component; build for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// wasmtime rejected the bytes (truncated, malformed, unsupported feature).
    #[error("invalid component: {0}")]
    Invalid(String),
    /// The component does not export the `tool` interface.
    #[error(
        "component does not implement the toolhost tool world: it must export {TOOL_INTERFACE}@{CONTRACT_VERSION}; it exports [{}]",
        exports.join(", ")
    )]
    WrongWorld {
        /// What it exports instead.
        exports: Vec<String>,
    },
    /// The component exports the `tool` interface at a version this host does not speak.
    #[error("component targets {found}; this host speaks {TOOL_INTERFACE}@0.1.x")]
    IncompatibleVersion {
        /// The export name found.
        found: String,
    },
    /// The component imports an interface the operator did not grant.
    #[error("component imports {interface}, which needs the {grant:?} capability; it was not granted")]
    NotGranted {
        /// The import.
        interface: String,
        /// The capability that would allow it.
        grant: &'static str,
    },
    /// The component imports something this host does not provide at all.
    #[error("component imports {0}, which this host does not provide")]
    UnknownImport(String),
    /// Linking or pre-instantiation failed.
    #[error("cannot link component: {0}")]
    Link(String),
    /// `list-tools` failed.
    #[error("list-tools failed: {0}")]
    ListTools(CallError),
    /// A tool declaration is unusable.
    #[error("tool {tool:?} is declared wrongly: {reason}")]
    BadTool {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// Where a load's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled with Cranelift now (and stored in the cache, if any).
    Compiled,
    /// Loaded from the on-disk cache.
    Cache,
    /// Deserialized from code precompiled when the binary was built (the
    /// built-in plugins, see [`Runtime::offer_precompiled`]).
    Precompiled,
}

/// Code compiled ahead of time, by the build, for a component embedded in
/// the binary.
///
/// Its integrity is the compile cache's guarantee: no native code runs
/// that this host's own build did not produce, for exactly the bytes being
/// loaded. The code and the component are both in the executable's
/// read-only data (whoever could change them could change the code that
/// would check them), and the code is used only for a component whose
/// sha256 is the one the build hashed.
#[derive(Debug, Clone, Copy)]
pub struct Precompiled {
    /// The component, as embedded.
    pub component: &'static [u8],
    /// Its sha256 (lowercase hex), computed by the build: the code is
    /// used only for bytes with this digest.
    pub component_sha256: &'static str,
    /// What `Engine::precompile_component` produced for them.
    pub artifact: &'static [u8],
}

impl Runtime {
    /// Compiles `bytes` (or loads the cached compilation) and checks what the
    /// component is, without reading its tools. Used by `inspect`.
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Compiled, LoadError> {
        let err = |kind| LoadError { plugin: name.to_string(), kind };
        let limit = self.inner.limits.load().max_component_bytes;
        if bytes.len() > limit {
            return Err(err(LoadErrorKind::TooLarge { size: bytes.len(), limit }));
        }
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(err(LoadErrorKind::NotWasm));
        }
        // Bytes 4..8: version and layer. Core modules are layer 0 (01 00 00 00);
        // components are layer 1 (0d 00 01 00).
        if bytes[6..8] == [0, 0] {
            return Err(err(LoadErrorKind::CoreModule));
        }
        // The embedded built-ins' digests are known (same bytes, same
        // binary); anything else is hashed.
        let digest = match self.embedded_digest(bytes) {
            Some(d) => d,
            None => hex::encode(Sha256::digest(bytes)),
        };
        let mode = self.inner.limits.load().compile;
        let (component, source, kind) = match self.precompiled(name, &digest) {
            Some(c) => (c, CompileSource::Precompiled, CodeKind::Optimized),
            None => self.cached_or_compiled(name, bytes, &digest, mode).map_err(err)?,
        };
        let (ty, engine) = (component.component_type(), component.engine());
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        // Fast code is optimized later, from these bytes.
        let fast_bytes = (kind == CodeKind::Fast && mode == CompileMode::FastFirst).then(|| Arc::<[u8]>::from(bytes));
        Ok(Compiled {
            name: name.to_string(),
            digest,
            size: bytes.len(),
            component,
            source,
            kind,
            fast_bytes,
            imports,
            exports,
        })
    }

    /// Deserializes code one of this runtime's engines compiled just now
    /// into `engine`: the runtime's own, or Winch's for its fast code
    /// (wasmtime checks the code's settings against `engine` first).
    pub(crate) fn deserialize_own(engine: &wasmtime::Engine, serialized: &[u8]) -> Result<Component, String> {
        // SAFETY: callers pass only what `precompile_component` of one of
        // this runtime's engines returned to them, unchanged, in memory:
        // native code this process produced, for an engine whose settings
        // wasmtime checks before loading it.
        #[allow(unsafe_code)]
        unsafe { Component::deserialize(engine, serialized) }.map_err(|e| format!("{e:#}"))
    }

    /// Runs `compile` for plugin `name` (`size` bytes), listed in
    /// [`Runtime::compiling_now`] and logged when it starts and ends
    /// (target `toolhost::compile`, on by default: a compile can take
    /// seconds, and the operator should not wonder why).
    pub(crate) fn compiling<T, E: std::fmt::Display>(
        &self,
        name: &str,
        size: usize,
        code: &'static str,
        compile: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        struct Listed<'a>(&'a Runtime, &'a str);
        impl Drop for Listed<'_> {
            fn drop(&mut self) {
                self.0.inner.compiling.lock().unwrap_or_else(|p| p.into_inner()).remove(self.1);
            }
        }
        let started = std::time::Instant::now();
        tracing::info!(target: "toolhost::compile", plugin = name, kib = size / 1024, code, "compiling plugin {name} (not in the compile cache; {code})");
        self.inner.compiling.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), started);
        let _listed = Listed(self, name);
        let result = compile();
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => {
                tracing::info!(target: "toolhost::compile", plugin = name, ms, code, "compile of plugin {name} done in {ms} ms ({code})")
            }
            Err(e) => {
                tracing::info!(target: "toolhost::compile", plugin = name, ms, code, "compile of plugin {name} failed after {ms} ms ({code}): {e:#}")
            }
        }
        result
    }

    /// The plugins being compiled now, each with how long it has taken so
    /// far, by name.
    pub fn compiling_now(&self) -> Vec<(String, std::time::Duration)> {
        let compiling = self.inner.compiling.lock().unwrap_or_else(|p| p.into_inner());
        compiling.iter().map(|(name, since)| (name.clone(), since.elapsed())).collect()
    }

    /// The build's digest of `bytes` when they are an embedded component
    /// offered with [`Runtime::offer_precompiled`] (the very same static
    /// bytes, not a copy).
    fn embedded_digest(&self, bytes: &[u8]) -> Option<String> {
        let offered = self.inner.precompiled.lock().unwrap_or_else(|p| p.into_inner());
        offered.values().find(|p| std::ptr::eq(p.component, bytes)).map(|p| p.component_sha256.to_string())
    }

    /// Offers code the build precompiled: a later [`Runtime::compile`] of
    /// exactly the component it was made from deserializes it instead of
    /// compiling (when wasmtime finds it compatible with this engine).
    pub fn offer_precompiled(&self, code: Precompiled) {
        self.inner
            .precompiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(code.component_sha256.to_string(), code);
    }

    /// The precompiled code offered for the component with sha256
    /// `digest`, deserialized; `None` (compile as usual) when none was
    /// offered, its bytes are not what the build hashed, or wasmtime finds
    /// it incompatible with this engine (another CPU, other settings).
    fn precompiled(&self, name: &str, digest: &str) -> Option<Component> {
        let code = *self.inner.precompiled.lock().unwrap_or_else(|p| p.into_inner()).get(digest)?;
        // SAFETY: the artifact is native code `Engine::precompile_component`
        // produced when this binary was built (crates/dist/build.rs), for
        // the component whose sha256 is `digest` (the bytes being loaded),
        // and is part of the executable (see `Precompiled`). wasmtime
        // checks its version and settings before use.
        #[allow(unsafe_code)]
        match unsafe { Component::deserialize(&self.inner.engine, code.artifact) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::info!(plugin = name, reason = %e, "the precompiled code does not fit this engine; compiling instead");
                None
            }
        }
    }

    /// Loads a plugin: compiles (or loads from cache), checks the world and
    /// imports, pre-instantiates, and reads its tools under the call limits.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<WasmPlugin, LoadError> {
        self.instantiate_compiled(self.compile(name, bytes)?, Grants::default())
    }

    /// [`Runtime::load`] with the operator's grants for this plugin.
    pub fn load_with(&self, name: &str, bytes: &[u8], grants: Grants) -> Result<WasmPlugin, LoadError> {
        self.instantiate_compiled(self.compile(name, bytes)?, grants)
    }

    /// Reads a component file and loads it without grants, naming the
    /// plugin after the file stem.
    pub fn load_file(&self, path: &std::path::Path) -> Result<WasmPlugin, LoadError> {
        let name = plugin_name_from_path(path);
        let bytes = read_bounded(path, self.inner.limits.load().max_component_bytes)
            .map_err(|kind| LoadError { plugin: name.clone(), kind })?;
        self.load_with(&name, &bytes, Grants::default())
    }

    /// Second half of [`Runtime::load`], for an already compiled component.
    pub fn instantiate_compiled(&self, compiled: Compiled, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        compiled.check_world().map_err(err)?;
        CAPABILITIES.check_imports(&compiled.imports, &grants).map_err(err)?;
        self.check_extensions(&compiled.imports).map_err(err)?;
        let mut plugin = self.prepare(&compiled, grants)?;
        plugin.tools = read_tools(&plugin).map_err(err)?;
        plugin.offer = crate::offer::read(&plugin).map_err(err)?;
        if let Some(bytes) = compiled.fast_bytes {
            self.optimize_later(&compiled.name, &compiled.digest, bytes, &plugin.code);
        }
        Ok(plugin)
    }

    /// Refuses imports of a capability whose host side is an
    /// [`Extension`] this runtime was not given.
    fn check_extensions(&self, imports: &[String]) -> Result<(), LoadErrorKind> {
        for import in imports {
            if let capabilities::ImportClass::Capability(c) = CAPABILITIES.classify(import)
                && c == toolhost_types::Capability::Http
                && !self.inner.extensions.iter().any(|e| e.capability() == c)
            {
                return Err(LoadErrorKind::UnknownImport(import.clone()));
            }
        }
        Ok(())
    }

    /// The same plugin under other grants (a config reload changed them):
    /// its imports checked against the new grants exactly as at load, a
    /// fresh pre-instantiation, the tools it listed at load kept. Calls
    /// already running finish under the grants they started with.
    pub fn regrant(&self, plugin: &WasmPlugin, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: plugin.name.to_string(), kind };
        CAPABILITIES.check_imports(&plugin.imports, &grants).map_err(err)?;
        // The same code (and its switch to optimized code, if pending):
        // what a call links to does not depend on its grants.
        let regranted = WasmPlugin {
            runtime: self.clone(),
            name: plugin.name.clone(),
            digest: plugin.digest.clone(),
            size: plugin.size,
            imported: plugin.imported,
            asks: plugin.asks,
            imports: plugin.imports.clone(),
            source: plugin.source,
            code: plugin.code.clone(),
            tools: plugin.tools.clone(),
            own_names: plugin.own_names.clone(),
            held: CAPABILITIES.held(&grants),
            grants,
            busy: FairSlots::new(self.limits_for(&plugin.name).plugin_concurrency),
            offer: None,
        };
        let offer = plugin.offer.as_ref().map(|o| {
            crate::offer::handle(&regranted, o.offering.listing().clone(), o.offering.prefix().map(str::to_string))
        });
        Ok(WasmPlugin { offer, ..regranted })
    }

    /// Describes a compiled component without loading it: its tools, read
    /// from its `list-tools` export in a fresh instance with no grant at
    /// all (empty environment, no directory, no socket, no memory store),
    /// under the usual fuel, deadline and memory limits. Its imports are
    /// not checked against any grant (a reviewer sees what a plugin asks
    /// for before granting it; see [`CapabilitySet::review`]), but what this
    /// host does not provide at all, and a component outside the `tool`
    /// world, are still refused. Nothing else of the component runs, and no
    /// plugin comes out of it: loading still goes through
    /// [`Runtime::instantiate_compiled`] and its grant check. Used by
    /// `toolhost inspect`.
    ///
    /// [`CapabilitySet::review`]: capabilities::CapabilitySet::review
    pub fn describe_compiled(&self, compiled: &Compiled) -> Result<Vec<ToolDef>, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        compiled.check_world().map_err(err)?;
        CAPABILITIES.check_supported(&compiled.imports).map_err(err)?;
        let plugin = self.prepare(compiled, Grants::default())?;
        read_tools(&plugin).map_err(err)
    }

    /// What a compiled component offers besides tools (its `offer`
    /// export's resources, templates and prompts; `None` without one),
    /// read as [`Runtime::describe_compiled`] reads its tools: in a fresh
    /// instance with no grant, under the call limits.
    pub fn describe_offer(
        &self,
        compiled: &Compiled,
    ) -> Result<Option<toolhost_types::offer::OfferListing>, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        compiled.check_world().map_err(err)?;
        CAPABILITIES.check_supported(&compiled.imports).map_err(err)?;
        let plugin = self.prepare(compiled, Grants::default())?;
        Ok(crate::offer::read(&plugin).map_err(err)?.map(|h| h.offering.listing().clone()))
    }

    /// Links and pre-instantiates a compiled component into a plugin with
    /// `grants` and no tools yet; checks nothing (the callers do).
    fn prepare(&self, compiled: &Compiled, grants: Grants) -> Result<WasmPlugin, LoadError> {
        let err = |kind| LoadError { plugin: compiled.name.clone(), kind };
        let pre = self
            .linker_for(compiled.component.engine())
            .instantiate_pre(&compiled.component)
            .map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        let pre = PluginPre::new(pre).map_err(|e| err(LoadErrorKind::Link(format!("{e:#}"))))?;
        Ok(WasmPlugin {
            runtime: self.clone(),
            name: Arc::from(compiled.name.as_str()),
            digest: compiled.digest.clone(),
            size: compiled.size,
            imported: CAPABILITIES.imported(&compiled.imports),
            asks: compiled.imports.iter().any(|i| i.starts_with("toolhost:plugin/client@")),
            imports: compiled.imports.clone(),
            source: compiled.source,
            code: Code::new(pre, compiled.kind),
            tools: Vec::new(),
            own_names: std::collections::HashMap::new(),
            held: CAPABILITIES.held(&grants),
            grants,
            busy: FairSlots::new(self.limits_for(&compiled.name).plugin_concurrency),
            offer: None,
        })
    }
}

/// Reads `plugin`'s tools from its `list-tools` export (a fresh instance
/// under the call limits) and checks each declaration.
fn read_tools(plugin: &WasmPlugin) -> Result<Vec<ToolDef>, LoadErrorKind> {
    let infos = plugin.list_tools().map_err(LoadErrorKind::ListTools)?;
    let mut tools: Vec<ToolDef> = Vec::with_capacity(infos.len());
    for info in infos {
        let def = plugin::tool_def(info).map_err(|(tool, reason)| LoadErrorKind::BadTool { tool, reason })?;
        if tools.iter().any(|t| t.name == def.name) {
            return Err(LoadErrorKind::BadTool { tool: def.name, reason: "declared twice".into() });
        }
        tools.push(def);
    }
    for name in plugin.long_running().map_err(LoadErrorKind::ListTools)? {
        match tools.iter_mut().find(|t| t.name == name) {
            Some(t) => t.meta.long_running = true,
            None => {
                let reason = "named by `long-running` but not one of the plugin's tools".into();
                return Err(LoadErrorKind::BadTool { tool: toolhost_types::log_safe(&name).into_owned(), reason });
            }
        }
    }
    Ok(tools)
}

/// Reads a regular file, refusing one larger than `limit` before reading it.
/// FIFOs, devices and sockets are refused without blocking (the file is
/// opened non-blocking and checked with `fstat` on the opened descriptor, so
/// what is checked is what is read), and the read itself stops at `limit`.
pub fn read_bounded(path: &std::path::Path, limit: usize) -> Result<Vec<u8>, LoadErrorKind> {
    use private::{LimitedReadError, Symlinks};
    let (f, md) = private::open_nonblocking(path, Symlinks::Follow)?;
    if !md.is_file() {
        return Err(LoadErrorKind::NotAFile);
    }
    private::read_limited(&f, &md, limit).map_err(|e| match e {
        LimitedReadError::TooLarge { size, limit } => LoadErrorKind::TooLarge { size: size as usize, limit },
        LimitedReadError::Io(e) => LoadErrorKind::Io(e),
    })
}

/// A plugin's name from its file name: the stem, e.g. `diceroller` for `diceroller.wasm`.
pub fn plugin_name_from_path(path: &std::path::Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}
