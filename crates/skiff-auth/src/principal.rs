//! Who a client is, as Kafka names it: [`KafkaPrincipal`] (`User:alice`), the subject DN of a
//! client certificate formatted as Java's `X500Principal.getName()` ([`subject_dn`]), and
//! Kafka's `ssl.principal.mapping.rules` that turn that DN into a short name
//! ([`SslPrincipalMapper`]).

use std::fmt;
use std::iter::Peekable;
use std::str::Chars;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use x509_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::{AttributeTypeAndValue, FromDer, RelativeDistinguishedName, X509Name};

/// The principal type of users, and of every principal Kafka's own authenticators build.
pub const USER_TYPE: &str = "User";

/// A principal as Kafka writes it: `{principal_type}:{name}`, for example `User:alice`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KafkaPrincipal {
    /// The principal type, `User` for every principal Kafka's authenticators build.
    pub principal_type: String,
    /// The name, for example a SASL username or a mapped certificate DN.
    pub name: String,
}

impl KafkaPrincipal {
    /// The user principal `User:{name}`.
    pub fn user(name: impl Into<String>) -> Self {
        Self {
            principal_type: USER_TYPE.to_owned(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`, the principal of unauthenticated connections.
    pub fn anonymous() -> Self {
        Self::user("ANONYMOUS")
    }

    /// Parses `type:name`, splitting at the first `:` (names may contain colons).
    ///
    /// Unlike Kafka's `SecurityUtils.parseKafkaPrincipal`, which accepts `User:` and `:alice`,
    /// both parts must be non-empty.
    pub fn parse(text: &str) -> Result<Self, PrincipalError> {
        match text.split_once(':') {
            Some((principal_type, name)) if !principal_type.is_empty() && !name.is_empty() => {
                Ok(Self {
                    principal_type: principal_type.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(PrincipalError::Malformed(text.to_owned())),
        }
    }

    /// Whether this is `User:*`, the principal that ACLs use to mean every principal.
    pub fn is_wildcard(&self) -> bool {
        self.principal_type == USER_TYPE && self.name == "*"
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A principal or a certificate that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PrincipalError {
    /// Not `type:name` with both parts non-empty (Kafka's message).
    #[error("expected a string in format principalType:principalName but got {0}")]
    Malformed(String),
    /// The certificate is not DER, or its subject holds a value that cannot be decoded.
    #[error("invalid certificate: {0}")]
    Certificate(String),
}

/// Trims as Java's `String.trim()` does: every character up to and including U+0020.
pub(crate) fn java_trim(text: &str) -> &str {
    text.trim_matches(|c: char| c <= ' ')
}

// ---------------------------------------------------------------------------------------------
// Subject DN
// ---------------------------------------------------------------------------------------------

/// The subject DN of a DER certificate, formatted as Java's `X500Principal.getName()` (RFC 2253),
/// which is what Kafka hands to `ssl.principal.mapping.rules`.
///
/// RDNs come most specific first (the reverse of their encoding), multi-valued RDNs are joined
/// with `+`, and attributes without an RFC 2253 keyword are written as the dotted OID and `#`
/// followed by the hex of the value's DER encoding. Escaping follows Java, which escapes
/// `,=+<>#;"\` anywhere in a value, not only where RFC 2253 requires it.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, PrincipalError> {
    let (rest, cert) = X509Certificate::from_der(cert_der)
        .map_err(|err| PrincipalError::Certificate(err.to_string()))?;
    if !rest.is_empty() {
        return Err(PrincipalError::Certificate(
            "trailing bytes after the certificate".to_owned(),
        ));
    }
    rfc2253_name(cert.subject())
}

/// Formats a name as Java's `X500Name.getRFC2253Name()`.
fn rfc2253_name(name: &X509Name<'_>) -> Result<String, PrincipalError> {
    let rdns: Vec<&RelativeDistinguishedName<'_>> = name.iter_rdn().collect();
    let formatted = rdns
        .into_iter()
        .rev()
        .map(rfc2253_rdn)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(formatted.join(","))
}

/// Formats one RDN: its attributes in encoding order, joined with `+`.
fn rfc2253_rdn(rdn: &RelativeDistinguishedName<'_>) -> Result<String, PrincipalError> {
    let attributes = rdn
        .iter()
        .map(rfc2253_attribute)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(attributes.join("+"))
}

/// Formats `KEYWORD=value`, or `dotted.oid=#hex` for attributes Java has no RFC 2253 keyword for.
fn rfc2253_attribute(attribute: &AttributeTypeAndValue<'_>) -> Result<String, PrincipalError> {
    let oid = attribute.attr_type().to_id_string();
    let value = attribute.attr_value();
    match rfc2253_keyword(&oid) {
        Some(keyword) => match decode_directory_string(value)? {
            Some(text) => Ok(format!("{keyword}={}", escape_rfc2253(&text))),
            None => Ok(format!("{keyword}=#{}", der_hex(value)?)),
        },
        None => Ok(format!("{oid}=#{}", der_hex(value)?)),
    }
}

/// The keywords Java writes in RFC 2253 names; every other attribute is written as its OID.
fn rfc2253_keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return None,
    })
}

