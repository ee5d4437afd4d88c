"""toolhost's client role as the client under test of the MCP conformance suite.

    conformance client --command "PYTHON conformance_client.py" --scenario S

runs this with the scenario's server URL appended as the last argument, the
scenario name in MCP_CONFORMANCE_SCENARIO and, for scenarios that hand out
credentials, MCP_CONFORMANCE_CONTEXT (JSON: client_id, client_secret, ...).

It writes a toolhost.yaml with one `mcp.servers` entry for that URL
(streamable HTTP; `auth.oauth` client credentials when the context has a
client_id and client_secret, the secret passed through the environment as
`${CONFORMANCE_CLIENT_SECRET}`) into a temporary directory, and runs the
toolhost CLI there, built-ins off, so the registry holds only the scenario
server's tools:

- `toolhost servers --json` when the scenario only checks the handshake
  (`initialize`): exit 0 only if the server is up;
- otherwise `toolhost call TOOL ARGS`, the tool the scenario's server expects
  (see TOOLS): toolhost connects, lists the tools and calls that one.

Exit status: 0 when toolhost did what the scenario asks, else toolhost's (or
2). toolhost's stdout and stderr pass through (the suite records them).
Scenarios under auth/ whose context has no client credentials use the
authorization-code flow: the adapter first runs `toolhost auth login
conformance --print-url-to FILE` and plays the browser, fetching the
printed authorization URL (the suite's authorization endpoints redirect
straight back with a code, to toolhost's loopback listener); `toolhost call`
then uses the stored login. For auth/basic-cimd the config names the
suite's client ID metadata document URL (`auth.oauth.client_metadata_url`).

TOOLHOST_BIN names the binary (required). CONFORMANCE_PREREGISTERED=ID:SECRET
gives client credentials to scenarios whose context has none (the suite's
authorization servers issue a token to any client): this exercises
toolhost's discovery against the suite's metadata variants, which otherwise
only the authorization-code flow reaches.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

# The tool each scenario's server expects to be called, with its arguments.
# Every auth/* scenario server offers `test-tool` behind its authorization.
# The elicitation scenario asks to "accept with defaults": the adapter runs
# `toolhost call --accept-defaults`, as a user answering that way would.
TOOLS = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}
AUTH_TOOL = ("test-tool", {})
# Scenarios that only check the handshake.
HANDSHAKE_ONLY = {"initialize"}
# The client ID metadata document URL auth/basic-cimd expects as client_id.
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def has_credentials(context: dict) -> bool:
    return bool(context.get("client_id") and (context.get("client_secret") or context.get("private_key_pem")))


def config(url: str, context: dict, scenario: str) -> str:
    """toolhost.yaml for one server at `url` (JSON is YAML)."""
    server = {"name": "conformance", "transport": "streamable-http", "url": url}
    if context.get("private_key_pem") and context.get("client_id"):
        # private_key_jwt: the key in a file beside the config, as an
        # operator keeps it (written by main, mode 0600).
        server["auth"] = {
            "oauth": {
                "client_id": context["client_id"],
                "private_key_file": "client-key.pem",
                "signing_alg": context.get("signing_algorithm", "ES256"),
            }
        }
    elif has_credentials(context):
        server["auth"] = {
            "oauth": {
                "client_id": context["client_id"],
                "client_secret": "${CONFORMANCE_CLIENT_SECRET}",
            }
        }
        if context.get("idp_token_endpoint"):
            # Cross-app access: the user's ID token (from their sign-in at
            # the identity provider) in the environment, as an operator's
            # sign-in helper would leave it.
            server["auth"]["oauth"]["cross_app"] = {
                "idp_token_url": context["idp_token_endpoint"],
                "idp_client_id": context["idp_client_id"],
                "id_token": "${CONFORMANCE_ID_TOKEN}",
            }
    elif scenario == "auth/basic-cimd":
        server["auth"] = {"oauth": {"client_metadata_url": CIMD_URL}}
    return json.dumps({"mcp": {"servers": [server]}}, indent=2) + "\n"


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: conformance_client.py URL (the conformance suite appends it)", file=sys.stderr)
        return 2
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    preregistered = os.environ.get("CONFORMANCE_PREREGISTERED", "")
    if ":" in preregistered and not context.get("client_id"):
        context["client_id"], context["client_secret"] = preregistered.split(":", 1)
    toolhost = os.environ.get("TOOLHOST_BIN")
    if not toolhost:
        print("TOOLHOST_BIN must name the toolhost binary", file=sys.stderr)
        return 2
    if scenario in HANDSHAKE_ONLY:
        tool = None
    elif scenario in TOOLS:
        tool = TOOLS[scenario]
    elif scenario.startswith("auth/"):
        tool = AUTH_TOOL
    else:
        print(f"conformance_client.py: no tool known for scenario {scenario!r}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="toolhost-conformance-") as d:
        with open(os.path.join(d, "toolhost.yaml"), "w") as f:
            f.write(config(url, context, scenario))
        if context.get("private_key_pem"):
            key = os.path.join(d, "client-key.pem")
            with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(context["private_key_pem"])
        env = dict(os.environ)
        env["TOOLHOST_STATE_DIR"] = os.path.join(d, "state")
        env["CONFORMANCE_CLIENT_SECRET"] = context.get("client_secret", "")
        env["CONFORMANCE_ID_TOKEN"] = context.get("idp_id_token", "")
        env.setdefault("TOOLHOST_LOG", "info")
        common = ["--no-builtins", "--no-cache"]
        if tool is None:
            run = subprocess.run([toolhost, "servers", "--json", *common], cwd=d, env=env, capture_output=True, text=True)
            sys.stdout.write(run.stdout)
            sys.stderr.write(run.stderr)
            if run.returncode != 0:
                return run.returncode
            states = [s.get("state") for s in json.loads(run.stdout)]
            return 0 if states == ["up"] else 1
        if scenario.startswith("auth/") and not has_credentials(context):
            # The suite runs every scenario at once; sse-retry measures
            # reconnection timing, which fifteen sign-ins starting beside it
            # on a small machine can upset. They start a little later.
            time.sleep(float(os.environ.get("CONFORMANCE_LOGIN_DELAY", "2")))
            code = login(toolhost, d, env)
            if code != 0:
                return code
        name, args = tool
        flags = ["--accept-defaults"] if scenario.startswith("elicitation") else []
        if not scenario.startswith("auth/"):
            run = subprocess.run([toolhost, "call", name, json.dumps(args), *flags, *common], cwd=d, env=env)
            return run.returncode
        # A server that wants more scope mid-call has toolhost sign in
        # again: the URL goes to --print-url-to, and the adapter plays the
        # browser for it as for `auth login`.
        url_file = os.path.join(d, "step-up-urls")
        proc = subprocess.Popen(
            [toolhost, "call", name, json.dumps(args), "--print-url-to", url_file, *common], cwd=d, env=env
        )
        return play_browser(proc, url_file)


def login(toolhost: str, d: str, env: dict) -> int:
    """`toolhost auth login conformance`, the adapter playing the browser."""
    url_file = os.path.join(d, "authorize-url")
    proc = subprocess.Popen(
        [toolhost, "auth", "login", "conformance", "--print-url-to", url_file, "--timeout", "30"],
        cwd=d,
        env=env,
    )
    return play_browser(proc, url_file)


def play_browser(proc: subprocess.Popen, url_file: str) -> int:
    """Opens each URL toolhost writes to `url_file` (one per line) until it exits."""
    deadline = time.monotonic() + 40
    opened = 0
    # No proxy: the redirect goes to toolhost's loopback listener.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while proc.poll() is None and time.monotonic() < deadline:
        urls = []
        if os.path.exists(url_file):
            with open(url_file) as f:
                urls = [line.strip() for line in f if line.strip()]
        for authorize in urls[opened:]:
            opened += 1
            try:
                with opener.open(authorize, timeout=20) as page:
                    sys.stderr.write("browser: " + page.read().decode("utf-8", "replace") + "\n")
            except Exception as e:  # toolhost reports the failure itself
                sys.stderr.write(f"browser: {e}\n")
        time.sleep(0.05)
    try:
        return proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        return 2


if __name__ == "__main__":
    sys.exit(main())
