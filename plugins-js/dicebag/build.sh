#!/usr/bin/env bash
# Builds the dicebag JavaScript plugin into a WebAssembly component for toolhost:
# target/js-plugins/dicebag.wasm (relative to the repository root).
#
# Uses jco componentize (versions pinned in package.json) with the QuickJS
# backend and every WASI import stubbed out: a ~1.6 MB component that imports
# only toolhost:plugin/host. JS_BACKEND=starlingmonkey builds with SpiderMonkey
# instead (componentize-js, ~12 MB, slower to compile; called directly because
# `jco componentize` with that backend cannot read the WIT directory with
# jco 1.35.0 + preview2-shim 0.26.1).
# Idempotent: npm packages are installed once (again when package.json changes).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/js-plugins"
name=dicebag
backend="${JS_BACKEND:-quickjs}"

die() { echo "build.sh: error: $*" >&2; exit 1; }

command -v node >/dev/null || die "node not found; install Node.js >= 20"
command -v npm >/dev/null || die "npm not found; install Node.js >= 20 with npm"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
    || die "Node.js $(node --version) is too old; >= 20 is needed"
[ -f "$root/wit/tool.wit" ] || die "no WIT at $root/wit/tool.wit"

start=$(date +%s.%N)
stamp="$here/node_modules/.package.json.sha256"
want="$(sha256sum "$here/package.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # No lock file: npm 10 writes one that its own `npm ci` then rejects (it
    # leaves out other platforms' optional native packages). The direct
    # dependencies are pinned exactly in package.json instead.
    echo "==> npm install (versions pinned in package.json)"
    (cd "$here" && npm install --no-audit --no-fund --no-package-lock --loglevel=error) \
        || die "npm install failed (is the npm registry reachable?)"
    echo "$want" > "$stamp"
fi

mkdir -p "$out"
tmp="$out/.$name.wasm.tmp"
rm -f "$tmp"
echo "==> $name ($backend)"
case "$backend" in
    quickjs|qjs)
        "$here/node_modules/.bin/jco" componentize "$here/app.js" --wit "$root/wit" -n plugin \
            --backend qjs --backend-qjs-stub-wasi --backend-qjs-disable-async -o "$tmp" \
            || { rm -f "$tmp"; die "jco componentize failed (see the JS or WIT error above)"; } ;;
    starlingmonkey|sm)
        (cd "$here" && ./node_modules/.bin/componentize-js app.js --wit ../../wit -n plugin \
            -d stdio random clocks http fetch-event -o "$tmp") \
            || { rm -f "$tmp"; die "componentize-js failed (see the JS or WIT error above)"; } ;;
    *) die "JS_BACKEND must be quickjs or starlingmonkey, not '$backend'" ;;
esac
[ -s "$tmp" ] || die "the build reported success but wrote no component"
mv -f "$tmp" "$out/$name.wasm"
end=$(date +%s.%N)
size=$(stat -c %s "$out/$name.wasm")
awk -v f="target/js-plugins/$name.wasm" -v b="$size" -v s="$start" -v e="$end" \
    'BEGIN { printf "    built %s (%d bytes, %.1f MiB) in %.1f s\n", f, b, b / 1048576, e - s }'
