"""What a Sigstore signature costs a host, against an ed25519 one (#50).

Starts the tests' private Sigstore instance (tests/peers/sigstore_instance.py),
signs the swap_v1 test plugin both ways with the given toolhost binary, then
times, as a user runs them, `toolhost verify` and a first `toolhost call` (the
plugin admitted, compiled from a warm cache, called) of each: the median and
p99 of RUNS runs each, alternated.

Usage: tests/peers/.venv-sigstore/bin/python crates/bench/sigstore_verify.py [TOOLHOST] [RUNS]
(after `cargo build --release` and `cargo test --release -p toolhost --no-run`,
which builds the test plugin, and scripts/install-peers).
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
TH = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/toolhost")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
PLUGIN = ROOT / "target/test-guests/wasm32-wasip2/guest/swap_v1.wasm"


def main():
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        inst = subprocess.Popen([sys.executable, str(ROOT / "tests/peers/sigstore_instance.py"), str(d)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        info = json.loads(inst.stdout.readline())
        url = info["url"]
        token = urllib.request.urlopen(f"{url}/token?email=alice@example.org").read().decode()
        env = dict(os.environ, TOOLHOST_STATE_DIR=str(d / "state"), TOOLHOST_CACHE_DIR=str(d / "cache"))
        env.pop("TOOLHOST_ALLOW_UNSIGNED", None)

        def th(*args, cwd):
            r = subprocess.run([TH, *args], cwd=cwd, env=env, capture_output=True, text=True)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            return r

        dirs = {}
        for kind in ("ed25519", "sigstore"):
            w = d / kind
            (w / "p").mkdir(parents=True)
            (w / "p/swap.wasm").write_bytes(PLUGIN.read_bytes())
            th("keygen", "alice", "--out", "keys", cwd=w)
            (w / "toolhost.yaml").write_text(
                "plugins:\n  builtins: false\n  files: [p/swap.wasm]\ntrust:\n  key_files: [keys/alice.pub]\n"
                f"  sigstore:\n    trusted_root: {info['trusted_root']}\n"
                "  publishers:\n    - identity: alice@example.org\n      issuer: https://accounts.example.org\n")
            if kind == "ed25519":
                th("sign", "p/swap.wasm", "--name", "swap", "--key", "keys/alice.key", cwd=w)
            else:
                th("sign", "p/swap.wasm", "--name", "swap", "--sigstore", "--identity-token", token,
                   "--fulcio-url", url, "--rekor-url", url, cwd=w)
            th("call", "version", "{}", cwd=w)  # warms the compile cache
            dirs[kind] = w
        times = {(k, c): [] for k in dirs for c in ("verify", "call")}
        for _ in range(RUNS):
            for k, w in dirs.items():
                for c, args in (("verify", ("verify", "p/swap.wasm")), ("call", ("call", "version", "{}"))):
                    t = time.perf_counter()
                    th(*args, cwd=w)
                    times[(k, c)].append((time.perf_counter() - t) * 1000)
        inst.kill()
        p = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]
        print(f"| What ({RUNS} runs each, process included) | ed25519 p50 | Sigstore p50 | ratio | ed25519 p99 | Sigstore p99 |")
        print("|---|---|---|---|---|---|")
        for c, what in (("verify", "`toolhost verify`"), ("call", "`toolhost call` (admit, warm cache, call)")):
            e, s = times[("ed25519", c)], times[("sigstore", c)]
            print(f"| {what} | {statistics.median(e):.1f} ms | {statistics.median(s):.1f} ms | "
                  f"{statistics.median(s) / statistics.median(e):.2f} | {p(e, .99):.1f} ms | {p(s, .99):.1f} ms |")


if __name__ == "__main__":
    main()
