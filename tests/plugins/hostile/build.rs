//! Links one hand-assembled wasm function into the guest: `table.grow` on
//! the module's function table, which Rust cannot emit (no table
//! intrinsics, and `asm!` is unstable on wasm). The `grow_table` tool calls
//! it, so the host's table limit is met by a real `table.grow`, not by a
//! test double. The function table is the one table the host's pooled
//! instances allow a module; `--growable-table` drops the maximum the
//! linker would give it, so nothing but the host's limit stops the growth.
//!
//! The object is this assembly, encoded below section by section so that
//! building the guest needs no LLVM tool:
//!
//! ```text
//!     .tabletype __indirect_function_table, funcref
//!     .globl hostile_table_grow
//!     .type hostile_table_grow,@function
//! hostile_table_grow:
//!     .functype hostile_table_grow (i32) -> (i32)
//!     ref.null_func
//!     local.get 0
//!     table.grow __indirect_function_table
//!     end_function
//! ```

use std::path::PathBuf;

/// `bytes` prefixed by their length (one LEB128 byte: every part is short).
fn sized(bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 0x80, "a part this long needs a longer length prefix");
    let mut out = vec![bytes.len() as u8];
    out.extend_from_slice(bytes);
    out
}

/// Section `id` holding `content`.
fn section(id: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![id];
    out.extend(sized(content));
    out
}

/// A name as wasm encodes it.
fn name(s: &str) -> Vec<u8> {
    sized(s.as_bytes())
}

/// The relocatable object defining `hostile_table_grow(delta: i32) -> i32`
/// (the table's old size, or -1 when growth is refused).
fn object() -> Vec<u8> {
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    // Type 0: (i32) -> (i32).
    m.extend(section(1, &[1, 0x60, 1, 0x7f, 1, 0x7f]));
    // Imports: the linker's linear memory (every object imports it) and its
    // function table (funcref, no minimum or maximum of its own).
    let mut import = vec![2];
    import.extend(name("env"));
    import.extend(name("__linear_memory"));
    import.extend([0x02, 0x00, 0x00]);
    import.extend(name("env"));
    import.extend(name("__indirect_function_table"));
    import.extend([0x01, 0x70, 0x00, 0x00]);
    m.extend(section(2, &import));
    // Function 0 has type 0.
    m.extend(section(3, &[1, 0]));
    // Code: ref.null func; local.get 0; table.grow <table 0, as a padded
    // LEB128 the linker rewrites>; end. The table index sits at offset 9 of
    // the section's content.
    let body = [0x00, 0xd0, 0x70, 0x20, 0x00, 0xfc, 0x0f, 0x80, 0x80, 0x80, 0x80, 0x00, 0x0b];
    let mut code = vec![1];
    code.extend(sized(&body));
    m.extend(section(10, &code));
    // linking (version 2), symbol table: the imported table (undefined, so
    // named by its import), the function (global, defined).
    let mut symbols = vec![2, 5, 0x10, 0];
    symbols.extend([0, 0x00, 0]);
    symbols.extend(name("hostile_table_grow"));
    let mut linking = name("linking");
    linking.extend([2, 8]);
    linking.extend(sized(&symbols));
    m.extend(section(0, &linking));
    // reloc.CODE: section 3 (the code section), one R_WASM_TABLE_NUMBER_LEB
    // (20) at offset 9 for symbol 0.
    let mut reloc = name("reloc.CODE");
    reloc.extend([3, 1, 20, 9, 0]);
    m.extend(section(0, &reloc));
    m
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("wasm32") {
        return;
    }
    let path = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("table_grow.o");
    std::fs::write(&path, object()).expect("write table_grow.o");
    println!("cargo:rustc-link-arg-cdylib={}", path.display());
    println!("cargo:rustc-link-arg-cdylib=--growable-table");
}
