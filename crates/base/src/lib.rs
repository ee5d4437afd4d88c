//! toolhost-base: the mechanics several toolhost crates share, once each.
//!
//! - [`private`]: state files and directories private to this user (0700
//!   directories we own, 0600 files, files the host obeys read only when
//!   no one else could have written them), and the bounded non-blocking
//!   read of any file.
//! - [`seal`]: HMAC-SHA256 tags over records we wrote ourselves, and the
//!   constant-time comparison of secrets.
//! - [`bounded`]: bodies read from the network with a size limit.
//! - [`descriptors`]: the process's file descriptors shared fairly among
//!   the callers whose plugins open them, with a reserve for the host.
//! - [`net`]: which host names and addresses are loopback.
//! - [`own`]: this process's own listeners and plugin sockets (no plugin
//!   reaches the first; the second are never the operator).
//! - [`stripes`]: values striped over cache lines, one copy per caller
//!   thread, for counters many threads write at once.
//! - [`www_authenticate`]: the challenges of a `WWW-Authenticate` header.
//!
//! **Architecture invariant:** this crate depends on no other toolhost
//! crate and on nothing that speaks a protocol; every crate may use it.

#![deny(unsafe_code)]

pub mod bounded;
pub mod descriptors;
pub mod net;
pub mod own;
pub mod private;
pub mod seal;
pub mod stripes;
pub mod www_authenticate;
