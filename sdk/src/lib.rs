//! Write toolhost plugins in a few lines.
//!
//! A toolhost plugin is a WebAssembly component (`wasm32-wasip2`) that exports
//! the `toolhost:plugin/tool` interface of the repository's `wit/tool.wit`.
//! This crate hides that contract: implement [`Tool`] for a type per tool,
//! list the types in [`plugin!`], and the crate does the rest:
//!
//! - `list-tools` is built from each tool's constants, with the JSON Schema of
//!   its arguments derived from the [`Tool::Args`] type by `schemars`
//!   (draft 2020-12, self-contained; doc comments on fields become
//!   `description`s the model reads);
//! - `call` is dispatched by tool name; the arguments are deserialized with
//!   `serde_json`, and a mismatch becomes [`ToolError::InvalidInput`] naming
//!   the offending field;
//! - the component's exports are generated (only when compiling for
//!   `wasm32`, so the same crate builds and unit-tests natively).
//!
//! [`log`] and [`progress`] talk to the host while a call runs.
//!
//! # Example
//!
//! A complete plugin crate (`crate-type = ["cdylib"]`, depending on
//! `toolhost-sdk`, `serde` with `derive` and `schemars`):
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use toolhost_sdk::{Output, Tool, ToolError};
//!
//! /// The arguments of `greet`. Doc comments end up in the JSON Schema.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)] // the schema then says "additionalProperties": false
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//!     /// End the greeting with an exclamation mark.
//!     #[serde(default)]
//!     excited: bool,
//! }
//!
//! /// What `greet` returns, as a JSON content block.
//! #[derive(Serialize)]
//! struct Greeting {
//!     message: String,
//! }
//!
//! struct Greet;
//!
//! impl Tool for Greet {
//!     type Args = GreetArgs;
//!     const NAME: &'static str = "greet";
//!     const DESCRIPTION: &'static str = "Greets someone by name.";
//!     const ESTIMATED_MS: u32 = 1;
//!     const MAX_MS: u32 = 10;
//!     const IDEMPOTENT: bool = true;
//!
//!     fn call(args: GreetArgs) -> Result<Output, ToolError> {
//!         if args.name.trim().is_empty() {
//!             return Err(ToolError::invalid_input("name must not be blank"));
//!         }
//!         toolhost_sdk::log::debug(format_args!("greeting {}", args.name));
//!         let end = if args.excited { "!" } else { "." };
//!         Output::json(&Greeting { message: format!("Hello, {}{end}", args.name) })
//!     }
//! }
//!
//! // Implements and exports the component's `tool` interface.
//! toolhost_sdk::plugin!(Greet);
//!
//! # fn main() {
//! // Natively, the same code is testable through `invoke` and `describe`.
//! let out = toolhost_sdk::invoke::<Greet>(r#"{"name":"Ada"}"#).unwrap();
//! assert_eq!(out, [toolhost_sdk::Content::Json(r#"{"message":"Hello, Ada."}"#.into())]);
//! let err = toolhost_sdk::invoke::<Greet>(r#"{"name":5}"#).unwrap_err();
//! assert!(err.message().contains("`name`"), "{err}");
//! assert_eq!(toolhost_sdk::describe::<Greet>().name, "greet");
//! # }
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`; the
//! component is `target/wasm32-wasip2/release/<crate_name>.wasm`. Check it
//! with `toolhost inspect` and call it with
//! `toolhost --plugin <file> call greet '{"name":"Ada"}'`. `toolhost new NAME`
//! creates such a project.
//!
//! # Notes
//!
//! - Every call runs in a fresh instance: keep no state between calls.
//! - The host validates arguments against the schema before the plugin runs,
//!   so deserialization errors are rare (custom `Deserialize` impls,
//!   `#[serde(try_from)]` ...); they are reported the same way.
//! - The arguments schema must describe a JSON object (a struct with named
//!   fields, or [`NoArgs`]); the host refuses any other at load time.
//! - This crate targets the `plugin` world (pure computation plus the host's
//!   logging). Plugins of the `memory-plugin` world use `wit-bindgen`
//!   directly, as `plugins/memorytool` does.

pub mod log;

