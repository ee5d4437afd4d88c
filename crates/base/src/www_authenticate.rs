//! `WWW-Authenticate` (RFC 9110 §11.6.1): the one parser of its
//! challenges, for the OAuth client (RFC 6750, RFC 9728) and the OCI
//! registry client (the distribution spec's token flow) alike.

/// The challenges of a `WWW-Authenticate` header: each scheme with its
/// `name=value` parameters (values unquoted; a token68 is skipped).
pub fn challenges(header: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let b = header.as_bytes();
    let mut i = 0;
    let is_token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/".contains(&c);
    let skip_space = |i: &mut usize| {
        while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t' || b[*i] == b',') {
            *i += 1;
        }
    };
    loop {
        skip_space(&mut i);
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        if i == start {
            i += 1; // not a token: skip the character
            continue;
        }
        let word = &header[start..i];
        let mut j = i;
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        if j < b.len() && b[j] == b'=' && !out.is_empty() && !(j + 1 < b.len() && b[j + 1] == b'=') {
            // name=value of the current challenge.
            i = j + 1;
            while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                i += 1;
            }
            let value = if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    let c = header[i..].chars().next().unwrap_or('\u{fffd}');
                    v.push(c);
                    i += c.len_utf8();
                }
                i += 1;
                v
            } else {
                let vs = i;
                while i < b.len() && b[i] != b',' && b[i] != b' ' && b[i] != b'\t' {
                    i += 1;
                }
                header[vs..i].to_string()
            };
            if let Some(last) = out.last_mut() {
                last.1.push((word.to_string(), value));
            }
        } else if j < b.len() && b[j] == b'=' {
            // A token68 (`abc==`): skip it.
            i = j;
            while i < b.len() && b[i] == b'=' {
                i += 1;
            }
        } else {
            out.push((word.to_string(), Vec::new()));
        }
    }
    out
}

/// The parameters of the first challenge of `scheme` (compared without
/// case) in `header`, names lowercased, values unquoted and unescaped;
/// empty when there is none.
pub fn params(header: &str, scheme: &str) -> Vec<(String, String)> {
    challenges(header)
        .into_iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
        .map(|(_, p)| p.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parameters_are_read_with_quotes_escapes_and_other_schemes() {
        let p = params(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
            "bearer",
        );
        assert_eq!(p[0], ("realm".into(), "https://auth.example/token".into()));
        assert_eq!(p[1], ("service".into(), "registry.example".into()));
        assert_eq!(p[2], ("scope".into(), "repository:a/b:pull".into()));
        assert!(params("Basic", "bearer").is_empty());
        let p = params(r#"Basic realm="x", Bearer Realm="a\"b", error=invalid_token"#, "bearer");
        assert_eq!(p, vec![("realm".into(), "a\"b".into()), ("error".into(), "invalid_token".into())]);
        let c = challenges("Negotiate abc==, Bearer scope=\"x y\"");
        assert_eq!(c.len(), 2);
        assert_eq!(c[1], ("Bearer".into(), vec![("scope".into(), "x y".into())]));
    }
}
