#!/usr/bin/env python3
"""A voice client on toolhost's Gemini Live relay, with the official `google-genai` SDK.

toolhost (`toolhost serve --http`) speaks the Gemini Live wire format
(BidiGenerateContent) under /voice and relays it to the upstream voice API.
It declares the agent's tools in the session setup and runs their function
calls itself: this client sees the `toolCall` messages but must not answer
them.

Reads utterances from stdin, one per line. For each: sends it as one
realtime audio chunk, then prints every server message as one JSON line on
stdout until the model's `turnComplete`. Exits 0 at end of input, after
closing the session.

Audio: real audio is 16-bit PCM at 16 kHz; this example sends each line's
UTF-8 bytes instead, which a scripted test upstream reads back as text.

TLS: the SDK always connects with wss:// (an http:// or https:// --url is
turned into wss://HOST:PORT/...), and verifies the server against certifi's
CAs, or against the CA bundle in SSL_CERT_FILE (or the directory
SSL_CERT_DIR) when set. For a toolhost with a self-signed certificate:

  SSL_CERT_FILE=ca.pem python gemini_live.py --url https://127.0.0.1:8722/voice \\
      --token "$TOOLHOST_TOKEN" < utterances.txt

The SDK connects to
URL/ws/google.ai.generativelanguage.API_VERSION.GenerativeService.BidiGenerateContent
with the header `x-goog-api-key: TOKEN` (a toolhost token, not a Google key).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from google import genai
from google.genai import errors, types
from websockets.exceptions import ConnectionClosed


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def summarize(message: types.LiveServerMessage) -> dict:
    """One printed line: which kind of message, and its interesting fields."""
    data = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    out: dict = {"type": ",".join(sorted(data)) or "empty"}
    if message.tool_call:
        out["function_calls"] = [{"id": c.id, "name": c.name, "args": c.args}
                                 for c in message.tool_call.function_calls or []]
    content = message.server_content
    if content:
        if content.input_transcription:
            out["input_transcription"] = content.input_transcription.text
        if content.output_transcription:
            out["output_transcription"] = content.output_transcription.text
        if content.model_turn:
            parts = content.model_turn.parts or []
            out["text"] = "".join(p.text or "" for p in parts)
            audio = sum(len(p.inline_data.data or b"") for p in parts if p.inline_data)
            if audio:
                out["audio_bytes"] = audio
        if content.turn_complete:
            out["turn_complete"] = True
    if message.session_resumption_update:
        out["resumable"] = message.session_resumption_update.resumable
    return out


async def run(args: argparse.Namespace) -> None:
    # The SDK appends "/ws/..." to the URL as given: a trailing slash would double it.
    client = genai.Client(api_key=args.token,
                          http_options=types.HttpOptions(base_url=args.url.rstrip("/"), api_version=args.api_version))
    config = types.LiveConnectConfig(
        response_modalities=[args.modality],
        input_audio_transcription=types.AudioTranscriptionConfig(),
        # With AUDIO answers, also ask for their transcript.
        output_audio_transcription=types.AudioTranscriptionConfig() if args.modality == "AUDIO" else None,
        system_instruction="You are a helpful voice assistant. Be brief.",
    )
    async with client.aio.live.connect(model=args.model, config=config) as session:
        # connect() has read the server's first message: it must be setupComplete.
        if session.setup_complete is None:
            raise RuntimeError("the server's first message was not setupComplete")
        emit({"type": "setupComplete"})
        # Read stdin off the event loop, so the connection is served while we wait.
        while line := await asyncio.to_thread(sys.stdin.readline):
            utterance = line.strip()
            if not utterance:
                continue
            await session.send_realtime_input(
                audio=types.Blob(data=utterance.encode(), mime_type="audio/pcm;rate=16000"))
            # receive() ends after the message with turnComplete. A toolCall on the way
            # is toolhost's to run: it answers upstream, and the model's answer follows.
            async with asyncio.timeout(args.timeout):
                async for message in session.receive():
                    emit(summarize(message))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="toolhost's Live endpoint, e.g. https://127.0.0.1:8722/voice")
    parser.add_argument("--token", required=True, help="toolhost bearer token (sent as the API key)")
    parser.add_argument("--model", default="models/gemini-live-2.5-flash-preview", help="default: %(default)s")
    parser.add_argument("--api-version", default="v1beta", help="in the endpoint's path (default: %(default)s)")
    parser.add_argument("--modality", choices=["AUDIO", "TEXT"], default="AUDIO",
                        help="response modality (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each turn")
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except errors.APIError as err:  # closed while receiving: its close code and reason
        print(f"gemini_live: connection closed: {err.code} {err.details}", file=sys.stderr)
        return 1
    except ConnectionClosed as err:  # closed while sending
        print(f"gemini_live: connection closed: {err}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"gemini_live: no turnComplete within {args.timeout} s", file=sys.stderr)
        return 1
    except Exception as err:  # connection refused, TLS failure, ...
        print(f"gemini_live: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
