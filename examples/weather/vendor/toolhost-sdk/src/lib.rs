//! Write toolhost plugins in a few lines.
//!
//! A toolhost plugin is a WebAssembly component (`wasm32-wasip2`) that exports
//! the `toolhost:plugin/tool` interface of the repository's `wit/tool.wit`.
//! This crate hides that contract: implement [`Tool`] (or [`TypedTool`]) for a
//! type per tool, list the types in [`plugin!`], and the crate does the rest:
//!
//! - `list-tools` is built from each tool's constants, with the JSON Schema of
//!   its arguments derived from the [`Tool::Args`] type by `schemars`
//!   (draft 2020-12, self-contained; doc comments on fields become
//!   `description`s the model reads);
//! - `call` is dispatched by tool name; the arguments are deserialized with
//!   `serde_json`, and a mismatch becomes [`ToolError::InvalidInput`] naming
//!   the offending field;
//! - errors: [`ToolError`] has the WIT's four kinds, and `?` turns any
//!   [`std::error::Error`] into [`ToolError::Failed`] with its message;
//! - the component's exports are generated (only when compiling for
//!   `wasm32`, so the same crate builds and unit-tests natively).
//!
//! [`log`] and [`progress`] talk to the host while a call runs; [`memory`]
//! reads the campaign memory store (a capability the operator grants).
//! [`http`] sends HTTP requests through `wasi:http` (to the origins the
//! operator granted the plugin; a refusal reads as the host's own words);
//! [`config`] reads the plain settings the operator gave the plugin and
//! [`secret`] its secrets (API keys), both through `wasi:config/store`.
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
//! `?` works on foreign errors inside `call`; they become
//! [`ToolError::Failed`] with the error's message:
//!
//! ```
//! use toolhost_sdk::{NoArgs, Output, Tool, ToolError};
//!
//! struct Motd;
//!
//! impl Tool for Motd {
//!     type Args = NoArgs;
//!     const NAME: &'static str = "motd";
//!     const DESCRIPTION: &'static str = "Reads the message of the day from the granted directory.";
//!
//!     fn call(_: NoArgs) -> Result<Output, ToolError> {
//!         let text = std::fs::read_to_string("/no/such/motd.txt")?;
//!         Ok(text.into())
//!     }
//! }
//!
//! # fn main() {
//! let err = toolhost_sdk::invoke::<Motd>("{}").unwrap_err();
//! assert!(matches!(err, ToolError::Failed(_)), "{err}");
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
//! - `Option` fields may be left out, and also accept `null`; mark one
//!   `#[schemars(transform = toolhost_sdk::schema::not_null)]` to refuse
//!   `null`. `#[schemars(length(min = 1, max = 200))]`,
//!   `#[schemars(range(min = 1, max = 50))]` and
//!   `#[schemars(extend("enum" = ["a", "b"]))]` add the usual constraints.
//! - The bindings target the WIT's `memory-plugin` world, but a component
//!   imports `toolhost:plugin/memory` only when it calls [`memory`]: other
//!   plugins need no `memory` grant. Likewise it imports `wasi:http` only
//!   when it calls [`http`], and `wasi:config/store` only when it calls
//!   [`config`] or [`secret`].

pub mod config;
pub mod http;
pub mod log;
pub mod memory;
pub mod schema;
pub mod secret;

mod error;
mod output;
mod tool;

/// The bindings `wit-bindgen` generates from `wit/tool.wit` (world
/// `memory-plugin`: the `plugin` world plus the `memory` import, which a
/// component keeps only when it calls [`memory`]).
///
/// Used by [`plugin!`]; plugin code does not need it.
#[doc(hidden)]
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "memory-plugin",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "$crate::bindings",
        additional_derives: [PartialEq, Eq],
        // They hold an `f64` score, so cannot be `Eq`.
        additional_derives_ignore: ["transcript-line", "fact"],
    });
}

/// The bindings `wit-bindgen` generates for `wasi:config/store` (world
/// `wasi:config/imports` of `wit/deps/config`, the WIT the host links),
/// apart from the tool world: [`config`] and [`secret`] read through them.
#[cfg(target_arch = "wasm32")]
#[allow(missing_docs)]
mod config_bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "wasi:config/imports@0.2.0-rc.1",
    });
}

pub use bindings::toolhost::plugin::types::{Content, EmbeddedResource, Media, ResourceBody, ToolInfo};
pub use error::ToolError;
pub use log::progress;
pub use output::Output;
pub use schema::{output_schema, schema_for};
pub use schemars::{self, JsonSchema};
pub use serde;
pub use serde_json;
pub use tool::{NoArgs, Tool, TypedTool, describe, invoke};

/// The rule every tool name follows, as a regular expression: 1 to 64 ASCII
/// letters, digits, `_` or `-`. The host and the WIT say the same.
pub const TOOL_NAME_PATTERN: &str = "^[a-zA-Z0-9_-]{1,64}$";