/// The bindings `wit-bindgen` generates from `wit/tool.wit` (world `plugin`).
///
/// Used by [`plugin!`]; plugin code does not need it.
#[doc(hidden)]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::toolhost::plugin::types::{Content, EmbeddedResource, Media, ResourceBody, ToolError, ToolInfo};
pub use log::progress;
pub use schemars::{self, JsonSchema};
pub use serde;
pub use serde_json;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One tool: its name, description, latency metadata, typed arguments and
/// behaviour. Implement it on a unit struct and list the struct in [`plugin!`].
///
/// The latency constants feed the host's budget: a tool is placed in a latency
/// tier by [`ESTIMATED_MS`](Tool::ESTIMATED_MS) until the host has measured
/// it, and each call's hard deadline derives from [`MAX_MS`](Tool::MAX_MS).
pub trait Tool {
    /// The arguments object. Its JSON Schema (from `JsonSchema`) is what the
    /// model sees and what the host validates against; doc comments on fields
    /// become descriptions. Use a struct with named fields (or [`NoArgs`]);
    /// `#[serde(deny_unknown_fields)]` makes the schema refuse extra fields.
    type Args: DeserializeOwned + JsonSchema;

    /// The name the model calls the tool by: 1 to 64 ASCII letters, digits,
    /// `_`, `-` or `.`, unique within the plugin (checked at compile time by
    /// [`plugin!`]).
    const NAME: &'static str;

    /// What the tool does, written for the model. Be specific.
    const DESCRIPTION: &'static str;

    /// Typical (p50) duration in milliseconds. Default 10.
    const ESTIMATED_MS: u32 = 10;

    /// Upper bound (p99) in milliseconds, at least [`ESTIMATED_MS`](Tool::ESTIMATED_MS).
    /// The host derives the call's deadline from it. Default 100.
    const MAX_MS: u32 = 100;

    /// True when calling twice with the same arguments has no further effect.
    /// Only idempotent tools are probed for calibration. Default `false`: say
    /// `true` for pure functions.
    const IDEMPOTENT: bool = false;

    /// How long a result may be cached, in seconds; 0 (the default) means never.
    const CACHEABLE_SECONDS: u32 = 0;

    /// A minimal valid arguments object, as JSON text, for latency probes.
    /// `None` (the default): the host derives one from the schema.
    const PROBE_ARGUMENTS: Option<&'static str> = None;

    /// Runs the tool. Return [`ToolError::invalid_input`] for arguments that
    /// make no sense, with a message that tells the model what would be right.
    fn call(args: Self::Args) -> Result<Output, ToolError>;
}

/// Arguments of a tool that takes none: the schema is an empty object that
/// allows no properties.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

impl JsonSchema for NoArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArgs".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "object", "properties": {}, "additionalProperties": false })
    }
}

/// The result of a call: one or more content blocks.
///
/// Usually [`Output::text`] or [`Output::json`]; `From<String>` and
/// `From<&str>` make text too, so `Ok("done".into())` works.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    blocks: Vec<Content>,
}

impl Output {
    /// A plain-text result.
    pub fn text(text: impl Into<String>) -> Output {
        Output { blocks: vec![Content::Text(text.into())] }
    }

    /// A JSON result (structured output), serialized with `serde_json`.
    /// Returns a `Result` so it can end a [`Tool::call`] directly; it fails
    /// (as [`ToolError::Failed`]) only when `value`'s `Serialize` does.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Output, ToolError> {
        Ok(Output { blocks: vec![json_block(value)?] })
    }

    /// A result made of the given blocks (images, audio, resources ...).
    pub fn from_blocks(blocks: Vec<Content>) -> Output {
        Output { blocks }
    }

    /// Appends a text block.
    pub fn with_text(mut self, text: impl Into<String>) -> Output {
        self.blocks.push(Content::Text(text.into()));
        self
    }

    /// Appends a JSON block.
    pub fn with_json<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Output, ToolError> {
        self.blocks.push(json_block(value)?);
        Ok(self)
    }

    /// Appends any block.
    pub fn push(&mut self, block: Content) {
        self.blocks.push(block);
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[Content] {
        &self.blocks
    }

    /// The blocks, as the WIT `call` returns them.
    pub fn into_blocks(self) -> Vec<Content> {
        self.blocks
    }
}

fn json_block<T: Serialize + ?Sized>(value: &T) -> Result<Content, ToolError> {
    serde_json::to_string(value)
        .map(Content::Json)
        .map_err(|e| ToolError::Failed(format!("could not serialize the result as JSON: {e}")))
}

