#!/usr/bin/env bash
# Builds the weather plugin into a WebAssembly component,
# examples/weather/weather.wasm, the way toolhost builds its own guests
# (crates/guest-build): `cargo build --target wasm32-wasip2 --profile guest`
# from the repository root. The `guest` profile is `release` made small
# (opt-level "s", LTO, stripped; see the root Cargo.toml). For wasm32-wasip2,
# rustc links a cdylib straight into a component (wasm-component-ld): no
# adapter and no `wasm-tools component new` step.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target=wasm32-wasip2
profile=guest

# The wasm32-wasip2 standard library, once per toolchain.
sysroot="$(rustc --print sysroot)"
if [[ ! -d "$sysroot/lib/rustlib/$target/lib" ]]; then
    echo "installing the $target target with rustup (one time)" >&2
    rustup target add "$target"
fi

cd "$root"
cargo build --locked --target "$target" --profile "$profile" -p weather

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$root/$target_dir"
built="$target_dir/$target/$profile/weather.wasm"
out="$here/weather.wasm"
cp "$built" "$out"

echo "built $out ($(wc -c <"$out") bytes)"
echo
echo "next: sign it, then install it or point toolhost at it:"
echo "  toolhost sign examples/weather/weather.wasm --key <your.key> --name weather --version 0.1.0 \\"
echo "      --http-host https://api.open-meteo.com --secret api_key"
echo "  toolhost inspect examples/weather/weather.wasm"
echo "see examples/weather/README.md for the grant, the secret and the settings"
