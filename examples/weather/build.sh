#!/usr/bin/env bash
# Builds the weather plugin into a WebAssembly component, weather.wasm
# beside this script: `cargo build --target wasm32-wasip2 --profile guest`
# in this folder, which stands alone (its own workspace, the SDK vendored in
# vendor/toolhost-sdk), so a copy of it builds anywhere. The `guest` profile
# (Cargo.toml) is `release` made small: opt-level "s", LTO, stripped. For
# wasm32-wasip2, rustc links a cdylib straight into a component
# (wasm-component-ld): no adapter and no `wasm-tools component new` step.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target=wasm32-wasip2
profile=guest

# The wasm32-wasip2 standard library, once per toolchain.
sysroot="$(rustc --print sysroot)"
if [[ ! -d "$sysroot/lib/rustlib/$target/lib" ]]; then
    echo "installing the $target target with rustup (one time)" >&2
    rustup target add "$target"
fi

cd "$here"
cargo build --locked --target "$target" --profile "$profile"

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$here/$target_dir"
built="$target_dir/$target/$profile/weather.wasm"
out="$here/weather.wasm"
cp "$built" "$out"

echo "built $out ($(wc -c <"$out") bytes)"
echo
echo "next: sign it, then install it or point toolhost at it:"
echo "  toolhost sign $out --key <your.key> --name weather --version 0.1.0 \\"
echo "      --http-host https://api.open-meteo.com --secret api_key"
echo "  toolhost inspect $out"
echo "see README.md beside it for the grant, the secret and the settings"
