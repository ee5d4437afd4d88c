//! The engine settings that decide what compiled code looks like, in one
//! place: the runtime's engine is built with them, and `crates/dist/build.rs`
//! includes this file to precompile the built-in plugins with the same
//! settings (so wasmtime's compatibility check accepts the artifacts).
//! Only `wasmtime` items are used here: a build script includes it by path.

/// Applies the code-shaping settings to `config`: the component model,
/// fuel metering when `fuel`, epoch interruption, and Cranelift's `Speed`
/// when `optimize` (else no optimization: the fast first code, see the
/// runtime's `tiered` module; wasmtime loads code of either level into
/// the same engine). Settings that do not change compiled code (the
/// instance pool, the wasm stack size) are the runtime's own.
pub fn apply_code_settings(config: &mut wasmtime::Config, fuel: bool, optimize: bool) {
    config.wasm_component_model(true);
    config.consume_fuel(fuel);
    config.epoch_interruption(true);
    config.cranelift_opt_level(if optimize { wasmtime::OptLevel::Speed } else { wasmtime::OptLevel::None });
}
