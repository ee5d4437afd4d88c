//! Version 2 of the plugin the hot-loading test replaces while calls run:
//! `version` and `slow_version` say 2, and `new_in_v2` is new. With the
//! setting `fail_version` (`plugins.config.<name>.fail_version`), `version`
//! fails: the canary test's new version that fails half its calls.

use toolhost_sdk::{NoArgs, Output, Tool, ToolError};

struct Version;

impl Tool for Version {
    type Args = NoArgs;
    const NAME: &'static str = "version";
    const DESCRIPTION: &'static str = "Says which version of the plugin answered.";
    const ESTIMATED_MS: u32 = 1;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
        if toolhost_sdk::config::get("fail_version")?.is_some() {
            return Err(ToolError::failed("version 2 is told to fail (setting fail_version)"));
        }
        Output::json(&toolhost_sdk::serde_json::json!({ "version": 2 }))
    }
}

struct NewInV2;

impl Tool for NewInV2 {
    type Args = NoArgs;
    const NAME: &'static str = "new_in_v2";
    const DESCRIPTION: &'static str = "Exists only in version 2.";
    const ESTIMATED_MS: u32 = 1;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
        Ok("new".into())
    }
}

/// The arguments of `slow_version`.
#[derive(toolhost_sdk::serde::Deserialize, toolhost_sdk::JsonSchema)]
#[serde(crate = "toolhost_sdk::serde", deny_unknown_fields)]
#[schemars(crate = "toolhost_sdk::schemars")]
struct SlowArgs {
    /// How long to sleep before answering, in milliseconds.
    ms: u64,
}

/// A call that stays in flight: the swap tests hold one across a swap and
/// see which version answers. Declared fast, so a FAST session sees it; the
/// tests that call it raise the FAST ceiling above the sleep.
struct SlowVersion;

impl Tool for SlowVersion {
    type Args = SlowArgs;
    const NAME: &'static str = "slow_version";
    const DESCRIPTION: &'static str =
        "Reports progress, sleeps {\"ms\"} milliseconds, then says which version of the plugin answered.";
    const ESTIMATED_MS: u32 = 1;
    const MAX_MS: u32 = 10_000;

    fn call(args: SlowArgs) -> Result<Output, ToolError> {
        toolhost_sdk::progress(0.0, Some(1.0), Some("sleeping"));
        std::thread::sleep(std::time::Duration::from_millis(args.ms));
        Output::json(&toolhost_sdk::serde_json::json!({ "version": 2 }))
    }
}

toolhost_sdk::plugin!(Version, NewInV2, SlowVersion);
