//! An example marketplace plugin: the current weather at a place, from an
//! Open-Meteo-style HTTP API.
//!
//! One tool, `weather_now {"latitude", "longitude"}`, answering
//! `{"temperature_c", "wind_speed_kmh", "source"}`. It shows the three
//! things a network plugin needs from the SDK:
//!
//! - [`toolhost_sdk::http`]: it GETs
//!   `{base_url}/v1/forecast?latitude=..&longitude=..&current=temperature_2m,wind_speed_10m`
//!   through `wasi:http`. The host sends it only to the origins the operator
//!   granted (`plugins.grants.weather.http`) and refuses the rest in words
//!   that reach the model unchanged.
//! - [`toolhost_sdk::config`]: the API's base URL is the operator's setting
//!   `base_url` (`plugins.config.weather.base_url`), by default
//!   [`DEFAULT_BASE_URL`].
//! - [`toolhost_sdk::secret`]: the API key is the secret `api_key`
//!   (`toolhost secret set weather api_key`), sent as
//!   `Authorization: Bearer <key>`.
//!
//! The decisions are pure functions ([`validate`], [`base_url`],
//! [`forecast_request`], [`read_answer`]), unit-tested natively; only
//! [`WeatherNow`]'s `call` touches the host. See README.md for building,
//! signing, granting and configuring it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_sdk::{ToolError, TypedTool, config, http, log, secret};

/// The API asked when the operator sets no `base_url`.
pub const DEFAULT_BASE_URL: &str = "https://api.open-meteo.com";

/// The arguments of `weather_now`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Latitude in decimal degrees, from -90 (South Pole) to 90 (North Pole).
    #[schemars(range(min = -90, max = 90))]
    pub latitude: f64,
    /// Longitude in decimal degrees, from -180 to 180 (east of Greenwich is
    /// positive).
    #[schemars(range(min = -180, max = 180))]
    pub longitude: f64,
}

/// What `weather_now` answers.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Weather {
    /// Air temperature 2 m above the ground, in degrees Celsius.
    pub temperature_c: f64,
    /// Wind speed 10 m above the ground, in km/h.
    pub wind_speed_kmh: f64,
    /// The API the reading came from (its base URL).
    pub source: String,
}

/// `weather_now`: the current temperature and wind speed at a place.
pub struct WeatherNow;

impl TypedTool for WeatherNow {
    type Args = Args;
    type Output = Weather;
    const NAME: &'static str = "weather_now";
    const DESCRIPTION: &'static str = "The current weather at a place given by latitude and longitude: air \
        temperature (degrees Celsius) and wind speed (km/h), from a live weather API. Current conditions \
        only, no forecast.";
    // A round trip to a public API.
    const ESTIMATED_MS: u32 = 300;
    const MAX_MS: u32 = 5000;
    // Read-only: asking twice changes nothing.
    const IDEMPOTENT: bool = true;
    const PROBE_ARGUMENTS: Option<&'static str> = Some(r#"{"latitude":52.52,"longitude":13.41}"#);

    fn call(args: Args) -> Result<Weather, ToolError> {
        validate(&args)?;
        let base = base_url(config::get("base_url")?)?;
        let key = secret::get("api_key")?;
        let request = forecast_request(&base, &args, &key);
        log::debug(format_args!("GET {}", request.url()));
        let response = request.send()?;
        read_answer(response, &base)
    }
}

toolhost_sdk::plugin!(WeatherNow);

/// Checks the ranges the schema states (the host checks them too; this
/// keeps the tool right when called some other way).
pub fn validate(args: &Args) -> Result<(), ToolError> {
    if !(-90.0..=90.0).contains(&args.latitude) {
        return Err(ToolError::invalid_input(format!(
            "latitude must be between -90 and 90 degrees, not {}",
            args.latitude
        )));
    }
    if !(-180.0..=180.0).contains(&args.longitude) {
        return Err(ToolError::invalid_input(format!(
            "longitude must be between -180 and 180 degrees, not {}",
            args.longitude
        )));
    }
    Ok(())
}

/// The API's base URL from the operator's `base_url` setting:
/// [`DEFAULT_BASE_URL`] when unset or blank, without trailing slashes.
pub fn base_url(setting: Option<String>) -> Result<String, ToolError> {
    let Some(value) = setting.map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_BASE_URL.to_string());
    };
    let lower = value.to_ascii_lowercase();
    if !lower.starts_with("http://") && !lower.starts_with("https://") {
        return Err(ToolError::failed(format!(
            "the setting base_url is {value:?}, not an http:// or https:// URL \
             (the operator sets it in plugins.config.weather.base_url)"
        )));
    }
    Ok(value.trim_end_matches('/').to_string())
}

/// The request for the current weather at `args` from the API at `base`.
pub fn forecast_request(base: &str, args: &Args, api_key: &str) -> http::Request {
    http::get(format!("{base}/v1/forecast"))
        .query("latitude", args.latitude)
        .query("longitude", args.longitude)
        .query("current", "temperature_2m,wind_speed_10m")
        .header("accept", "application/json")
        .bearer_auth(api_key)
}

