//! A plugin's `offer` export: its resources, resource templates, prompts
//! and completions, as a [`toolhost_types::offer::Offering`] the MCP front
//! serves beside its tools.
//!
//! The lists are read once, at load, in one fresh instance under the call
//! limits (as `list-tools` is) and checked; each read, prompt and
//! completion runs in a fresh instance of its own, in one of the plugin's
//! slots, under its grants and limits, with what it says redacted of its
//! secrets.

use crate::bindings::exports::toolhost::plugin::offer::{
    Completion, CompletionRef, PromptInfo, PromptResult, ResourceInfo, ResourceTemplateInfo,
};
use crate::bindings::toolhost::plugin::types::{Content, EmbeddedResource, Icon, ResourceBody, Role, ToolError};
use crate::plugin::{redact_error, redacted};
use crate::{LoadErrorKind, WasmPlugin};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolhost_types::offer::{OfferHandle, OfferListing, Offering};
use toolhost_types::{CallContext, CallError};

/// The most resources, templates and prompts one plugin may list, each.
pub const MAX_LISTED: usize = 1000;
/// The longest URI, URI template or name listed, in bytes.
const MAX_URI_BYTES: usize = 4096;
/// The most completion values passed on.
const MAX_COMPLETIONS: usize = 100;

/// Reads and checks `plugin`'s offer, when it exports `offer`.
pub(crate) fn read(plugin: &WasmPlugin) -> Result<Option<Arc<OfferHandle>>, LoadErrorKind> {
    if !plugin.code.pre().offers() {
        return Ok(None);
    }
    let limits = plugin.runtime.limits_for(&plugin.name);
    let deadline = limits.deadlines().for_declared(Some(1000));
    let (lists, _, _, _) = plugin.run("list-resources", deadline, None, &limits, |instance, store| {
        let offer = instance.toolhost_plugin_offer().expect("it exports offer");
        let resources = offer.call_list_resources(&mut *store)?;
        let templates = offer.call_list_resource_templates(&mut *store)?;
        let prompts = offer.call_list_prompts(&mut *store)?;
        Ok((resources, templates, prompts))
    });
    let (resources, templates, prompts) = lists.map_err(LoadErrorKind::ListTools)?;
    let listing = listing(resources, templates, prompts)
        .map_err(|(what, reason)| LoadErrorKind::BadTool { tool: what, reason })?;
    Ok(Some(handle(plugin, listing, None)))
}

/// A handle serving `listing` by running `plugin` (the same code, grants
/// and slots), its prompts under `prefix` when it has one.
pub(crate) fn handle(plugin: &WasmPlugin, listing: OfferListing, prefix: Option<String>) -> Arc<OfferHandle> {
    Arc::new(OfferHandle::new(Arc::new(PluginOffering { plugin: runner(plugin), listing, prefix })))
}

/// A copy of `plugin` that runs its offer: the same code, grants and slots.
fn runner(plugin: &WasmPlugin) -> WasmPlugin {
    WasmPlugin {
        runtime: plugin.runtime.clone(),
        name: plugin.name.clone(),
        digest: plugin.digest.clone(),
        size: plugin.size,
        imports: plugin.imports.clone(),
        imported: plugin.imported,
        asks: plugin.asks,
        source: plugin.source,
        code: plugin.code.clone(),
        tools: Vec::new(),
        own_names: Default::default(),
        grants: plugin.grants.clone(),
        held: plugin.held,
        busy: plugin.busy.clone(),
        offer: None,
    }
}

impl WasmPlugin {
    /// Offers its prompts under `prefix` (`plugins.prefix.<plugin>`), as
    /// its tools are exposed under it.
    pub fn offer_under_prefix(&mut self, prefix: &str) {
        if let Some(old) = &self.offer {
            let offering = PluginOffering {
                plugin: runner(self),
                listing: old.offering.listing().clone(),
                prefix: Some(prefix.into()),
            };
            self.offer = Some(Arc::new(OfferHandle::new(Arc::new(offering))));
        }
    }
}

fn icons(icons: Vec<Icon>) -> Option<Value> {
    (!icons.is_empty()).then(|| {
        icons
            .into_iter()
            .map(|i| {
                let mut v = json!({"src": i.src});
                if let Some(m) = i.mime_type {
                    v["mimeType"] = json!(m);
                }
                if !i.sizes.is_empty() {
                    v["sizes"] = json!(i.sizes);
                }
                v
            })
            .collect()
    })
}

/// Sets `key` to `value` when there is one.
fn put(v: &mut Value, key: &str, value: Option<impl Into<Value>>) {
    if let Some(x) = value {
        v[key] = x.into();
    }
}

