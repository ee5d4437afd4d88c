#!/usr/bin/env bash
# Builds {{name}}.wasm, a toolhost plugin, from {{entry}}: esbuild bundles it
# with the SDK (toolhost/, vendored here){{typecheck}}, then {{engine_words}}
# makes the component for the `tool` world in wit/. Versions are pinned in
# package.json. This folder stands alone: a copy of it builds anywhere with
# Node.js >= 20 and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
name={{name}}
entry={{entry}}
engine={{engine}}

die() { echo "build.sh: error: $*" >&2; exit 1; }
command -v node >/dev/null || die "node not found; install Node.js >= 20"
command -v npm >/dev/null || die "npm not found; install Node.js >= 20 with npm"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
    || die "Node.js $(node --version) is too old; >= 20 is needed"

start=$(date +%s.%N)
# The pinned packages, installed again only when package.json changes.
stamp=node_modules/.package.json.sha256
want="$(sha256sum package.json | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> npm install (versions pinned in package.json)"
    npm install --no-audit --no-fund --no-package-lock --loglevel=error \
        || die "npm install failed (is the npm registry reachable?)"
    echo "$want" > "$stamp"
fi
bin=node_modules/.bin

if [ "${entry##*.}" = ts ]; then
    "$bin/tsc" -p . || die "TypeScript found errors in $entry (above)"
fi
# One ES module; the WIT interfaces stay imports for the engine to bind.
"$bin/esbuild" "$entry" --bundle --format=esm --platform=neutral --main-fields=module,main \
    --target=es2022 --external:'wasi:*' --external:'toolhost:*' --log-level=warning --outfile=dist/app.js \
    || die "esbuild could not bundle $entry (above)"
rm -f ".$name.wasm.tmp"
case "$engine" in
    starlingmonkey)
        # fetch() needs componentize-js's `http` feature (on by default); the
        # incoming-request handler (`fetch-event`) is not a tool's: left out.
        "$bin/componentize-js" dist/app.js --wit wit -n tool -d fetch-event -o ".$name.wasm.tmp" >/dev/null \
            || { rm -f ".$name.wasm.tmp"; die "componentize-js failed (see the JavaScript or WIT error above)"; } ;;
    quickjs)
        # Synchronous: QuickJS components here do not await Promises, and
        # have no fetch (the --http template builds with StarlingMonkey).
        "$bin/jco" componentize "$here/dist/app.js" --wit "$here/wit" -n tool --backend qjs --backend-qjs-disable-async \
            -o ".$name.wasm.tmp" >/dev/null \
            || { rm -f ".$name.wasm.tmp"; die "jco componentize failed (see the JavaScript or WIT error above)"; } ;;
    *) die "engine must be starlingmonkey or quickjs, not $engine" ;;
esac
mv -f ".$name.wasm.tmp" "$name.wasm"
awk -v f="$here/$name.wasm" -v b="$(stat -c %s "$name.wasm")" -v s="$start" -v e="$(date +%s.%N)" \
    'BEGIN { printf "built %s (%.1f MiB) in %.1f s\n", f, b / 1048576, e - s }'