/// Maps the API's answer, `{"current": {"temperature_2m": 12.5,
/// "wind_speed_10m": 3.4}, ...}`, to a [`Weather`] from `source`. A status
/// that is not a success is an error naming it; a body without those
/// numbers is an error saying which are missing.
pub fn read_answer(response: http::Response, source: &str) -> Result<Weather, ToolError> {
    let response = response.error_for_status()?;
    let body: serde_json::Value = serde_json::from_slice(response.bytes())
        .map_err(|e| ToolError::failed(format!("the weather API at {source} did not answer JSON ({e})")))?;
    let number = |field: &str| body.get("current").and_then(|c| c.get(field)).and_then(serde_json::Value::as_f64);
    match (number("temperature_2m"), number("wind_speed_10m")) {
        (Some(temperature_c), Some(wind_speed_kmh)) => {
            Ok(Weather { temperature_c, wind_speed_kmh, source: source.to_string() })
        }
        (temperature, wind) => {
            let missing: Vec<&str> = [
                temperature.is_none().then_some("current.temperature_2m"),
                wind.is_none().then_some("current.wind_speed_10m"),
            ]
            .into_iter()
            .flatten()
            .collect();
            let what = if body.get("current").is_some_and(serde_json::Value::is_object) {
                format!("no number at {}", missing.join(" or "))
            } else {
                "no `current` object".to_string()
            };
            Err(ToolError::failed(format!(
                "the weather API at {source} answered in an unexpected shape: {what} \
                 (expected {{\"current\": {{\"temperature_2m\": <number>, \"wind_speed_10m\": <number>}}}})"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_sdk::{describe, invoke, output_schema};

    fn at(latitude: f64, longitude: f64) -> Args {
        Args { latitude, longitude }
    }

    #[test]
    fn coordinates_must_be_on_the_globe() {
        for good in [at(0.0, 0.0), at(90.0, 180.0), at(-90.0, -180.0), at(52.52, 13.41)] {
            assert_eq!(validate(&good), Ok(()), "{good:?}");
        }
        assert_eq!(
            validate(&at(90.5, 0.0)),
            Err(ToolError::invalid_input("latitude must be between -90 and 90 degrees, not 90.5"))
        );
        assert_eq!(
            validate(&at(-91.0, 0.0)),
            Err(ToolError::invalid_input("latitude must be between -90 and 90 degrees, not -91"))
        );
        assert_eq!(
            validate(&at(0.0, 180.25)),
            Err(ToolError::invalid_input("longitude must be between -180 and 180 degrees, not 180.25"))
        );
        assert!(validate(&at(f64::NAN, 0.0)).is_err());
        assert!(validate(&at(0.0, f64::NEG_INFINITY)).is_err());

        // Through the tool: out-of-range coordinates are refused before
        // anything is read or sent.
        let err = invoke::<WeatherNow>(r#"{"latitude":100,"longitude":0}"#).unwrap_err();
        assert_eq!(err, ToolError::invalid_input("latitude must be between -90 and 90 degrees, not 100"));
        let err = invoke::<WeatherNow>(r#"{"latitude":"north","longitude":0}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("`latitude`")), "{err}");
        let err = invoke::<WeatherNow>(r#"{"latitude":1,"longitude":2,"city":"Paris"}"#).unwrap_err();
        assert!(matches!(&err, ToolError::InvalidInput(m) if m.contains("unknown field `city`")), "{err}");
    }

    #[test]
    fn natively_a_valid_call_stops_at_the_missing_host() {
        let err = invoke::<WeatherNow>(r#"{"latitude":52.52,"longitude":13.41}"#).unwrap_err();
        assert!(matches!(&err, ToolError::Failed(m) if m.contains("wasi:config/store exists only inside toolhost")));
    }

    #[test]
    fn the_base_url_defaults_and_tolerates_a_trailing_slash() {
        assert_eq!(base_url(None).unwrap(), "https://api.open-meteo.com");
        assert_eq!(base_url(Some("  ".into())).unwrap(), "https://api.open-meteo.com");
        assert_eq!(base_url(Some("http://127.0.0.1:8080/".into())).unwrap(), "http://127.0.0.1:8080");
        assert_eq!(base_url(Some("https://example.test/weather//".into())).unwrap(), "https://example.test/weather");
        let err = base_url(Some("api.open-meteo.com".into())).unwrap_err();
        assert_eq!(
            err,
            ToolError::failed(
                "the setting base_url is \"api.open-meteo.com\", not an http:// or https:// URL \
                 (the operator sets it in plugins.config.weather.base_url)"
            )
        );
    }

    #[test]
    fn the_request_asks_for_current_conditions_with_the_key_as_a_bearer_token() {
        let r = forecast_request("https://api.open-meteo.com", &at(52.52, -13.41), "sk-test-1");
        assert_eq!(r.method(), "GET");
        assert_eq!(
            r.url(),
            "https://api.open-meteo.com/v1/forecast?latitude=52.52&longitude=-13.41&current=temperature_2m,wind_speed_10m"
        );
        assert_eq!(r.header_value("authorization"), Some("Bearer sk-test-1"));
        assert_eq!(r.header_value("accept"), Some("application/json"));
        assert!(r.body_bytes().is_empty());
        let r = forecast_request("http://127.0.0.1:8080", &at(0.0, 0.0), "k");
        assert_eq!(
            r.url(),
            "http://127.0.0.1:8080/v1/forecast?latitude=0&longitude=0&current=temperature_2m,wind_speed_10m"
        );
    }

    #[test]
    fn an_open_meteo_answer_maps_to_weather() {
        // What tests/peers/http_origin.py answers.
        let body = r#"{"current": {"temperature_2m": 12.5, "wind_speed_10m": 3.4}, "authorization": "Bearer k"}"#;
        let weather = read_answer(http::Response::new(200, body), "http://127.0.0.1:8080").unwrap();
        assert_eq!(
            weather,
            Weather { temperature_c: 12.5, wind_speed_kmh: 3.4, source: "http://127.0.0.1:8080".into() }
        );
        // Open-Meteo's own shape, with integers.
        let body = r#"{"latitude":52.52,"current_units":{"temperature_2m":"°C"},"current":{"time":"2025-01-01T12:00","interval":900,"temperature_2m":-3,"wind_speed_10m":0}}"#;
        let weather = read_answer(http::Response::new(200, body), DEFAULT_BASE_URL).unwrap();
        assert_eq!((weather.temperature_c, weather.wind_speed_kmh), (-3.0, 0.0));
    }

    #[test]
    fn a_failed_status_is_an_error_naming_it() {
        let response = http::Response::new(401, r#"{"error":true,"reason":"Invalid API key"}"#);
        let err = read_answer(response, DEFAULT_BASE_URL).unwrap_err();
        assert_eq!(err, ToolError::failed(r#"HTTP 401 Unauthorized: {"error":true,"reason":"Invalid API key"}"#));
        let err = read_answer(http::Response::new(503, ""), DEFAULT_BASE_URL).unwrap_err();
        assert_eq!(err, ToolError::failed("HTTP 503 Service Unavailable"));
    }

    #[test]
    fn an_answer_of_another_shape_says_what_is_missing() {
        let read = |body: &str| read_answer(http::Response::new(200, body), "https://w.test").unwrap_err();
        let expected = r#"(expected {"current": {"temperature_2m": <number>, "wind_speed_10m": <number>}})"#;
        assert_eq!(
            read(r#"{"current":{"temperature_2m":12.5}}"#),
            ToolError::failed(format!(
                "the weather API at https://w.test answered in an unexpected shape: \
                 no number at current.wind_speed_10m {expected}"
            ))
        );
        assert_eq!(
            read(r#"{"current":{"temperature_2m":"warm","wind_speed_10m":null}}"#),
            ToolError::failed(format!(
                "the weather API at https://w.test answered in an unexpected shape: \
                 no number at current.temperature_2m or current.wind_speed_10m {expected}"
            ))
        );
        assert_eq!(
            read(r#"{"hourly":{}}"#),
            ToolError::failed(format!(
                "the weather API at https://w.test answered in an unexpected shape: no `current` object {expected}"
            ))
        );
        let err = read("<html>maintenance</html>");
        assert!(
            matches!(&err, ToolError::Failed(m) if m.starts_with("the weather API at https://w.test did not answer JSON (")),
            "{err}"
        );
    }

    #[test]
    fn the_tool_is_described_with_typed_output() {
        let info = describe::<WeatherNow>();
        assert_eq!(info.name, "weather_now");
        assert_eq!((info.estimated_duration_ms, info.max_duration_ms), (300, 5000));
        assert!(info.idempotent);
        assert_eq!(info.cacheable_seconds, 0);
        let input: serde_json::Value = serde_json::from_str(&info.input_schema).unwrap();
        assert_eq!(input["required"], serde_json::json!(["latitude", "longitude"]));
        assert_eq!(input["additionalProperties"], false);
        assert_eq!(input["properties"]["latitude"]["minimum"], -90);
        assert_eq!(input["properties"]["latitude"]["maximum"], 90);
        assert_eq!(input["properties"]["longitude"]["minimum"], -180);
        assert_eq!(input["properties"]["longitude"]["maximum"], 180);
        let probe: Args = serde_json::from_str(info.probe_arguments.as_deref().unwrap()).unwrap();
        assert_eq!(validate(&probe), Ok(()));

        let output = output_schema::<WeatherNow>();
        assert_eq!(output["required"], serde_json::json!(["temperature_c", "wind_speed_kmh", "source"]));
        assert_eq!(output["properties"]["temperature_c"]["type"], "number");
        assert_eq!(output["properties"]["source"]["type"], "string");
    }
}