type Bad = (String, String);

fn check_name(what: &str, name: &str) -> Result<(), Bad> {
    if name.is_empty() || name.len() > MAX_URI_BYTES || name.chars().any(char::is_control) {
        return Err((
            format!("{what} {:?}", toolhost_types::log_safe(toolhost_types::cut_at(name, 80).0)),
            "is empty, too long or holds control characters".into(),
        ));
    }
    Ok(())
}

fn listing(
    resources: Vec<ResourceInfo>,
    templates: Vec<ResourceTemplateInfo>,
    prompts: Vec<PromptInfo>,
) -> Result<OfferListing, Bad> {
    for (what, n) in
        [("resources", resources.len()), ("resource templates", templates.len()), ("prompts", prompts.len())]
    {
        if n > MAX_LISTED {
            return Err((what.into(), format!("{n} listed (at most {MAX_LISTED})")));
        }
    }
    let mut out = OfferListing::default();
    for r in resources {
        check_name("resource", &r.uri)?;
        check_name("resource name", &r.name)?;
        if out.resources.iter().any(|x| x["uri"] == r.uri.as_str()) {
            return Err((format!("resource {}", r.uri), "listed twice".into()));
        }
        let mut v = json!({"uri": r.uri, "name": r.name});
        put(&mut v, "title", r.title);
        put(&mut v, "description", r.description);
        put(&mut v, "mimeType", r.mime_type);
        put(&mut v, "size", r.size);
        put(&mut v, "icons", icons(r.icons));
        out.resources.push(v);
    }
    for t in templates {
        check_name("resource template", &t.uri_template)?;
        check_name("resource template name", &t.name)?;
        let mut v = json!({"uriTemplate": t.uri_template, "name": t.name});
        put(&mut v, "title", t.title);
        put(&mut v, "description", t.description);
        put(&mut v, "mimeType", t.mime_type);
        put(&mut v, "icons", icons(t.icons));
        out.templates.push(v);
    }
    for p in prompts {
        if !toolhost_types::valid_tool_name(&p.name) {
            return Err((
                format!("prompt {:?}", toolhost_types::log_safe(&p.name)),
                format!("names must match {}", toolhost_types::TOOL_NAME_PATTERN),
            ));
        }
        if out.prompts.iter().any(|x| x["name"] == p.name.as_str()) {
            return Err((format!("prompt {}", p.name), "listed twice".into()));
        }
        let arguments: Vec<Value> = p
            .arguments
            .into_iter()
            .map(|a| {
                let mut v = json!({"name": a.name, "required": a.required});
                put(&mut v, "title", a.title);
                put(&mut v, "description", a.description);
                v
            })
            .collect();
        let mut v = json!({"name": p.name, "arguments": arguments});
        put(&mut v, "title", p.title);
        put(&mut v, "description", p.description);
        put(&mut v, "icons", icons(p.icons));
        out.prompts.push(v);
    }
    Ok(out)
}

/// A plugin's offer, served by running it.
#[derive(Debug)]
struct PluginOffering {
    plugin: WasmPlugin,
    listing: OfferListing,
    prefix: Option<String>,
}

fn role(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

impl PluginOffering {
    /// Runs `f` on the plugin's `offer` export as `what`, in a slot, under
    /// `deadline`; a tool error becomes the call error of its kind, with
    /// the plugin's secrets redacted from its words.
    fn run<R>(
        &self,
        what: &str,
        deadline: Duration,
        ctx: &CallContext,
        f: impl FnOnce(
            &crate::bindings::exports::toolhost::plugin::offer::Guest,
            &mut wasmtime::Store<crate::state::State>,
        ) -> wasmtime::Result<Result<R, ToolError>>,
    ) -> Result<R, CallError> {
        let plugin = &self.plugin;
        let limits = plugin.runtime.limits_for(&plugin.name);
        let deadline = limits.deadlines().deadline(Some(deadline), Some(deadline));
        let slot = plugin.slot(ctx, &limits, deadline)?;
        let deadline = deadline.saturating_sub(slot.waited());
        let (result, stats, secrets, _) = plugin.run(what, deadline, Some(ctx), &limits, |instance, store| {
            f(instance.toolhost_plugin_offer().expect("it exports offer"), store)
        });
        if let Some(cost) = &ctx.cost {
            cost.set(stats);
        }
        let tool = what.to_string();
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(match e {
                ToolError::InvalidInput(m) => CallError::InvalidInput { tool, message: redacted(m, &secrets) },
                ToolError::NotFound(m) => CallError::NotFound { tool, message: redacted(m, &secrets) },
                ToolError::Forbidden(m) => CallError::Forbidden { tool, message: redacted(m, &secrets) },
                ToolError::Failed(m) => redact_error(CallError::Failed { tool, message: m }, &secrets),
            }),
            Err(e) => Err(e),
        }
    }

    /// The answer's size checked against the output cap.
    fn capped(&self, what: &str, v: Value) -> Result<Value, CallError> {
        let limit = self.plugin.runtime.limits_for(&self.plugin.name).output_bytes;
        let size = serde_json::to_vec(&v).map_or(usize::MAX, |b| b.len());
        if size > limit {
            return Err(CallError::OutputTooLarge { tool: what.to_string(), size, limit });
        }
        Ok(v)
    }
}

