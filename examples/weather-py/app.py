"""weather: the example marketplace plugin in Python, the same tool as
examples/weather (Rust) and examples/weather-js.

`weather_now` reads the current temperature and wind at a place from an
Open-Meteo-style API. The API's base URL is the setting `base_url`
(`plugins.config.weather.base_url`, https://api.open-meteo.com by default);
its key is the secret `api_key` (`toolhost secret set weather api_key`),
sent as a Bearer header. Requests go through `wasi:http` (`toolhost.http`):
the host sends them only to the origins granted in
`plugins.grants.weather.http`, and refuses others in words naming them.
"""

from toolhost import Plugin, config, failed, http, invalid_input, secret, tool
from wit_world.imports import host

DEFAULT_BASE_URL = "https://api.open-meteo.com"


def base_url() -> str:
    value = (config.get("base_url") or "").strip()
    if not value:
        return DEFAULT_BASE_URL
    if not value.lower().startswith(("http://", "https://")):
        raise failed(f"the setting base_url is {value!r}, not an http:// or https:// URL "
                     "(the operator sets it in plugins.config.weather.base_url)")
    return value.rstrip("/")


@tool(
    description="The current weather at a place given by latitude and longitude: air temperature "
                "(degrees Celsius) and wind speed (km/h), from a live weather API. Current conditions "
                "only, no forecast.",
    schema={
        "type": "object",
        "properties": {
            "latitude": {"type": "number", "minimum": -90, "maximum": 90,
                         "description": "Latitude in decimal degrees, -90 (south) to 90 (north)."},
            "longitude": {"type": "number", "minimum": -180, "maximum": 180,
                          "description": "Longitude in decimal degrees, -180 (west) to 180 (east)."},
        },
        "required": ["latitude", "longitude"],
        "additionalProperties": False,
    },
    estimated_ms=300,
    max_ms=5000,
    idempotent=True,
    probe_arguments={"latitude": 52.52, "longitude": 13.41},
)
def weather_now(args):
    latitude, longitude = args["latitude"], args["longitude"]
    if not -90 <= latitude <= 90:
        raise invalid_input(f"latitude must be between -90 and 90 degrees, not {latitude}")
    if not -180 <= longitude <= 180:
        raise invalid_input(f"longitude must be between -180 and 180 degrees, not {longitude}")
    base = base_url()
    key = secret.get("api_key")
    params = {"latitude": latitude, "longitude": longitude, "current": "temperature_2m,wind_speed_10m"}
    host.log(host.LogLevel.DEBUG, f"GET {base}/v1/forecast")
    answer = http.get(f"{base}/v1/forecast", params=params, headers={"accept": "application/json"},
                      bearer=key).raise_for_status()
    try:
        body = answer.json()
    except http.HttpError:
        raise failed(f"the weather API at {base} did not answer JSON")
    current = body.get("current") if isinstance(body, dict) else None
    t = current.get("temperature_2m") if isinstance(current, dict) else None
    w = current.get("wind_speed_10m") if isinstance(current, dict) else None
    if not isinstance(t, (int, float)) or not isinstance(w, (int, float)):
        raise failed(f"the weather API at {base} answered in an unexpected shape (expected "
                     '{"current": {"temperature_2m": <number>, "wind_speed_10m": <number>}})')
    return {"temperature_c": t, "wind_speed_kmh": w, "source": base}


class Tool(Plugin):
    tools = [weather_now]
