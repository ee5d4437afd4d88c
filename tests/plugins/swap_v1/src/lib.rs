//! Version 1 of the plugin the hot-loading test replaces while calls run.
//! Both versions answer `version`; only version 2 has `new_in_v2`.

use toolhost_sdk::{NoArgs, Output, Tool, ToolError};

struct Version;

impl Tool for Version {
    type Args = NoArgs;
    const NAME: &'static str = "version";
    const DESCRIPTION: &'static str = "Says which version of the plugin answered.";
    const ESTIMATED_MS: u32 = 1;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
        Output::json(&toolhost_sdk::serde_json::json!({ "version": 1 }))
    }
}

toolhost_sdk::plugin!(Version);
