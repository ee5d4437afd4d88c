//! The operator's admin API: how `toolhost plugin add`, `server add`,
//! `status` and friends reach a running host.
//!
//! - [`api`]: the requests and replies, typed (serde), shared by both ends.
//! - [`router()`]: the axum `Router` a serving host mounts at `/admin`, behind
//!   its own bearer token.
//! - [`client`]: the CLI's side: finds the running host through its endpoint
//!   record in the state directory and calls it.
//!
//! Each serving process writes an endpoint record (`<state>/admin/<pid>.json`,
//! mode 0600) with the address and the token; only the operator's user can
//! read it. Commands pick the only HTTP host, or the only host, or `--pid`.

pub mod api;
pub mod client;
pub mod router;

pub use router::{ACTOR_HEADER, Admin, VIA_HEADER, router};
