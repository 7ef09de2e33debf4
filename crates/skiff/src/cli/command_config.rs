//! `--command-config FILE`: Kafka's client security properties in a Java properties file, as
//! `kafka-topics --command-config` and librdkafka read them: `security.protocol`,
//! `sasl.mechanism` (or librdkafka's `sasl.mechanisms`), `sasl.username`, `sasl.password` or
//! Kafka Java's `sasl.jaas.config`, and `ssl.ca.location`, `ssl.certificate.location`,
//! `ssl.key.location`, `ssl.endpoint.identification.algorithm`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use skiff_client::{
    EndpointIdentification, SaslConfig, SecurityConfig, SecurityProtocol, TlsConfig,
};

use super::Failure;

/// A command-config file's security settings, and the keys it has that are not read.
#[derive(Debug)]
pub struct CommandConfig {
    pub security: SecurityConfig,
    pub ignored: Vec<String>,
}

/// Reads `path`; a key it ignores is a warning on stderr, a value it cannot use a usage error.
pub fn load(path: &Path) -> Result<SecurityConfig, Failure> {
    let fail =
        |reason: String| Failure::usage(format!("--command-config {}: {reason}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let config = parse(&text).map_err(fail)?;
    for key in &config.ignored {
        eprintln!(
            "warning: --command-config {}: {key} is not read by skiff; ignored",
            path.display()
        );
    }
    Ok(config.security)
}

/// The security settings of a properties text. Errors never quote a value (it may be a secret).
pub fn parse(text: &str) -> Result<CommandConfig, String> {
    let mut properties: BTreeMap<String, String> = properties(text).into_iter().collect();
    let mut take = |key: &str| properties.remove(key);
    let protocol = take("security.protocol")
        .map(|v| v.parse::<SecurityProtocol>())
        .transpose()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let endpoint_identification = take("ssl.endpoint.identification.algorithm")
        .map(|v| v.parse::<EndpointIdentification>())
        .transpose()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let tls = TlsConfig {
        ca_location: take("ssl.ca.location").map(PathBuf::from),
        certificate_location: take("ssl.certificate.location").map(PathBuf::from),
        key_location: take("ssl.key.location").map(PathBuf::from),
        endpoint_identification,
    };
    let mechanism = take("sasl.mechanism").or(take("sasl.mechanisms"));
    let username = take("sasl.username");
    let password = take("sasl.password");
    let jaas = take("sasl.jaas.config");
    let sasl = mechanism
        .map(|mechanism| sasl_config(&mechanism, username, password, jaas.as_deref()))
        .transpose()?;
    Ok(CommandConfig {
        security: SecurityConfig {
            protocol,
            tls,
            sasl,
        },
        ignored: properties.into_keys().collect(),
    })
}

/// The mechanism with its credentials: `sasl.username` and `sasl.password`, or else those of
/// `sasl.jaas.config`.
fn sasl_config(
    mechanism: &str,
    username: Option<String>,
    password: Option<String>,
    jaas: Option<&str>,
) -> Result<SaslConfig, String> {
    if mechanism.trim().eq_ignore_ascii_case("OAUTHBEARER") {
        return Err(
            "sasl.mechanism OAUTHBEARER: the skiff command has no token source; use PLAIN or SCRAM"
                .into(),
        );
    }
    let from_jaas = jaas.map(jaas_credentials).transpose()?;
    let (jaas_username, jaas_password) = from_jaas.unzip();
    match (username.or(jaas_username), password.or(jaas_password)) {
        (Some(username), Some(password)) => {
            SaslConfig::with_password(mechanism, username, password).map_err(|e| e.to_string())
        }
        _ => Err(format!(
            "sasl.mechanism {mechanism} needs sasl.username and sasl.password, or sasl.jaas.config"
        )),
    }
}

/// The key/value pairs of a Java properties text: blank lines, `#` and `!` comments,
/// `key=value`, `key: value` or `key value`, a line ending in `\` continued on the next, and
/// Java's escapes. A later key wins.
fn properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let mut logical = line.to_string();
        while ends_in_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_key(&logical);
        out.push((unescape(key), unescape(value)));
    }
    out
}

/// Whether a line ends in an odd number of backslashes (an even number are escaped ones).
fn ends_in_continuation(line: &str) -> bool {
    line.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace (with the whitespace and
/// one `=` or `:` around it).
fn split_key(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' => return (&line[..i], line[i + 1..].trim_start()),
            c if c.is_whitespace() => {
                let rest = line[i..].trim_start();
                let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
                return (&line[..i], rest.trim_start());
            }
            _ => {}
        }
    }
    (line, "")
}

/// Java's properties escapes: `\t`, `\n`, `\r`, `\f`, `\uXXXX`; a backslash before anything
/// else stands for that character.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => {
                        out.push('u');
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// The login modules whose `username` and `password` options are SASL credentials.
const LOGIN_MODULES: [&str; 2] = [
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.plain.PlainLoginModule",
];

/// The user name and password of Kafka Java's `sasl.jaas.config`:
/// `<ScramLoginModule or PlainLoginModule> required username="..." password="...";`.
fn jaas_credentials(config: &str) -> Result<(String, String), String> {
    let (module, mut options) = jaas_options(config)?;
    if !LOGIN_MODULES.contains(&module.as_str()) {
        return Err(format!(
            "sasl.jaas.config: {module} is not supported (one of: {})",
            LOGIN_MODULES.join(", ")
        ));
    }
    match (options.remove("username"), options.remove("password")) {
        (Some(username), Some(password)) => Ok((username, password)),
        _ => Err("sasl.jaas.config: needs username=\"...\" and password=\"...\"".into()),
    }
}

