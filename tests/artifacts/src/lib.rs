//! Paths of the test-only guest components, built for `wasm32-wasip2` by
//! this crate's build script. A dev-dependency of the host: the product
//! never builds or ships them (as wasmtime's `test-programs` crate).

include!(concat!(env!("OUT_DIR"), "/guests.rs"));
