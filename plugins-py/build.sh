#!/usr/bin/env bash
# Builds the Python tool plugins under plugins-py/ into WebAssembly components
# for toolhost, with componentize-py (pinned in requirements.txt).
#
#   plugins-py/build.sh            # every plugin: plugins-py/*/app.py
#   plugins-py/build.sh npcnames   # only these
#
# Output: target/py-plugins/<name>.wasm (relative to the repository root).
# Idempotent: the venv is made once and reused, and a plugin is rebuilt only
# when its sources, wit/, requirements.txt or this script changed (FORCE=1
# rebuilds anyway). That matters: componentize-py output is not byte-for-byte
# reproducible, and every new digest costs the host a fresh compile (~17 s).
# Environment: PYTHON (default python3, needs >= 3.10), WORLD (default plugin),
# FORCE (1: rebuild even when up to date).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="$here/.venv"
wit="$root/wit"
out="$root/target/py-plugins"
world="${WORLD:-plugin}"
python="${PYTHON:-python3}"

die() { echo "build.sh: error: $*" >&2; exit 1; }

[ -d "$wit" ] || die "no WIT directory at $wit"
command -v "$python" >/dev/null || die "'$python' not found; install Python >= 3.10 or set PYTHON=/path/to/python3"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "$("$python" --version 2>&1) is too old; componentize-py needs Python >= 3.10 (set PYTHON=...)"

# 1. The venv with the pinned componentize-py (reinstalled only when requirements.txt changes).
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/componentize-py" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> venv $venv"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" \
        || die "could not create the venv (on Debian/Ubuntu: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" \
        || die "pip could not install $(grep -v '^#' "$here/requirements.txt" | xargs) (is PyPI reachable?)"
    echo "$want" > "$stamp"
fi
cpy="$venv/bin/componentize-py"
echo "==> $("$cpy" --version 2>/dev/null || echo componentize-py), world $world in $wit"

# 2. Which plugins.
if [ "$#" -gt 0 ]; then
    plugins=("$@")
else
    plugins=()
    for d in "$here"/*/; do [ -f "$d/app.py" ] && plugins+=("$(basename "$d")"); done
    [ "${#plugins[@]}" -gt 0 ] || die "no plugins found (expected plugins-py/<name>/app.py)"
fi

mkdir -p "$out"
for name in "${plugins[@]}"; do
    dir="$here/$name"
    [ -f "$dir/app.py" ] || die "plugin '$name': $dir/app.py not found"
    # What the component is made from: the plugin's files (not gen/), the WIT,
    # the pinned tools and this script.
    inputs="$( { (cd "$dir" && find . -path ./gen -prune -o -name __pycache__ -prune -o -type f -print0 \
                    | sort -z | xargs -0 sha256sum)
                 (cd "$root" && find wit -type f -print0 | sort -z | xargs -0 sha256sum)
                 sha256sum "$here/requirements.txt" "$here/build.sh" | sed "s|$here/||"
                 echo "world=$world"; } | sha256sum | cut -d' ' -f1)"
    stamp_file="$out/.$name.inputs.sha256"
    if [ "${FORCE:-0}" != 1 ] && [ -f "$out/$name.wasm" ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$inputs" ]; then
        echo "==> $name: up to date (${out#"$root"/}/$name.wasm; FORCE=1 to rebuild)"
        continue
    fi
    start=$(date +%s.%N)
    echo "==> $name"
    # Bindings: a fresh gen/ each time, so a WIT change is never built against stale code.
    rm -rf "$dir/gen"
    RUST_LIB_BACKTRACE=0 "$cpy" -d "$wit" -w "$world" bindings "$dir/gen" \
        || die "plugin '$name': generating bindings for world '$world' from $wit failed (see above)"
    # Build to a temporary file and rename, so a failed build never leaves a half-written component.
    tmp="$out/.$name.wasm.tmp"
    rm -f "$tmp"
    # RUST_LIB_BACKTRACE=0: the Python error, not a page of Rust frames.
    (cd "$dir" && RUST_LIB_BACKTRACE=0 "$cpy" -d "$wit" -w "$world" componentize --stub-wasi app -p gen -p . -o "$tmp") \
        || { rm -f "$tmp"; die "plugin '$name': componentize failed (see the Python or WIT error above)"; }
    mv -f "$tmp" "$out/$name.wasm"
    echo "$inputs" > "$stamp_file"
    end=$(date +%s.%N)
    size=$(stat -c %s "$out/$name.wasm")
    awk -v f="${out#"$root"/}/$name.wasm" -v b="$size" -v s="$start" -v e="$end" \
        'BEGIN { printf "    built %s (%d bytes, %.1f MiB) in %.1f s\n", f, b, b / 1048576, e - s }'
done
