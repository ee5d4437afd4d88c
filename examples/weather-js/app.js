// weather: the example marketplace plugin in JavaScript, the same tool as
// examples/weather (Rust) and examples/weather-py.
//
// `weather_now` reads the current temperature and wind at a place from an
// Open-Meteo-style API. The API's base URL is the setting `base_url`
// (`plugins.config.weather.base_url`, https://api.open-meteo.com by
// default); its key is the secret `api_key` (`toolhost secret set weather
// api_key`), sent as a Bearer header. fetch() goes through `wasi:http`: the
// host sends requests only to the origins granted in
// `plugins.grants.weather.http`, and says which origin it refused.
import { config, defineTool, failed, invalidInput, log, plugin, secret } from 'toolhost';

const DEFAULT_BASE_URL = 'https://api.open-meteo.com';

function baseUrl() {
  const value = (config.get('base_url') ?? '').trim();
  if (!value) return DEFAULT_BASE_URL;
  if (!/^https?:\/\//i.test(value)) {
    throw failed(`the setting base_url is ${JSON.stringify(value)}, not an http:// or https:// URL (the operator sets it in plugins.config.weather.base_url)`);
  }
  return value.replace(/\/+$/, '');
}

const weatherNow = defineTool(
  {
    name: 'weather_now',
    description:
      'The current weather at a place given by latitude and longitude: air temperature (degrees Celsius) and ' +
      'wind speed (km/h), from a live weather API. Current conditions only, no forecast.',
    inputSchema: {
      type: 'object',
      properties: {
        latitude: { type: 'number', minimum: -90, maximum: 90, description: 'Latitude in decimal degrees, -90 (south) to 90 (north).' },
        longitude: { type: 'number', minimum: -180, maximum: 180, description: 'Longitude in decimal degrees, -180 (west) to 180 (east).' },
      },
      required: ['latitude', 'longitude'],
      additionalProperties: false,
    },
    estimatedMs: 300,
    maxMs: 5000,
    idempotent: true,
    probeArguments: { latitude: 52.52, longitude: 13.41 },
  },
  async ({ latitude, longitude }) => {
    if (!(latitude >= -90 && latitude <= 90)) throw invalidInput(`latitude must be between -90 and 90 degrees, not ${latitude}`);
    if (!(longitude >= -180 && longitude <= 180)) throw invalidInput(`longitude must be between -180 and 180 degrees, not ${longitude}`);
    const base = baseUrl();
    const key = secret.get('api_key');
    const url = `${base}/v1/forecast?latitude=${latitude}&longitude=${longitude}&current=temperature_2m,wind_speed_10m`;
    log.debug(`GET ${base}/v1/forecast`);
    // A refused origin rejects fetch(); the host adds its reason, naming the origin.
    const response = await fetch(url, { headers: { accept: 'application/json', authorization: `Bearer ${key}` } });
    const text = await response.text();
    if (!response.ok) throw failed(`HTTP ${response.status} from ${base}: ${text.slice(0, 300)}`);
    let body;
    try {
      body = JSON.parse(text);
    } catch (e) {
      throw failed(`the weather API at ${base} did not answer JSON (${e})`);
    }
    const t = body?.current?.temperature_2m;
    const w = body?.current?.wind_speed_10m;
    if (typeof t !== 'number' || typeof w !== 'number') {
      throw failed(`the weather API at ${base} answered in an unexpected shape (expected {"current": {"temperature_2m": <number>, "wind_speed_10m": <number>}})`);
    }
    return { temperature_c: t, wind_speed_kmh: w, source: base };
  },
);

export const tool = plugin(weatherNow);