impl From<String> for Output {
    fn from(text: String) -> Output {
        Output::text(text)
    }
}

impl From<&str> for Output {
    fn from(text: &str) -> Output {
        Output::text(text)
    }
}

impl From<Content> for Output {
    fn from(block: Content) -> Output {
        Output { blocks: vec![block] }
    }
}

impl From<Vec<Content>> for Output {
    fn from(blocks: Vec<Content>) -> Output {
        Output { blocks }
    }
}

impl ToolError {
    /// The arguments were well-formed but made no sense.
    pub fn invalid_input(message: impl Into<String>) -> ToolError {
        ToolError::InvalidInput(message.into())
    }

    /// The thing asked for does not exist.
    pub fn not_found(message: impl Into<String>) -> ToolError {
        ToolError::NotFound(message.into())
    }

    /// The request needs something the plugin was not granted.
    pub fn forbidden(message: impl Into<String>) -> ToolError {
        ToolError::Forbidden(message.into())
    }

    /// The tool ran and failed.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError::Failed(message.into())
    }

    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            ToolError::InvalidInput(m) | ToolError::NotFound(m) | ToolError::Forbidden(m) | ToolError::Failed(m) => m,
        }
    }
}

/// The JSON Schema of an arguments type, as the host receives it: draft
/// 2020-12, subschemas inlined (recursive types keep `$defs` at the root, so
/// the schema is always self-contained), without the Rust type's `title`.
pub fn schema_for<A: JsonSchema>() -> serde_json::Value {
    let generator =
        schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    let mut schema = generator.into_root_schema_for::<A>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    schema
}

/// The `tool-info` record [`plugin!`] lists for tool `T`.
pub fn describe<T: Tool>() -> ToolInfo {
    ToolInfo {
        name: T::NAME.into(),
        description: T::DESCRIPTION.into(),
        input_schema: schema_for::<T::Args>().to_string(),
        estimated_duration_ms: T::ESTIMATED_MS,
        max_duration_ms: T::MAX_MS,
        idempotent: T::IDEMPOTENT,
        cacheable_seconds: T::CACHEABLE_SECONDS,
        probe_arguments: T::PROBE_ARGUMENTS.map(Into::into),
    }
}

/// Runs tool `T` on `arguments` (JSON text) the way the component's `call`
/// does: deserialize, call, flatten the output into blocks. Arguments that do
/// not deserialize give [`ToolError::InvalidInput`] naming the field and
/// listing the expected ones. Handy in native unit tests.
pub fn invoke<T: Tool>(arguments: &str) -> Result<Vec<Content>, ToolError> {
    let args = parse_arguments::<T>(arguments)?;
    T::call(args).map(Output::into_blocks)
}

fn parse_arguments<T: Tool>(arguments: &str) -> Result<T::Args, ToolError> {
    let mut de = serde_json::Deserializer::from_str(arguments);
    let parsed = serde_path_to_error::deserialize::<_, T::Args>(&mut de);
    let error = match parsed {
        Ok(args) => match de.end() {
            Ok(()) => return Ok(args),
            Err(e) => (String::new(), e),
        },
        Err(e) => {
            let path = e.path().to_string();
            (path, e.into_inner())
        }
    };
    let (path, inner) = error;
    let place = if path.is_empty() || path == "." { String::new() } else { format!(" at `{path}`") };
    Err(ToolError::InvalidInput(format!(
        "invalid arguments for {}{place}: {}; {}",
        T::NAME,
        without_position(&inner),
        expected_fields(&schema_for::<T::Args>()),
    )))
}

/// serde_json's message without its "at line 1 column 9" suffix, which means
/// nothing to a model.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(i) if error.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

/// "expected fields: name (string, required), excited (boolean)".
fn expected_fields(schema: &serde_json::Value) -> String {
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return "expected an object".into();
    };
    if properties.is_empty() {
        return "expected an empty object".into();
    }
    let required: Vec<&str> =
        schema.get("required").and_then(|r| r.as_array()).into_iter().flatten().filter_map(|r| r.as_str()).collect();
    let fields: Vec<String> = properties
        .iter()
        .map(|(name, property)| {
            let mut notes: Vec<String> = Vec::new();
            match property.get("type") {
                Some(serde_json::Value::String(t)) => notes.push(t.clone()),
                Some(serde_json::Value::Array(ts)) => {
                    notes.push(ts.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join(" or "))
                }
                _ => {}
            }
            if required.contains(&name.as_str()) {
                notes.push("required".into());
            }
            if notes.is_empty() { name.clone() } else { format!("{name} ({})", notes.join(", ")) }
        })
        .collect();
    format!("expected fields: {}", fields.join(", "))
}

