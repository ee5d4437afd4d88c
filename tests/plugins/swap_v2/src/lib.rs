//! Version 2 of the plugin the hot-loading test replaces while calls run:
//! `version` says 2, and `new_in_v2` is new.

use toolhost_sdk::{NoArgs, Output, Tool, ToolError};

struct Version;

impl Tool for Version {
    type Args = NoArgs;
    const NAME: &'static str = "version";
    const DESCRIPTION: &'static str = "Says which version of the plugin answered.";
    const ESTIMATED_MS: u32 = 1;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
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

toolhost_sdk::plugin!(Version, NewInV2);