/// True when `name` matches [`TOOL_NAME_PATTERN`]. A `const fn`, so
/// [`plugin!`] checks names at compile time.
pub const fn valid_tool_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 64 {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return false;
        }
        i += 1;
    }
    true
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
///         let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
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
/// unknown name with [`ToolError::NotFound`]. Invalid names (see
/// [`valid_tool_name`]), duplicate names and `MAX_MS < ESTIMATED_MS` are
/// compile-time errors. Use it once per crate. The exports are generated only
/// for `wasm32` targets, so the crate still compiles (and its tests run)
/// natively.
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
            ) -> ::core::result::Result<::std::vec::Vec<$crate::Content>, $crate::__private::WitToolError> {
                $(
                    if name == <$tool as $crate::Tool>::NAME {
                        return $crate::invoke::<$tool>(&arguments).map_err(::core::convert::Into::into);
                    }
                )+
                ::core::result::Result::Err($crate::__private::unknown_tool(
                    ::core::env!("CARGO_PKG_NAME"),
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
    use super::{Tool, valid_tool_name};

    /// The WIT `tool-error` the exported `call` returns.
    pub use crate::bindings::toolhost::plugin::types::ToolError as WitToolError;

    /// Compile-time checks of one tool's constants.
    pub const fn check<T: Tool>() {
        assert!(
            valid_tool_name(T::NAME),
            "toolhost_sdk::plugin!: a Tool::NAME is not 1-64 ASCII letters, digits, '_' or '-'"
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

    /// The answer to a call naming no tool of plugin `plugin`.
    pub fn unknown_tool(plugin: &str, name: &str, known: &[&str]) -> WitToolError {
        WitToolError::NotFound(format!("{plugin} has no tool {name:?}; its tools are: {}", known.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__private::WitToolError;
    use crate::bindings::exports::toolhost::plugin::tool::Guest;
    use serde::{Deserialize, Serialize};

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
            if args.dice.sides == 7 {
                // A foreign error through `?`.
                let _: serde_json::Value = serde_json::from_str("not json")?;
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

        pub(super) fn call(name: &str, arguments: &str) -> Result<Vec<crate::Content>, crate::__private::WitToolError> {
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
        let WitToolError::NotFound(m) = &err else { panic!("{err:?}") };
        assert_eq!(m, "toolhost-sdk has no tool \"nope\"; its tools are: roll, ping");

        // Errors cross the boundary as the WIT's variant of the same kind.
        let err = exported::call("roll", r#"{"dice":{"count":2,"sides":0}}"#).unwrap_err();
        assert_eq!(err, WitToolError::InvalidInput("a die needs at least one side".into()));
        let err = exported::call("roll", r#"{"dice":{"count":2,"sides":7}}"#).unwrap_err();
        assert!(matches!(&err, WitToolError::Failed(m) if m == "expected ident at line 1 column 2"), "{err:?}");
        for (ours, theirs) in [
            (ToolError::invalid_input("a"), WitToolError::InvalidInput("a".into())),
            (ToolError::not_found("b"), WitToolError::NotFound("b".into())),
            (ToolError::forbidden("c"), WitToolError::Forbidden("c".into())),
            (ToolError::failed("d"), WitToolError::Failed("d".into())),
        ] {
            assert_eq!(WitToolError::from(ours), theirs);
        }
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

    #[test]
    fn tool_names_follow_the_pattern() {
        assert_eq!(TOOL_NAME_PATTERN, "^[a-zA-Z0-9_-]{1,64}$");
        for good in ["a", "roll_table", "get-rule", "A1", "_", "-", &"x".repeat(64)] {
            assert!(valid_tool_name(good), "{good:?}");
        }
        for bad in ["", "a.b", "no spaces", "caf\u{e9}", "a/b", "a:b", &"x".repeat(65)] {
            assert!(!valid_tool_name(bad), "{bad:?}");
        }
        const _: () = assert!(valid_tool_name("compile_time"));
    }

    #[test]
    fn foreign_errors_become_failed_with_their_message() {
        fn read() -> Result<String, ToolError> {
            Ok(std::fs::read_to_string("/definitely/not/here.txt")?)
        }
        let err = read().unwrap_err();
        let ToolError::Failed(m) = &err else { panic!("{err}") };
        assert!(m.contains("No such file"), "{m}");

        fn parse() -> Result<serde_json::Value, ToolError> {
            Ok(serde_json::from_str("{")?)
        }
        assert_eq!(parse().unwrap_err(), ToolError::Failed("EOF while parsing an object at line 1 column 1".into()));

        /// An error with a source the message does not repeat.
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("loading the table")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err = ToolError::from(Outer(std::io::Error::other("disk on fire")));
        assert_eq!(err, ToolError::Failed("loading the table: disk on fire".into()));
    }

    #[test]
    fn tool_errors_have_kinds_and_messages() {
        let err = ToolError::not_found("no rule \"x\"");
        assert_eq!(err.kind(), "not-found");
        assert_eq!(err.message(), "no rule \"x\"");
        assert_eq!(err.to_string(), "not-found: no rule \"x\"");
        assert!(matches!(ToolError::forbidden("f"), ToolError::Forbidden(m) if m == "f"));
        assert_eq!(ToolError::invalid_input("i").kind(), "invalid-input");
        assert_eq!(ToolError::failed("x").kind(), "failed");
    }

    /// A typed tool: its output is one JSON block with a schema.
    #[derive(Serialize, JsonSchema)]
    struct Total {
        /// The sum of the dice.
        total: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        faces: Vec<Face>,
    }

    #[derive(Serialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Face {
        Low,
        High,
    }

    struct Sum;

    impl TypedTool for Sum {
        type Args = Dice;
        type Output = Total;
        const NAME: &'static str = "sum";
        const DESCRIPTION: &'static str = "Sums dice.";
        const ESTIMATED_MS: u32 = 2;
        const MAX_MS: u32 = 4;
        const IDEMPOTENT: bool = true;
        const CACHEABLE_SECONDS: u32 = 5;
        const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"count":1,"sides":6}"#);

        fn call(args: Dice) -> Result<Total, ToolError> {
            let total = args.count.checked_mul(args.sides).ok_or_else(|| ToolError::invalid_input("too many"))?;
            let face = if args.sides > 3 { Face::High } else { Face::Low };
            Ok(Total { total, note: None, faces: vec![face] })
        }
    }

    #[test]
    fn typed_tools_are_tools_with_an_output_schema() {
        let out = invoke::<Sum>(r#"{"count":2,"sides":6}"#).unwrap();
        assert_eq!(out, [Content::Json(r#"{"total":12,"faces":["high"]}"#.into())]);
        assert_eq!(
            invoke::<Sum>(r#"{"count":4294967295,"sides":6}"#).unwrap_err(),
            ToolError::invalid_input("too many")
        );

        let info = describe::<Sum>();
        assert_eq!((info.name.as_str(), info.description.as_str()), ("sum", "Sums dice."));
        assert_eq!((info.estimated_duration_ms, info.max_duration_ms, info.cacheable_seconds), (2, 4, 5));
        assert!(info.idempotent);
        assert_eq!(info.probe_arguments.as_deref(), Some(r#"{"count":1,"sides":6}"#));
        __private::check::<Sum>();

        let schema = output_schema::<Sum>();
        assert_eq!(schema["type"], "object", "{schema}");
        assert!(schema.get("title").is_none() && schema.get("$defs").is_none(), "{schema}");
        assert_eq!(schema["properties"]["total"]["description"], "The sum of the dice.", "{schema}");
        assert_eq!(schema["required"], serde_json::json!(["total", "faces"]), "serialize contract: {schema}");
        let validator = compile(&schema);
        let produced: serde_json::Value = match &out[0] {
            Content::Json(text) => serde_json::from_str(text).unwrap(),
            other => panic!("{other:?}"),
        };
        assert!(validator.is_valid(&produced));
        assert!(validator.is_valid(&serde_json::json!({"total": 1, "note": "n", "faces": ["low"]})));
        assert!(!validator.is_valid(&serde_json::json!({"total": 1, "faces": ["middle"]})));
        assert!(!validator.is_valid(&serde_json::json!({"faces": []})));

        mod exported {
            crate::plugin!(super::Sum);
        }
    }

    #[test]
    fn not_null_keeps_optional_fields_optional_but_not_nullable() {
        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Args {
            /// Seed.
            #[schemars(transform = schema::not_null, range(min = 1))]
            seed: Option<u64>,
            #[schemars(transform = schema::not_null)]
            dice: Option<Dice>,
            #[schemars(transform = schema::not_null, extend("enum" = ["a", "b"]))]
            pick: Option<String>,
        }
        let schema = schema_for::<Args>();
        assert_eq!(schema["properties"]["seed"]["type"], "integer", "{schema}");
        assert_eq!(schema["properties"]["seed"]["minimum"], 1, "{schema}");
        assert_eq!(schema["properties"]["seed"]["description"], "Seed.", "{schema}");
        assert_eq!(schema["properties"]["dice"]["type"], "object", "{schema}");
        assert_eq!(schema["properties"]["pick"]["enum"], serde_json::json!(["a", "b"]), "{schema}");
        assert!(schema.get("required").is_none(), "{schema}");
        let validator = compile(&schema);
        assert!(validator.is_valid(&serde_json::json!({})));
        assert!(validator.is_valid(&serde_json::json!({"seed": 1, "dice": {"count": 1, "sides": 2}, "pick": "a"})));
        for bad in [
            serde_json::json!({"seed": null}),
            serde_json::json!({"seed": 0}),
            serde_json::json!({"dice": null}),
            serde_json::json!({"pick": null}),
            serde_json::json!({"pick": "c"}),
        ] {
            assert!(!validator.is_valid(&bad), "{bad}");
        }
    }
}
