//! What the operator allows a client to ask of the upstream with the
//! operator's key: which models (`voice.openai.models`,
//! `voice.gemini.models`), and caps on generation settings
//! (`voice.max_output_tokens`, `voice.max_temperature`).

use super::RelayError;
use serde_json::{Map, Value, json};
use toolhost_config::VoiceUpstream;

/// The default OpenAI Realtime model.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-realtime";
/// The default Gemini Live model.
pub const DEFAULT_GEMINI_MODEL: &str = "models/gemini-live-2.5-flash-preview";
/// The default cap on a response's output tokens (OpenAI Realtime's own
/// maximum).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4096;

/// The models one upstream serves to clients.
#[derive(Debug, Clone)]
pub(super) struct Models {
    /// Gemini names are kept without `models/`.
    gemini: bool,
    default: String,
    allowed: Vec<String>,
    /// The config key, for errors.
    key: &'static str,
}

impl Models {
    pub(super) fn from_config(cfg: &VoiceUpstream, gemini: bool) -> Result<Models, RelayError> {
        let which = if gemini { "gemini" } else { "openai" };
        let norm = |m: &str| {
            let m = m.trim();
            if gemini { m.strip_prefix("models/").unwrap_or(m).to_string() } else { m.to_string() }
        };
        let mut allowed: Vec<String> = cfg.models.iter().map(|m| norm(m)).collect();
        let builtin = if gemini { DEFAULT_GEMINI_MODEL } else { DEFAULT_OPENAI_MODEL };
        let default =
            cfg.model.as_deref().map(norm).or_else(|| allowed.first().cloned()).unwrap_or_else(|| norm(builtin));
        if default.is_empty() || allowed.iter().any(String::is_empty) {
            return Err(RelayError::Config(format!("{which}.model(s): an empty model name")));
        }
        if allowed.is_empty() {
            allowed.push(default.clone());
        } else if !allowed.contains(&default) {
            return Err(RelayError::Config(format!("{which}.model {default:?} is not one of {which}.models")));
        }
        let key = if gemini { "voice.gemini.models" } else { "voice.openai.models" };
        Ok(Models { gemini, default, allowed, key })
    }

    /// The model to ask the upstream for when a client asks for `asked`
    /// (`None`: the default), or the client's error.
    pub(super) fn pick(&self, asked: Option<&str>) -> Result<String, String> {
        let Some(asked) = asked.filter(|a| !a.is_empty()) else { return Ok(self.upstream_name(&self.default)) };
        let name = if self.gemini { asked.strip_prefix("models/").unwrap_or(asked) } else { asked };
        if self.allowed.iter().any(|a| a == name) {
            return Ok(self.upstream_name(name));
        }
        let shown: String = asked.chars().take(40).collect();
        Err(format!("model {shown:?} is not allowed here; allowed: {} ({})", self.allowed.join(", "), self.key))
    }

    fn upstream_name(&self, name: &str) -> String {
        if self.gemini { format!("models/{name}") } else { name.to_string() }
    }
}

/// Caps on what a client may set.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caps {
    pub(super) max_output_tokens: u64,
    pub(super) max_temperature: Option<f64>,
}

impl Caps {
    /// An OpenAI `session` (of `session.update`) or `response` (of
    /// `response.create`) object, held to the caps. `fill`: the token cap
    /// is set even when the client set nothing (the session's default is
    /// unbounded, `"inf"`).
    pub(super) fn openai(&self, object: &mut Map<String, Value>, fill: bool) {
        let mut set = false;
        // The GA name, and the beta one.
        for key in ["max_output_tokens", "max_response_output_tokens"] {
            if let Some(v) = object.get_mut(key) {
                *v = json!(self.tokens(v));
                set = true;
            }
        }
        if fill && !set {
            object.insert("max_output_tokens".into(), json!(self.max_output_tokens));
        }
        self.temperature(object);
    }

    /// A Gemini `setup`, held to the caps: `generationConfig` under one
    /// spelling, its `maxOutputTokens` always set.
    pub(super) fn gemini(&self, setup: &mut Map<String, Value>) {
        let mut config = Map::new();
        for key in ["generation_config", "generationConfig"] {
            if let Some(Value::Object(c)) = setup.remove(key) {
                config.extend(c);
            }
        }
        let mut tokens = self.max_output_tokens;
        for key in ["max_output_tokens", "maxOutputTokens"] {
            if let Some(v) = config.remove(key) {
                tokens = self.tokens(&v);
            }
        }
        config.insert("maxOutputTokens".into(), json!(tokens));
        self.temperature(&mut config);
        setup.insert("generationConfig".into(), Value::Object(config));
    }

    /// A client's token setting, capped: a number above the cap, `"inf"`
    /// or anything else that is no positive number gives the cap.
    fn tokens(&self, v: &Value) -> u64 {
        match v.as_u64() {
            Some(n) if n > 0 => n.min(self.max_output_tokens),
            _ => self.max_output_tokens,
        }
    }

    fn temperature(&self, object: &mut Map<String, Value>) {
        let (Some(max), Some(t)) = (self.max_temperature, object.get_mut("temperature")) else { return };
        if t.as_f64().is_none_or(|v| v > max) {
            *t = json!(max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(model: Option<&str>, models: &[&str]) -> VoiceUpstream {
        VoiceUpstream {
            url: "ws://x".into(),
            api_key_env: None,
            model: model.map(str::to_string),
            models: models.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn the_configured_model_only_by_default_and_gemini_names_with_or_without_their_prefix() {
        let m = Models::from_config(&upstream(None, &[]), false).unwrap();
        assert_eq!(m.pick(None).unwrap(), "gpt-realtime");
        assert!(m.pick(Some("gpt-4o-realtime-preview")).unwrap_err().contains("voice.openai.models"));
        let g = Models::from_config(&upstream(None, &["gemini-a", "models/gemini-b"]), true).unwrap();
        assert_eq!(g.pick(None).unwrap(), "models/gemini-a");
        assert_eq!(g.pick(Some("models/gemini-b")).unwrap(), "models/gemini-b");
        assert_eq!(g.pick(Some("gemini-b")).unwrap(), "models/gemini-b");
        assert!(g.pick(Some("models/gemini-ultra")).is_err());
        assert!(Models::from_config(&upstream(Some("x"), &["y"]), false).is_err());
    }

    #[test]
    fn token_and_temperature_caps_lower_what_a_client_asks_and_fill_what_it_leaves_unbounded() {
        let caps = Caps { max_output_tokens: 1000, max_temperature: Some(1.0) };
        let mut s = json!({"max_output_tokens": "inf", "temperature": 1.5}).as_object().unwrap().clone();
        caps.openai(&mut s, false);
        assert_eq!(Value::Object(s), json!({"max_output_tokens": 1000, "temperature": 1.0}));
        let mut s = Map::new();
        caps.openai(&mut s, true);
        assert_eq!(s["max_output_tokens"], 1000);
        let mut setup = json!({"generation_config": {"max_output_tokens": 1_000_000, "temperature": 0.5}})
            .as_object()
            .unwrap()
            .clone();
        caps.gemini(&mut setup);
        assert_eq!(Value::Object(setup), json!({"generationConfig": {"maxOutputTokens": 1000, "temperature": 0.5}}));
    }
}