/// Implements the component's `tool` interface over the listed [`Tool`]
/// types and exports it.
///
/// ```
/// use toolhost_sdk::{NoArgs, Output, Tool, ToolError};
///
/// struct Ping;
///
/// impl Tool for Ping {
///     type Args = NoArgs;
///     const NAME: &'static str = "ping";
///     const DESCRIPTION: &'static str = "Answers pong.";
///
///     fn call(_: NoArgs) -> Result<Output, ToolError> {
///         Ok("pong".into())
///     }
/// }
///
/// struct Time;
///
/// impl Tool for Time {
///     type Args = NoArgs;
///     const NAME: &'static str = "time";
///     const DESCRIPTION: &'static str = "Seconds since the Unix epoch.";
///
///     fn call(_: NoArgs) -> Result<Output, ToolError> {
///         let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
///             .map_err(|e| ToolError::failed(e.to_string()))?;
///         Output::json(&now.as_secs())
///     }
/// }
///
/// toolhost_sdk::plugin!(Ping, Time);
/// # fn main() {}
/// ```
///
/// `list-tools` returns [`describe`] of each type, in order; `call` runs the
/// one whose [`Tool::NAME`] matches, through [`invoke`], and answers an
/// unknown name with [`ToolError::NotFound`]. Invalid names, duplicate names
/// and `MAX_MS < ESTIMATED_MS` are compile-time errors. Use it once per
/// crate. The exports are generated only for `wasm32` targets, so the crate
/// still compiles (and its tests run) natively.
#[macro_export]
macro_rules! plugin {
    ($($tool:ty),+ $(,)?) => {
        const _: () = {
            $($crate::__private::check::<$tool>();)+
            $crate::__private::check_unique(&[$(<$tool as $crate::Tool>::NAME),+]);
        };

        #[doc(hidden)]
        #[allow(dead_code)]
        struct __ToolhostSdkPlugin;

        impl $crate::bindings::exports::toolhost::plugin::tool::Guest for __ToolhostSdkPlugin {
            fn list_tools() -> ::std::vec::Vec<$crate::ToolInfo> {
                ::std::vec![$($crate::describe::<$tool>()),+]
            }

            fn call(
                name: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::core::result::Result<::std::vec::Vec<$crate::Content>, $crate::ToolError> {
                $(
                    if name == <$tool as $crate::Tool>::NAME {
                        return $crate::invoke::<$tool>(&arguments);
                    }
                )+
                ::core::result::Result::Err($crate::__private::unknown_tool(
                    &name,
                    &[$(<$tool as $crate::Tool>::NAME),+],
                ))
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings::export!(__ToolhostSdkPlugin with_types_in $crate::bindings);
    };
}

/// Support for [`plugin!`]; not a stable API.
#[doc(hidden)]
pub mod __private {
    use super::{Tool, ToolError};

    /// Compile-time checks of one tool's constants.
    pub const fn check<T: Tool>() {
        assert!(
            valid_name(T::NAME),
            "toolhost_sdk::plugin!: a Tool::NAME is not 1-64 ASCII letters, digits, '_', '-' or '.'"
        );
        assert!(T::MAX_MS >= T::ESTIMATED_MS, "toolhost_sdk::plugin!: a tool's MAX_MS is below its ESTIMATED_MS");
    }

    /// Compile-time check that no two tools share a name.
    pub const fn check_unique(names: &[&str]) {
        let mut i = 0;
        while i < names.len() {
            let mut j = i + 1;
            while j < names.len() {
                assert!(!same(names[i], names[j]), "toolhost_sdk::plugin!: two tools have the same NAME");
                j += 1;
            }
            i += 1;
        }
    }

    const fn valid_name(name: &str) -> bool {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > 64 {
            return false;
        }
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
                return false;
            }
            i += 1;
        }
        true
    }

    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The answer to a call naming no tool of this plugin.
    pub fn unknown_tool(name: &str, known: &[&str]) -> ToolError {
        ToolError::NotFound(format!("this plugin has no tool {name:?}; its tools are: {}", known.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::exports::toolhost::plugin::tool::Guest;
    use serde::Deserialize;

    /// Arguments with a nested type, an optional field and a default.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct RollArgs {
        /// The dice.
        dice: Dice,
        /// Optional seed.
        seed: Option<u64>,
        #[serde(default)]
        explain: bool,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Dice {
        count: u32,
        sides: u32,
    }

    struct Roll;

    impl Tool for Roll {
        type Args = RollArgs;
        const NAME: &'static str = "roll";
        const DESCRIPTION: &'static str = "Rolls dice.";
        const IDEMPOTENT: bool = true;

        fn call(args: RollArgs) -> Result<Output, ToolError> {
            if args.dice.sides == 0 {
                return Err(ToolError::invalid_input("a die needs at least one side"));
            }
            let total = args.dice.count * args.dice.sides;
            let out = Output::json(&serde_json::json!({ "total": total, "seed": args.seed }))?;
            if args.explain { Ok(out.with_text(format!("{} x {}", args.dice.count, args.dice.sides))) } else { Ok(out) }
        }
    }

    struct Ping;

    impl Tool for Ping {
        type Args = NoArgs;
        const NAME: &'static str = "ping";
        const DESCRIPTION: &'static str = "Answers pong.";
        const ESTIMATED_MS: u32 = 1;
        const MAX_MS: u32 = 5;
        const CACHEABLE_SECONDS: u32 = 60;
        const PROBE_ARGUMENTS: Option<&'static str> = Some("{}");

        fn call(_: NoArgs) -> Result<Output, ToolError> {
            log::info("pinged");
            progress(1.0, Some(1.0), Some("done"));
            Ok("pong".into())
        }
    }

    /// A recursive type keeps a `$defs` entry at the root.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        name: String,
        children: Vec<Tree>,
    }

    mod exported {
        use super::{Ping, Roll};
        crate::plugin!(Roll, Ping);

        pub(super) fn list() -> Vec<crate::ToolInfo> {
            <__ToolhostSdkPlugin as super::Guest>::list_tools()
        }

        pub(super) fn call(name: &str, arguments: &str) -> Result<Vec<crate::Content>, crate::ToolError> {
            <__ToolhostSdkPlugin as super::Guest>::call(name.into(), arguments.into())
        }
    }

    fn compile(schema: &serde_json::Value) -> jsonschema::Validator {
        jsonschema::draft202012::new(schema).unwrap_or_else(|e| panic!("{e}: {schema}"))
    }

    #[test]
    fn schemas_are_self_contained_objects_the_host_accepts() {
        let schema = schema_for::<RollArgs>();
        assert_eq!(schema["type"], "object", "{schema}");
        assert!(schema.get("$defs").is_none(), "subschemas are inlined: {schema}");
        assert!(schema.get("title").is_none(), "{schema}");
        assert_eq!(schema["additionalProperties"], false, "{schema}");
        assert_eq!(schema["properties"]["dice"]["type"], "object", "{schema}");
        assert_eq!(schema["properties"]["dice"]["description"], "The dice.", "{schema}");
        assert_eq!(schema["required"], serde_json::json!(["dice"]), "{schema}");

        let validator = compile(&schema);
        assert!(validator.is_valid(&serde_json::json!({"dice": {"count": 2, "sides": 6}})));
        assert!(validator.is_valid(&serde_json::json!({"dice": {"count": 2, "sides": 6}, "seed": null})));
        assert!(!validator.is_valid(&serde_json::json!({"dice": {"count": "2", "sides": 6}})));
        assert!(!validator.is_valid(&serde_json::json!({"dice": {"count": 2, "sides": 6}, "bogus": 1})));
        assert!(!validator.is_valid(&serde_json::json!({})));

        let tree = schema_for::<Tree>();
        let validator = compile(&tree);
        assert!(validator.is_valid(&serde_json::json!({"name": "a", "children": [{"name": "b", "children": []}]})));
        assert!(!validator.is_valid(&serde_json::json!({"name": "a", "children": [{"name": 1, "children": []}]})));

        let none = schema_for::<NoArgs>();
        assert_eq!(none["type"], "object", "{none}");
        let validator = compile(&none);
        assert!(validator.is_valid(&serde_json::json!({})));
        assert!(!validator.is_valid(&serde_json::json!({"x": 1})));
    }

    #[test]
    fn describe_carries_the_constants() {
        let info = describe::<Ping>();
        assert_eq!(info.name, "ping");
        assert_eq!(info.description, "Answers pong.");
        assert_eq!((info.estimated_duration_ms, info.max_duration_ms), (1, 5));
        assert!(!info.idempotent);
        assert_eq!(info.cacheable_seconds, 60);
        assert_eq!(info.probe_arguments.as_deref(), Some("{}"));

        let info = describe::<Roll>();
        assert_eq!((info.estimated_duration_ms, info.max_duration_ms), (10, 100), "defaults");
        assert!(info.idempotent);
        assert_eq!(info.probe_arguments, None);
        let schema: serde_json::Value = serde_json::from_str(&info.input_schema).unwrap();
        assert_eq!(schema, schema_for::<RollArgs>());
    }

    #[test]
    fn calls_are_dispatched_by_name() {
        let tools: Vec<String> = exported::list().into_iter().map(|t| t.name).collect();
        assert_eq!(tools, ["roll", "ping"]);

        let out = exported::call("roll", r#"{"dice":{"count":2,"sides":6},"explain":true}"#).unwrap();
        assert_eq!(out, [Content::Json(r#"{"total":12,"seed":null}"#.into()), Content::Text("2 x 6".into())]);
        assert_eq!(exported::call("ping", "{}").unwrap(), [Content::Text("pong".into())]);

        let err = exported::call("nope", "{}").unwrap_err();
        assert!(matches!(&err, ToolError::NotFound(m) if m.contains("\"nope\"") && m.contains("roll, ping")), "{err}");
    }

    #[test]
    fn tool_errors_pass_through() {
        let err = invoke::<Roll>(r#"{"dice":{"count":2,"sides":0}}"#).unwrap_err();
        assert_eq!(err, ToolError::InvalidInput("a die needs at least one side".into()));
    }

    #[test]
    fn bad_arguments_are_invalid_input_naming_the_field() {
        let err = invoke::<Roll>(r#"{"dice":{"count":"two","sides":6}}"#).unwrap_err();
        let ToolError::InvalidInput(m) = &err else { panic!("{err}") };
        assert!(m.starts_with("invalid arguments for roll at `dice.count`: invalid type: string \"two\""), "{m}");
        assert!(!m.contains("line 1"), "{m}");
        assert!(
            m.contains("expected fields: dice (object, required), seed (integer or null), explain (boolean)"),
            "{m}"
        );

        let err = invoke::<Roll>(r#"{"seed":1}"#).unwrap_err();
        assert!(err.message().starts_with("invalid arguments for roll: missing field `dice`"), "{err}");

        let err = invoke::<Roll>(r#"{"dice":{"count":1,"sides":6},"bogus":true}"#).unwrap_err();
        assert!(err.message().contains("unknown field `bogus`"), "{err}");

        let err = invoke::<Ping>(r#"{} x"#).unwrap_err();
        assert!(err.message().contains("trailing characters"), "{err}");
        assert!(err.message().ends_with("expected an empty object"), "{err}");
    }

    #[test]
    fn output_builders() {
        assert_eq!(Output::text("a").blocks(), [Content::Text("a".into())]);
        assert_eq!(Output::from("a"), Output::text("a"));
        assert_eq!(Output::from(String::from("a")), Output::text("a"));
        let mut out = Output::json(&[1, 2]).unwrap().with_json("x").unwrap();
        out.push(Content::Text("t".into()));
        assert_eq!(
            out.into_blocks(),
            [Content::Json("[1,2]".into()), Content::Json("\"x\"".into()), Content::Text("t".into())]
        );
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 1);
        assert!(matches!(Output::json(&map), Err(ToolError::Failed(_))));
    }

    #[test]
    fn name_checks() {
        __private::check_unique(&["a", "b", "ab"]);
        assert!(std::panic::catch_unwind(|| __private::check_unique(&["a", "b", "a"])).is_err());
        __private::check::<Roll>();
        struct Bad;
        impl Tool for Bad {
            type Args = NoArgs;
            const NAME: &'static str = "no spaces";
            const DESCRIPTION: &'static str = "";
            fn call(_: NoArgs) -> Result<Output, ToolError> {
                Ok(Output::default())
            }
        }
        assert!(std::panic::catch_unwind(__private::check::<Bad>).is_err());
    }
}
