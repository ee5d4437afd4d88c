//! A plain `wasi:cli/command` component: valid WebAssembly, wrong world.

fn main() {
    println!("I am a command, not a toolhost plugin");
}