/// The login module and options of a one-module JAAS configuration:
/// `<module> <flag> key=value ... ;`, values quoted (with `\` escapes) or bare.
fn jaas_options(config: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let (module, rest) = next_word(config);
    let (flag, mut rest) = next_word(rest);
    if module.is_empty() {
        return Err(
            "sasl.jaas.config: expected `<LoginModule> required key=\"value\" ...;`".into(),
        );
    }
    if !["required", "requisite", "sufficient", "optional"].contains(&flag) {
        return Err(
            "sasl.jaas.config: the login module must be followed by its control flag (required, \
             requisite, sufficient or optional)"
                .into(),
        );
    }
    let mut options = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix(';') {
            if after.trim().is_empty() {
                break;
            }
            return Err("sasl.jaas.config: one login module only".into());
        }
        let (key, after) = rest
            .split_once('=')
            .ok_or("sasl.jaas.config: expected key=value options")?;
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err("sasl.jaas.config: expected key=value options".into());
        }
        let (value, after) = jaas_value(after.trim_start())?;
        options.insert(key.to_string(), value);
        rest = after;
    }
    Ok((module.to_string(), options))
}

/// The first word of `text` (ended by whitespace or `;`) and what follows it.
fn next_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text
        .find(|c: char| c.is_whitespace() || c == ';')
        .unwrap_or(text.len());
    text.split_at(end)
}

/// One option value and what follows it: `"quoted \" text"` or a bare word.
fn jaas_value(text: &str) -> Result<(String, &str), String> {
    let Some(quoted) = text.strip_prefix('"') else {
        let end = text
            .find(|c: char| c.is_whitespace() || c == ';')
            .unwrap_or(text.len());
        return Ok((text[..end].to_string(), &text[end..]));
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            '"' => return Ok((value, &quoted[i + 1..])),
            c => value.push(c),
        }
    }
    Err("sasl.jaas.config: a quoted value does not end".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_librdkafka_style_file_gives_every_setting() {
        let config = parse(
            "# SASL over TLS\n\
             security.protocol=SASL_SSL\n\
             \n\
             sasl.mechanisms = SCRAM-SHA-512\n\
             sasl.username: alice\n\
             sasl.password=p=ss:word#1\n\
             ssl.ca.location=/etc/skiff/ca.pem\n\
             ssl.certificate.location /etc/skiff/client.crt\n\
             ssl.key.location=/etc/skiff/client.key\n\
             ssl.endpoint.identification.algorithm=\n\
             client.id=reporting\n",
        )
        .expect("parses");
        let security = config.security;
        assert_eq!(security.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            security.tls,
            TlsConfig {
                ca_location: Some("/etc/skiff/ca.pem".into()),
                certificate_location: Some("/etc/skiff/client.crt".into()),
                key_location: Some("/etc/skiff/client.key".into()),
                endpoint_identification: EndpointIdentification::None,
            }
        );
        match security.sasl {
            Some(SaslConfig::Scram {
                mechanism,
                username,
                password,
            }) => {
                assert_eq!(mechanism.name(), "SCRAM-SHA-512");
                assert_eq!(username, "alice");
                assert_eq!(password, "p=ss:word#1");
            }
            other => panic!("expected SCRAM, got {other:?}"),
        }
        assert_eq!(config.ignored, vec!["client.id".to_string()]);
    }

    #[test]
    fn kafka_javas_jaas_config_gives_the_credentials() {
        let config = parse(
            "security.protocol=SASL_PLAINTEXT\n\
             sasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\\n\
             \x20   required username=\"bob\" password=\"say \\\\\"hi\\\\\"\";\n",
        )
        .expect("parses");
        match config.security.sasl {
            Some(SaslConfig::Plain { username, password }) => {
                assert_eq!(username, "bob");
                assert_eq!(password, "say \"hi\"");
            }
            other => panic!("expected PLAIN, got {other:?}"),
        }
        let scram = jaas_credentials(
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=carol password=\"x;y\";",
        );
        assert_eq!(scram, Ok(("carol".into(), "x;y".into())));
    }

    #[test]
    fn mistakes_are_errors_that_never_quote_a_password() {
        let missing = parse("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n");
        assert!(missing.is_err_and(|e| e.contains("sasl.username")));
        let kerberos = parse(
            "sasl.mechanism=PLAIN\nsasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;\n",
        );
        assert!(kerberos.is_err_and(|e| e.contains("Krb5LoginModule")));
        let open_quote = jaas_credentials(
            "org.apache.kafka.common.security.plain.PlainLoginModule required password=\"hunter2",
        );
        assert!(open_quote.is_err_and(|e| !e.contains("hunter2")));
        let no_flag = jaas_credentials(
            "org.apache.kafka.common.security.plain.PlainLoginModule password=\"hunter2\";",
        );
        assert!(no_flag.is_err_and(|e| !e.contains("hunter2")));
        assert!(parse("security.protocol=TLS\n").is_err());
        assert!(parse("sasl.mechanism=OAUTHBEARER\n").is_err());
    }

    #[test]
    fn java_properties_escapes_and_continuations() {
        assert_eq!(
            properties("a\\=b = c\\td\\u0041\n! comment\nlong = one \\\n    two\n"),
            vec![
                ("a=b".to_string(), "c\tdA".to_string()),
                ("long".to_string(), "one two".to_string()),
            ]
        );
        assert!(ends_in_continuation("x\\"));
        assert!(!ends_in_continuation("x\\\\"));
    }
}
