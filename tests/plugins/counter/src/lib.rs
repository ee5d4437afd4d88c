//! `count` increments a static counter and returns it. In a fresh instance
//! the counter starts at 0, so every call must answer 1: any other answer
//! means an instance (its memory) was reused between calls.

use std::sync::atomic::{AtomicU32, Ordering};
use toolhost_sdk::{NoArgs, Output, Tool, ToolError};

static CALLS: AtomicU32 = AtomicU32::new(0);

struct Count;

impl Tool for Count {
    type Args = NoArgs;
    const NAME: &'static str = "count";
    const DESCRIPTION: &'static str = "How many times this instance has been called, this call included.";
    const ESTIMATED_MS: u32 = 1;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
        let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        Output::json(&toolhost_sdk::serde_json::json!({ "calls": n }))
    }
}

toolhost_sdk::plugin!(Count);