/// The text of a string value, decoded as Java does; `None` for types Java writes as hex.
fn decode_directory_string(value: &Any<'_>) -> Result<Option<String>, PrincipalError> {
    let bytes = value.data;
    let text = match value.tag() {
        Tag::Utf8String => std::str::from_utf8(bytes)
            .map_err(|_| invalid_string("UTF8String"))?
            .to_owned(),
        // Java reads these one byte per character (ISO-8859-1).
        Tag::PrintableString | Tag::T61String | Tag::Ia5String | Tag::GeneralString => {
            bytes.iter().map(|&byte| char::from(byte)).collect()
        }
        Tag::BmpString => decode_utf16_be(bytes)?,
        _ => return Ok(None),
    };
    Ok(Some(text))
}

fn decode_utf16_be(bytes: &[u8]) -> Result<String, PrincipalError> {
    let (units, odd) = bytes.as_chunks::<2>();
    if !odd.is_empty() {
        return Err(invalid_string("BMPString"));
    }
    let units = units.iter().map(|&pair| u16::from_be_bytes(pair));
    char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map_err(|_| invalid_string("BMPString"))
}

fn invalid_string(kind: &str) -> PrincipalError {
    PrincipalError::Certificate(format!("subject holds a malformed {kind}"))
}

/// Lower-case hex of the value's whole DER encoding (tag, length and content), as Java writes it.
fn der_hex(value: &Any<'_>) -> Result<String, PrincipalError> {
    let der = value
        .to_der_vec()
        .map_err(|err| PrincipalError::Certificate(err.to_string()))?;
    Ok(der.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Escapes a value as Java's `AVA.toRFC2253String`: a backslash before each of `,=+<>#;"\`,
/// `\00` for NUL, and a backslash before every leading or trailing space or carriage return.
fn escape_rfc2253(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                escaped.push('\\');
                escaped.push(c);
            }
            '\0' => escaped.push_str("\\00"),
            _ => escaped.push(c),
        }
    }
    escape_edge_spaces(&escaped)
}

fn escape_edge_spaces(value: &str) -> String {
    let is_space = |c: char| c == ' ' || c == '\r';
    let body_start = value.len() - value.trim_start_matches(is_space).len();
    let body_end = value.trim_end_matches(is_space).len();
    let mut escaped = String::with_capacity(value.len() + 2);
    for (index, c) in value.char_indices() {
        if index < body_start || index >= body_end {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

// ---------------------------------------------------------------------------------------------
// ssl.principal.mapping.rules
// ---------------------------------------------------------------------------------------------

/// Java's `\s`: ASCII whitespace only.
const JAVA_WHITESPACE: &str = r"[ \t\n\x0B\x0C\r]";

/// One rule, as Kafka's `SslPrincipalMapper.RULE_PATTERN`: `DEFAULT` (group 1), or
/// `RULE:pattern/replacement/[LU]` (groups 2, 4 and 6, where `\` escapes a `/`), or anything
/// else (group 7), which is an empty rule when empty and an invalid one otherwise.
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

/// Kafka's `RULE_SPLITTER`: one rule with the whitespace around it and the comma after it.
static RULE_SPLITTER: LazyLock<Regex> = LazyLock::new(|| {
    let ws = JAVA_WHITESPACE;
    Regex::new(&format!(r"{ws}*({RULE_PATTERN}){ws}*(,{ws}*|$)"))
        .expect("the rule splitter is a valid regex")
});

/// Kafka's `RULE_PARSER`, anchored at the start as Java's `Matcher.lookingAt()`.
static RULE_PARSER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"\A(?:{RULE_PATTERN})")).expect("the rule parser is a valid regex")
});

