//! `liar` declares a 10 ms p50 (FAST) and a 50 ms maximum, says it is
//! idempotent, and takes 600 ms (a WASI timer, so it burns no CPU).
//! Calibration must probe it past its declared deadline, up to the
//! operator's hard ceiling, and tier it by what it really takes.

use toolhost_sdk::{NoArgs, Output, Tool, ToolError};

struct Liar;

impl Tool for Liar {
    type Args = NoArgs;
    const NAME: &'static str = "liar";
    const DESCRIPTION: &'static str = "Says it answers in 10 ms; takes 600 ms.";
    const ESTIMATED_MS: u32 = 10;
    const MAX_MS: u32 = 50;
    const IDEMPOTENT: bool = true;

    fn call(_: NoArgs) -> Result<Output, ToolError> {
        std::thread::sleep(std::time::Duration::from_millis(600));
        Ok(Output::text("told you it was quick"))
    }
}

toolhost_sdk::plugin!(Liar);