fn b64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A prompt message's content as MCP's content block (a `json` block is
/// text: prompts carry no structured output).
fn mcp_content(c: Content) -> Value {
    match c {
        Content::Text(t) | Content::Json(t) => json!({"type": "text", "text": t}),
        Content::Image(m) => json!({"type": "image", "mimeType": m.mime_type, "data": b64(&m.data)}),
        Content::Audio(m) => json!({"type": "audio", "mimeType": m.mime_type, "data": b64(&m.data)}),
        Content::Resource(r) => json!({"type": "resource", "resource": resource_contents(r)}),
    }
}

fn resource_contents(r: EmbeddedResource) -> Value {
    let mut v = json!({"uri": r.uri});
    put(&mut v, "mimeType", r.mime_type);
    match r.body {
        ResourceBody::Text(t) => v["text"] = json!(t),
        ResourceBody::Blob(b) => v["blob"] = json!(b64(&b)),
    }
    v
}

impl Offering for PluginOffering {
    fn provider(&self) -> &str {
        &self.plugin.name
    }

    fn listing(&self) -> &OfferListing {
        &self.listing
    }

    fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    fn read(&self, uri: &str, deadline: Duration, ctx: &CallContext) -> Result<Value, CallError> {
        let what = format!("resources/read {}", toolhost_types::cut_at(uri, 200).0);
        let contents = self.run(&what, deadline, ctx, |offer, store| offer.call_read_resource(store, uri))?;
        let contents: Vec<Value> = contents.into_iter().map(resource_contents).collect();
        self.capped(&what, json!({"contents": contents}))
    }

    fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        deadline: Duration,
        ctx: &CallContext,
    ) -> Result<Value, CallError> {
        let what = format!("prompts/get {name}");
        let Some(prompt) = self.listing.prompts.iter().find(|p| p["name"] == name) else {
            return Err(CallError::NotFound { tool: what, message: format!("no prompt {name:?}") });
        };
        let declared = prompt["arguments"].as_array().map(Vec::as_slice).unwrap_or_default();
        for a in declared {
            let arg = a["name"].as_str().unwrap_or_default();
            if a["required"] == true && !arguments.contains_key(arg) {
                return Err(CallError::InvalidInput { tool: what, message: format!("argument {arg:?} is required") });
            }
        }
        let args: Vec<(String, String)> = arguments
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect();
        let result: PromptResult =
            self.run(&what, deadline, ctx, |offer, store| offer.call_get_prompt(store, name, &args))?;
        let messages: Vec<Value> = result
            .messages
            .into_iter()
            .map(|m| json!({"role": role(m.role), "content": mcp_content(m.content)}))
            .collect();
        let mut v = json!({"messages": messages});
        put(&mut v, "description", result.description);
        self.capped(&what, v)
    }

    fn complete(&self, params: &Value, deadline: Duration, ctx: &CallContext) -> Result<Value, CallError> {
        let reference = match params["ref"]["type"].as_str() {
            Some("ref/prompt") => CompletionRef::Prompt(params["ref"]["name"].as_str().unwrap_or_default().to_string()),
            _ => CompletionRef::ResourceTemplate(params["ref"]["uri"].as_str().unwrap_or_default().to_string()),
        };
        let argument = params["argument"]["name"].as_str().unwrap_or_default();
        let value = params["argument"]["value"].as_str().unwrap_or_default();
        let context: Vec<(String, String)> = params["context"]["arguments"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        let what = format!("completion/complete {argument}");
        let c: Completion = self.run(&what, deadline, ctx, |offer, store| {
            offer.call_complete(store, &reference, argument, value, &context)
        })?;
        let more = c.has_more || c.values.len() > MAX_COMPLETIONS;
        let values: Vec<String> = c.values.into_iter().take(MAX_COMPLETIONS).collect();
        let mut completion = json!({"values": values, "hasMore": more});
        put(&mut completion, "total", c.total);
        self.capped(&what, json!({"completion": completion}))
    }
}