/// Kafka's `ssl.principal.mapping.rules`: maps a certificate's subject DN to a principal name.
///
/// The rules are a comma-separated list (whitespace and newlines around the commas are ignored)
/// of `DEFAULT`, which keeps the DN as it is, and `RULE:pattern/replacement/`, optionally ending
/// in `L` or `U` to lower- or upper-case the result. A rule applies when its pattern matches the
/// whole DN; every match of the pattern in the DN is then replaced by the replacement, where
/// `$1` or `${name}` insert a group and `\` escapes the next character. The first rule that
/// applies wins.
///
/// Patterns use the `regex` crate's syntax, which is Java's for the usual constructs: Java-only
/// ones (lookaround, backreferences, possessive quantifiers) are rejected, and `\w`, `\d` and
/// `\s` are Unicode-aware.
///
/// Where Kafka's parsing differs: a list with no rules means `DEFAULT` (Kafka would map no DN);
/// text that Kafka's splitter silently skips, such as two rules separated by a newline but no
/// comma, is an error; and a `$n` naming a group the pattern does not have is literal text even
/// when the pattern has no groups at all (Kafka then fails each mapping).
#[derive(Clone, Debug)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

impl SslPrincipalMapper {
    /// Parses a rule list in Kafka's syntax.
    pub fn parse(rules: &str) -> Result<Self, RuleError> {
        let mut parsed = Vec::new();
        for text in split_rules(java_trim(rules))? {
            if let Some(rule) = Rule::parse(text)? {
                parsed.push(rule);
            }
        }
        if parsed.is_empty() {
            parsed.push(Rule::Default);
        }
        Ok(Self { rules: parsed })
    }

    /// The principal name for `dn`, from the first rule that applies to it.
    pub fn map(&self, dn: &str) -> Result<String, NoRuleMatched> {
        self.rules
            .iter()
            .find_map(|rule| rule.apply(dn))
            .ok_or_else(|| NoRuleMatched {
                dn: dn.to_owned(),
                rules: self.to_string(),
            })
    }
}

impl Default for SslPrincipalMapper {
    /// The mapper for `DEFAULT`, Kafka's default rules: the principal name is the DN.
    fn default() -> Self {
        Self {
            rules: vec![Rule::Default],
        }
    }
}

/// The rules as Kafka prints them, for example `[RULE:^CN=(.*?),.*$/$1/L, DEFAULT]`.
impl fmt::Display for SslPrincipalMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (index, rule) in self.rules.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{rule}")?;
        }
        f.write_str("]")
    }
}

/// Splits a trimmed rule list as Kafka's `RULE_SPLITTER`, requiring the pieces to cover the
/// whole text: Kafka silently skips what its splitter cannot match.
fn split_rules(rules: &str) -> Result<Vec<&str>, RuleError> {
    let mut pieces = Vec::new();
    let mut covered = 0;
    for captures in RULE_SPLITTER.captures_iter(rules) {
        let (Some(whole), Some(rule)) = (captures.get(0), captures.get(1)) else {
            continue;
        };
        if whole.start() != covered {
            return Err(unsplittable(rules, covered, whole.start()));
        }
        covered = whole.end();
        pieces.push(rule.as_str());
    }
    if covered != rules.len() {
        return Err(unsplittable(rules, covered, rules.len()));
    }
    Ok(pieces)
}

fn unsplittable(rules: &str, start: usize, end: usize) -> RuleError {
    RuleError::Unsplittable {
        text: rules.get(start..end).unwrap_or(rules).to_owned(),
    }
}

