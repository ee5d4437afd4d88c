"""Another OCI client for the registry interop tests: the ORAS Python SDK
(`oras`, pinned in requirements.txt). Plain HTTP (the tests' registries are on
loopback).

    oras_peer.py pull HOST:PORT/REPO:TAG OUT.wasm
        Fetches the manifest, checks it is a Wasm OCI artifact (config media
        type application/vnd.wasm.config.v0+json, one application/wasm
        layer) and writes the layer's bytes to OUT.wasm. Prints the layer digest.
    oras_peer.py push HOST:PORT/REPO:TAG FILE.wasm
        Pushes FILE.wasm as a Wasm OCI artifact the way wkg and oras do:
        one application/wasm layer, a config of the Wasm artifact type.
"""
import hashlib
import json
import os
import sys
import tempfile

import oras.client
import oras.provider

CONFIG = "application/vnd.wasm.config.v0+json"
LAYER = "application/wasm"


def client():
    return oras.client.OrasClient(insecure=True, tls_verify=False)


def pull(target, out):
    c = client()
    manifest = c.get_manifest(target)
    assert manifest["config"]["mediaType"] == CONFIG, manifest["config"]
    assert len(manifest["layers"]) == 1, manifest["layers"]
    layer = manifest["layers"][0]
    assert layer["mediaType"] == LAYER, layer
    container = c.get_container(target)
    resp = c.get_blob(container, layer["digest"])
    resp.raise_for_status()
    data = resp.content
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert digest == layer["digest"], (digest, layer["digest"])
    with open(out, "wb") as f:
        f.write(data)
    print(digest)


def push(target, path):
    with open(path, "rb") as f:
        data = f.read()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    config = {
        "created": "2026-01-01T00:00:00Z",
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [digest],
        "component": {"exports": [], "imports": [], "target": None},
    }
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        # oras-py names files by their path relative to the working directory.
        os.chdir(os.path.dirname(os.path.abspath(path)))
        c = client()
        c.push(
            target=target,
            files=[os.path.basename(path) + ":" + LAYER],
            manifest_config=cfg + ":" + CONFIG,
            disable_path_validation=True,
        )
    print(digest)


if __name__ == "__main__":
    cmd, target, path = sys.argv[1:4]
    {"pull": pull, "push": push}[cmd](target, path)
