#!/usr/bin/env bash
# Builds {{name}}.wasm, a toolhost plugin, from app.py with componentize-py
# (pinned in requirements.txt), against the `{{world}}` world in wit/.
# This folder stands alone: the SDK (toolhost/) and the WIT (wit/) are
# vendored here, so a copy of it builds anywhere with Python >= 3.10 and
# PyPI. Environment: PYTHON (default python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
name={{name}}
world={{world}}
python="${PYTHON:-python3}"

die() { echo "build.sh: error: $*" >&2; exit 1; }
command -v "$python" >/dev/null || die "'$python' not found; install Python >= 3.10 or set PYTHON=/path/to/python3"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "$("$python" --version 2>&1) is too old; componentize-py needs Python >= 3.10 (set PYTHON=...)"

start=$(date +%s.%N)
# The venv with the pinned componentize-py, made again only when requirements.txt changes.
stamp=.venv/.requirements.sha256
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ ! -x .venv/bin/componentize-py ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> .venv (componentize-py, pinned in requirements.txt)"
    [ -x .venv/bin/python ] || "$python" -m venv .venv \
        || die "could not create the venv (on Debian/Ubuntu: apt-get install python3-venv)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt \
        || die "pip could not install componentize-py (is PyPI reachable?)"
    echo "$want" > "$stamp"
fi

# wasi:http and toolhost both name an interface `types`: the tool's keep the
# name (`wit_world.imports.types`), wasi:http's is `http_types`.
names=(--import-interface-name "toolhost:plugin/types@0.1.2=types")
[ "$world" = http-tool ] && names+=(--import-interface-name "wasi:http/types@0.2.12=http_types")
export RUST_LIB_BACKTRACE=0   # the Python error, not a page of Rust frames
rm -rf gen
.venv/bin/componentize-py -d wit -w "$world" "${names[@]}" bindings gen \
    || die "generating the bindings for world $world from wit/ failed (see above)"
rm -f ".$name.wasm.tmp"
.venv/bin/componentize-py -d wit -w "$world" "${names[@]}" componentize app -p . -p gen -o ".$name.wasm.tmp" \
    || { rm -f ".$name.wasm.tmp"; die "componentize failed (see the Python error above)"; }
mv -f ".$name.wasm.tmp" "$name.wasm"
awk -v f="$here/$name.wasm" -v b="$(stat -c %s "$name.wasm")" -v s="$start" -v e="$(date +%s.%N)" \
    'BEGIN { printf "built %s (%.1f MiB) in %.1f s\n", f, b / 1048576, e - s }'