/// A rule list that could not be parsed; the messages follow Kafka's where Kafka has one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RuleError {
    /// Text after a rule, such as `DEFAULT/L` or a fourth `/` (Kafka's message).
    #[error("Invalid rule: `{rule}`, unmatched substring: `{unmatched}`")]
    Unmatched {
        /// The rule as written.
        rule: String,
        /// What follows the part of it that reads as a rule.
        unmatched: String,
    },
    /// Text Kafka's splitter would silently skip, such as rules separated by a newline only.
    #[error("Invalid rules: `{text}` is not a rule followed by a comma")]
    Unsplittable {
        /// The skipped text.
        text: String,
    },
    /// A pattern the `regex` crate rejects, or a malformed replacement.
    #[error("Invalid rule: `{rule}`: {reason}")]
    Invalid {
        /// The rule as written.
        rule: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// No rule applied to a DN (Kafka's `NoMatchingRule`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("No rules apply to {dn}, rules {rules}")]
pub struct NoRuleMatched {
    /// The DN that no rule applied to.
    pub dn: String,
    /// The rules, as [`SslPrincipalMapper`] displays them.
    pub rules: String,
}

#[derive(Clone, Debug)]
enum Rule {
    Default,
    Replace(ReplaceRule),
}

impl Rule {
    /// Parses one rule as Kafka's `parseRules`; `None` for an empty rule, which Kafka ignores.
    fn parse(text: &str) -> Result<Option<Self>, RuleError> {
        let captures = RULE_PARSER.captures(text);
        let end = captures
            .as_ref()
            .and_then(|captures| captures.get(0))
            .map_or(0, |whole| whole.end());
        if end != text.len() {
            return Err(RuleError::Unmatched {
                rule: text.to_owned(),
                unmatched: text.get(end..).unwrap_or_default().to_owned(),
            });
        }
        let Some(captures) = captures else {
            return Ok(None);
        };
        if captures.get(1).is_some() {
            return Ok(Some(Self::Default));
        }
        match (captures.get(2), captures.get(4)) {
            (Some(pattern), Some(replacement)) => {
                let case = match captures.get(6).map(|flag| flag.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                ReplaceRule::new(pattern.as_str(), replacement.as_str(), case)
                    .map(|rule| Some(Self::Replace(rule)))
                    .map_err(|reason| RuleError::Invalid {
                        rule: text.to_owned(),
                        reason,
                    })
            }
            _ => Ok(None),
        }
    }

    fn apply(&self, dn: &str) -> Option<String> {
        match self {
            Self::Default => Some(dn.to_owned()),
            Self::Replace(rule) => rule.apply(dn),
        }
    }
}

/// Prints a rule as Kafka's `Rule.toString()`.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("DEFAULT"),
            Self::Replace(rule) => {
                write!(f, "RULE:{}/{}", rule.search.as_str(), rule.replacement_text)?;
                match rule.case {
                    Case::Keep => Ok(()),
                    Case::Lower => f.write_str("/L"),
                    Case::Upper => f.write_str("/U"),
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Clone, Debug)]
struct ReplaceRule {
    /// The pattern as written, used to find the parts of the DN to replace.
    search: Regex,
    /// The pattern anchored at both ends, as Java's `Matcher.matches()`.
    whole: Regex,
    replacement_text: String,
    replacement: Replacement,
    case: Case,
}

impl ReplaceRule {
    fn new(pattern: &str, replacement: &str, case: Case) -> Result<Self, String> {
        let search = Regex::new(pattern).map_err(|err| err.to_string())?;
        let whole = Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(|err| err.to_string())?;
        Ok(Self {
            replacement: Replacement::parse(replacement, &search)?,
            replacement_text: replacement.to_owned(),
            search,
            whole,
            case,
        })
    }

    /// Kafka's `Rule.apply`: when the pattern matches the whole DN, `dn.replaceAll(pattern,
    /// replacement)`, then the case change.
    fn apply(&self, dn: &str) -> Option<String> {
        if !self.whole.is_match(dn) {
            return None;
        }
        let replaced = self.replace_all(dn);
        Some(match self.case {
            Case::Keep => replaced,
            Case::Lower => replaced.to_lowercase(),
            Case::Upper => replaced.to_uppercase(),
        })
    }

    /// Java's `String.replaceAll`: replaces each match in turn, where an empty match may follow
    /// a non-empty one (the `regex` crate's own `replace_all` skips those).
    fn replace_all(&self, dn: &str) -> String {
        let mut replaced = String::with_capacity(dn.len());
        let mut copied = 0;
        let mut from = 0;
        while from <= dn.len() {
            let Some(captures) = self.search.captures_at(dn, from) else {
                break;
            };
            let Some(found) = captures.get(0) else {
                break;
            };
            replaced.push_str(dn.get(copied..found.start()).unwrap_or_default());
            self.replacement.append(&captures, &mut replaced);
            copied = found.end();
            from = if found.is_empty() {
                let next = dn.get(copied..).and_then(|rest| rest.chars().next());
                copied + next.map_or(1, char::len_utf8)
            } else {
                copied
            };
        }
        replaced.push_str(dn.get(copied..).unwrap_or_default());
        replaced
    }
}

/// A replacement in Java's `Matcher.appendReplacement` syntax, parsed against its pattern.
#[derive(Clone, Debug)]
struct Replacement {
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    Group(usize),
    Named(String),
}

impl Replacement {
    fn parse(text: &str, pattern: &Regex) -> Result<Self, String> {
        let group_count = pattern.captures_len().saturating_sub(1);
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let piece = match c {
                '\\' => {
                    let escaped = chars.next().ok_or("character to be escaped is missing")?;
                    literal.push(escaped);
                    continue;
                }
                '$' => match chars.peek() {
                    Some('{') => Piece::Named(named_group(&mut chars, pattern)?),
                    Some(digit) if digit.is_ascii_digit() => {
                        match numbered_group(&mut chars, group_count) {
                            Some(group) => Piece::Group(group),
                            None => {
                                literal.push('$');
                                continue;
                            }
                        }
                    }
                    _ => return Err("illegal group reference".to_owned()),
                },
                _ => {
                    literal.push(c);
                    continue;
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Self { pieces })
    }

    /// Appends the replacement for one match; a group that took no part inserts nothing.
    fn append(&self, captures: &Captures<'_>, out: &mut String) {
        for piece in &self.pieces {
            let text = match piece {
                Piece::Text(text) => Some(text.as_str()),
                Piece::Group(group) => captures.get(*group).map(|found| found.as_str()),
                Piece::Named(name) => captures.name(name).map(|found| found.as_str()),
            };
            out.push_str(text.unwrap_or_default());
        }
    }
}

/// Reads `{name}` after a `$`; the pattern must have a group of that name.
fn named_group(chars: &mut Peekable<Chars<'_>>, pattern: &Regex) -> Result<String, String> {
    chars.next();
    let mut name = String::new();
    loop {
        match chars.next() {
            Some('}') => break,
            Some(c) => name.push(c),
            None => return Err("named capturing group is missing trailing '}'".to_owned()),
        }
    }
    if pattern.capture_names().flatten().any(|group| group == name) {
        Ok(name)
    } else {
        Err(format!("no group with name {{{name}}}"))
    }
}

/// Reads the group number after a `$` as Java does: the first digit always, then each further
/// digit while the number stays a group of the pattern. `None` (the `$` is literal text, and the
/// digits stay unread) when the first digit already names no group, as Kafka escapes it.
fn numbered_group(chars: &mut Peekable<Chars<'_>>, group_count: usize) -> Option<usize> {
    let first = chars.peek()?.to_digit(10)? as usize;
    if first > group_count {
        return None;
    }
    chars.next();
    let mut group = first;
    while let Some(digit) = chars.peek().and_then(|c| c.to_digit(10)) {
        let longer = group * 10 + digit as usize;
        if longer > group_count {
            break;
        }
        group = longer;
        chars.next();
    }
    Some(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rcgen::string::{BmpString, UniversalString};
    use rcgen::{CertificateParams, DistinguishedName, DnType, DnValue, KeyPair};

    #[test]
    fn principal_parse_and_display() {
        let alice = KafkaPrincipal::parse("User:alice").unwrap();
        assert_eq!(alice, KafkaPrincipal::user("alice"));
        assert_eq!(alice.to_string(), "User:alice");
        // Split at the first colon only.
        let dn = KafkaPrincipal::parse("User:CN=a:b,O=c").unwrap();
        assert_eq!(
            (dn.principal_type.as_str(), dn.name.as_str()),
            ("User", "CN=a:b,O=c")
        );
        assert_eq!(KafkaPrincipal::anonymous().to_string(), "User:ANONYMOUS");
        assert_eq!(
            KafkaPrincipal::parse("Group:ops").unwrap().principal_type,
            "Group"
        );
    }

    #[test]
    fn principal_parse_rejects_malformed() {
        for text in ["", "bob", ":alice", "User:", ":"] {
            assert_eq!(
                KafkaPrincipal::parse(text),
                Err(PrincipalError::Malformed(text.to_owned()))
            );
        }
        assert_eq!(
            KafkaPrincipal::parse("bob").unwrap_err().to_string(),
            "expected a string in format principalType:principalName but got bob"
        );
    }

    #[test]
    fn wildcard_principal() {
        assert!(KafkaPrincipal::parse("User:*").unwrap().is_wildcard());
        assert!(!KafkaPrincipal::parse("Group:*").unwrap().is_wildcard());
        assert!(!KafkaPrincipal::user("alice").is_wildcard());
    }

    #[test]
    fn principal_serde_round_trip() {
        let alice = KafkaPrincipal::user("alice");
        let json = serde_json::to_string(&alice).unwrap();
        assert_eq!(
            serde_json::from_str::<KafkaPrincipal>(&json).unwrap(),
            alice
        );
    }

    // --- subject DN -------------------------------------------------------------------------

    /// A self-signed certificate whose subject has `attributes`, one RDN each, in this order.
    fn certificate(attributes: Vec<(DnType, DnValue)>) -> Vec<u8> {
        let mut subject = DistinguishedName::new();
        for (kind, value) in attributes {
            subject.push(kind, value);
        }
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = subject;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn utf8(text: &str) -> DnValue {
        DnValue::Utf8String(text.to_owned())
    }

    #[test]
    fn subject_dn_lists_the_most_specific_rdn_first() {
        let der = certificate(vec![
            (DnType::CountryName, utf8("US")),
            (DnType::OrganizationName, utf8("Acme")),
            (DnType::OrganizationalUnitName, utf8("eng")),
            (DnType::CommonName, utf8("alice")),
        ]);
        assert_eq!(subject_dn(&der).unwrap(), "CN=alice,OU=eng,O=Acme,C=US");
    }

    #[test]
    fn subject_dn_keeps_the_encoded_order_reversed() {
        let der = certificate(vec![
            (DnType::CommonName, utf8("alice")),
            (DnType::LocalityName, utf8("Paris")),
            (DnType::StateOrProvinceName, utf8("IDF")),
            (DnType::CountryName, utf8("FR")),
        ]);
        assert_eq!(subject_dn(&der).unwrap(), "C=FR,ST=IDF,L=Paris,CN=alice");
    }

    #[test]
    fn subject_dn_escapes_as_java() {
        let cases = [
            (
                r#"a,b+c"d\e<f>g;h=i#j"#,
                r#"CN=a\,b\+c\"d\\e\<f\>g\;h\=i\#j"#,
            ),
            ("#hash", r"CN=\#hash"),
            ("  two spaces  ", r"CN=\ \ two spaces\ \ "),
            (" ", r"CN=\ "),
            ("nul\0", r"CN=nul\00"),
            ("Zoë Ünïcode", "CN=Zoë Ünïcode"),
            ("under_score@x.y", "CN=under_score@x.y"),
        ];
        for (value, expected) in cases {
            let der = certificate(vec![(DnType::CommonName, utf8(value))]);
            assert_eq!(subject_dn(&der).unwrap(), expected, "value {value:?}");
        }
    }

    #[test]
    fn subject_dn_decodes_every_directory_string() {
        let der = certificate(vec![
            (
                DnType::CountryName,
                DnValue::PrintableString("US".try_into().unwrap()),
            ),
            (
                DnType::OrganizationName,
                DnValue::TeletexString("Acme".try_into().unwrap()),
            ),
            (
                DnType::OrganizationalUnitName,
                DnValue::Ia5String("eng".try_into().unwrap()),
            ),
            (
                DnType::CommonName,
                DnValue::BmpString(BmpString::try_from("Zoë €").unwrap()),
            ),
        ]);
        assert_eq!(subject_dn(&der).unwrap(), "CN=Zoë €,OU=eng,O=Acme,C=US");
    }

    #[test]
    fn subject_dn_writes_unnamed_attributes_and_other_types_as_hex() {
        let email = DnType::CustomDnType(vec![1, 2, 840, 113_549, 1, 9, 1]);
        let der = certificate(vec![
            (
                DnType::CustomDnType(vec![0, 9, 2342, 19_200_300, 100, 1, 25]),
                utf8("example"),
            ),
            (DnType::CustomDnType(vec![2, 5, 4, 9]), utf8("1 Main St")),
            (
                DnType::CustomDnType(vec![0, 9, 2342, 19_200_300, 100, 1, 1]),
                utf8("alice"),
            ),
            (email, DnValue::Ia5String("a@b.c".try_into().unwrap())),
            (
                DnType::CommonName,
                DnValue::UniversalString(UniversalString::try_from("ab").unwrap()),
            ),
        ]);
        assert_eq!(
            subject_dn(&der).unwrap(),
            "CN=#1c080000006100000062,1.2.840.113549.1.9.1=#16056140622e63,\
             UID=alice,STREET=1 Main St,DC=example"
        );
    }

    /// DER TLV with a definite length.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            len @ 0..0x80 => out.push(len as u8),
            len @ 0x80..0x100 => out.extend([0x81, len as u8]),
            len => out.extend([0x82, (len >> 8) as u8, len as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// An attribute whose type is `2.5.4.{last}` and whose value is a UTF8String.
    fn attribute(last: u8, value: &str) -> Vec<u8> {
        let oid = tlv(0x06, &[0x55, 0x04, last]);
        tlv(0x30, &[oid, tlv(0x0c, value.as_bytes())].concat())
    }

    fn name(rdns: &[Vec<Vec<u8>>]) -> Vec<u8> {
        let sets: Vec<u8> = rdns
            .iter()
            .flat_map(|attributes| tlv(0x31, &attributes.concat()))
            .collect();
        tlv(0x30, &sets)
    }

    fn format_name(der: &[u8]) -> String {
        let (rest, name) = X509Name::from_der(der).unwrap();
        assert!(rest.is_empty());
        rfc2253_name(&name).unwrap()
    }

    #[test]
    fn multi_valued_rdns_are_joined_with_plus_in_encoding_order() {
        let der = name(&[
            vec![attribute(6, "US")],
            vec![attribute(10, "Acme"), attribute(11, "eng")],
            vec![attribute(3, "alice"), attribute(11, "ops")],
        ]);
        assert_eq!(format_name(&der), "CN=alice+OU=ops,O=Acme+OU=eng,C=US");
    }

    #[test]
    fn repeated_attributes_keep_their_order() {
        let der = name(&[
            vec![attribute(11, "first")],
            vec![attribute(11, "second")],
            vec![attribute(3, "x")],
        ]);
        assert_eq!(format_name(&der), "CN=x,OU=second,OU=first");
    }

    #[test]
    fn empty_subject_is_empty() {
        assert_eq!(format_name(&name(&[])), "");
    }

    #[test]
    fn malformed_certificates_are_errors() {
        assert!(matches!(
            subject_dn(&[]),
            Err(PrincipalError::Certificate(_))
        ));
        assert!(matches!(
            subject_dn(&[0x30, 0x03, 0x02, 0x01]),
            Err(PrincipalError::Certificate(_))
        ));
        let mut der = certificate(vec![(DnType::CommonName, utf8("alice"))]);
        der.push(0);
        assert!(matches!(
            subject_dn(&der),
            Err(PrincipalError::Certificate(_))
        ));
    }

    // --- ssl.principal.mapping.rules --------------------------------------------------------

    fn mapper(rules: &str) -> SslPrincipalMapper {
        SslPrincipalMapper::parse(rules).unwrap()
    }

    #[test]
    fn valid_rules() {
        for rules in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        ] {
            assert!(SslPrincipalMapper::parse(rules).is_ok(), "{rules}");
        }
    }

    #[test]
    fn invalid_rules() {
        for rules in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        ] {
            assert!(SslPrincipalMapper::parse(rules).is_err(), "{rules}");
        }
        assert_eq!(
            SslPrincipalMapper::parse("DEFAULT/L")
                .unwrap_err()
                .to_string(),
            "Invalid rule: `DEFAULT/L`, unmatched substring: `/L`"
        );
    }

    #[test]
    fn invalid_patterns_and_replacements() {
        for rules in [
            "RULE:(unclosed/$1/",
            "RULE:(?<=lookbehind)x/$1/",
            "RULE:(x)/$x/",
            "RULE:(x)/${missing}/",
            "RULE:(x)/${open/",
        ] {
            assert!(
                matches!(
                    SslPrincipalMapper::parse(rules),
                    Err(RuleError::Invalid { .. })
                ),
                "{rules}"
            );
        }
    }

    #[test]
    fn ssl_principal_mapper() {
        let rules = [
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
            "DEFAULT",
        ]
        .join(", ");
        let mapper = mapper(&rules);
        assert_eq!(
            mapper.map("CN=Duke,OU=ServiceUsers,O=Org,C=US").unwrap(),
            "duke"
        );
        assert_eq!(
            mapper
                .map("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US")
                .unwrap(),
            "duke@sme"
        );
        assert_eq!(
            mapper.map("cn=duke,ou=sme,dc=mycp,dc=com").unwrap(),
            "DUKE@SME"
        );
        assert_eq!(
            mapper
                .map("cN=duke,OU=JavaSoft,O=Sun Microsystems")
                .unwrap(),
            "DUKE"
        );
        assert_eq!(
            mapper.map("OU=JavaSoft,O=Sun Microsystems,C=US").unwrap(),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
    }

    #[test]
    fn rules_splitting() {
        let cases = [
            // A list without rules means DEFAULT (Kafka: no rules at all).
            ("", "[DEFAULT]"),
            (",   , , ,      , , ,   ", "[DEFAULT]"),
            ("DEFAULT", "[DEFAULT]"),
            ("RULE://", "[RULE:/]"),
            ("RULE:/.*/", "[RULE:/.*]"),
            ("RULE:/.*/L", "[RULE:/.*/L]"),
            ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
            ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
            (
                "  RULE:   /     / ,  DEFAULT  ",
                "[RULE:   /     , DEFAULT]",
            ),
            (
                "  RULE:  /     /U   ,DEFAULT  ",
                "[RULE:  /     /U, DEFAULT]",
            ),
            (
                "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
                "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            ),
            // Empty rules are ignored.
            (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
            (
                ",  , RULE: /   /    ,,,   DEFAULT, ,   ",
                "[RULE: /   , DEFAULT]",
            ),
            (
                "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,",
                "[RULE:   /  /U, DEFAULT]",
            ),
            // Escape sequences.
            (r"RULE:\/\\\(\)\n\t/\/\//", r"[RULE:\/\\\(\)\n\t/\/\/]"),
            (
                r"RULE:\**\/+/*/L,RULE:\/*\**/**/",
                r"[RULE:\**\/+/*/L, RULE:\/*\**/**]",
            ),
            // Rules rule.
            (
                r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
                r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
            ),
            // Newlines around commas are whitespace.
            (
                "RULE:^CN=(.*?),.*$/$1/,\n  DEFAULT\n",
                "[RULE:^CN=(.*?),.*$/$1, DEFAULT]",
            ),
        ];
        for (rules, expected) in cases {
            assert_eq!(mapper(rules).to_string(), expected, "{rules:?}");
        }
    }

    #[test]
    fn rules_separated_by_a_newline_alone_are_an_error() {
        // Kafka's splitter would silently drop the first rule.
        assert_eq!(
            SslPrincipalMapper::parse("RULE:^CN=(\\w+).*$/$1/\nDEFAULT").unwrap_err(),
            RuleError::Unsplittable {
                text: "RULE:^CN=(\\w+).*$/$1/".to_owned()
            }
        );
    }

    #[test]
    fn comma_with_whitespace() {
        let mapper = mapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT");
        assert_eq!(
            mapper
                .map(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz")
                .unwrap(),
            r"Tkac\, Adam"
        );
    }

    #[test]
    fn no_rule_matched() {
        let mapper = mapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L");
        let err = mapper.map("CN=alice,OU=eng").unwrap_err();
        assert_eq!(
            err.to_string(),
            "No rules apply to CN=alice,OU=eng, rules [RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L]"
        );
    }

    #[test]
    fn default_mapper_keeps_the_dn() {
        assert_eq!(
            SslPrincipalMapper::default().map("CN=a,O=b").unwrap(),
            "CN=a,O=b"
        );
    }

    #[test]
    fn replacement_syntax_follows_java() {
        let cases = [
            // Each match of the pattern in the DN is replaced, as Java's replaceAll, including
            // an empty match right after another.
            ("RULE:(a*)/[$1]/", "aa", "[aa][]"),
            ("RULE:(.*)/<$1>/", "CN=x", "<CN=x><>"),
            // A group number takes digits while they name a group.
            ("RULE:^(C)(N)=(.*)$/$12/", "CN=x", "C2"),
            (
                "RULE:^(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)(.*)$/$12-$10/",
                "abcdefghijklm",
                "lm-j",
            ),
            // A first digit naming no group is literal, as Kafka escapes it.
            ("RULE:^CN=(.*)$/$1@$4/", "CN=x", "x@$4"),
            ("RULE:^CN=.*$/$1/", "CN=x", "$1"),
            ("RULE:^CN=(.*)$/$0/", "CN=x", "CN=x"),
            (r"RULE:^CN=(.*)$/\$1\\$1/", "CN=x", r"$1\x"),
            ("RULE:^CN=(?<user>.*)$/${user}!/", "CN=x", "x!"),
            // An optional group that did not take part inserts nothing.
            ("RULE:^CN=(x)?(.*)$/[$1]$2/", "CN=y", "[]y"),
            ("RULE:^CN=(.*)$/$1/U", "CN=Zoë", "ZOË"),
        ];
        for (rules, dn, expected) in cases {
            assert_eq!(mapper(rules).map(dn).unwrap(), expected, "{rules}");
        }
    }

    #[test]
    fn rule_applies_only_when_the_pattern_matches_the_whole_dn() {
        let mapper = mapper("RULE:a|ab/x/,DEFAULT");
        // `a|ab` matches all of "ab" only through its second branch, as Java's matches().
        assert_eq!(mapper.map("ab").unwrap(), "xb");
        assert_eq!(mapper.map("abc").unwrap(), "abc");
    }

    proptest! {
        #[test]
        fn principal_parse_never_panics(text in ".*") {
            if let Ok(principal) = KafkaPrincipal::parse(&text) {
                prop_assert_eq!(principal.to_string(), text);
            }
        }

        #[test]
        fn mapper_parse_and_map_never_panic(rules in ".*", dn in ".*") {
            if let Ok(mapper) = SslPrincipalMapper::parse(&rules) {
                let _ = mapper.map(&dn);
            }
        }

        #[test]
        fn mapper_parse_never_panics_on_rule_like_text(
            rules in r"(RULE:[\\/a-z$(){}.*1-3]{0,8}/[\\/a-z${}1-3]{0,6}/[LU]?|DEFAULT|[ ,\n]){0,4}",
            dn in "[a-z=,]{0,12}",
        ) {
            if let Ok(mapper) = SslPrincipalMapper::parse(&rules) {
                let _ = mapper.map(&dn);
            }
        }

        #[test]
        fn subject_dn_never_panics(der in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = subject_dn(&der);
        }

        #[test]
        fn name_formatting_never_panics(
            tag in any::<u8>(),
            last in any::<u8>(),
            value in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let oid = tlv(0x06, &[0x55, 0x04, last]);
            let attribute = tlv(0x30, &[oid, tlv(tag, &value)].concat());
            let der = name(&[vec![attribute]]);
            if let Ok((_, name)) = X509Name::from_der(&der) {
                let _ = rfc2253_name(&name);
            }
        }
    }
}
